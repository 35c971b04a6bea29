"""What OpenCLIP and Long-CLIP files share: tensors in OpenAI's names built into a transformers ``CLIPModel``, and
OpenAI's BPE tokenizer read beside the file or from the Hugging Face cache.

A form module (``open_clip_files``, ``longclip_files``) reads its file's tensors, brings them to OpenAI's names
(Long-CLIP folds its two position tables) and calls ``clip_with_tokenizer`` once, with ``architecture``: the
function that gives (or refuses) the architecture of the geometry the tensors hold. The model is built on the meta
device (``checkpoints.layout.openai_clip_model``): every tensor comes from the file, none is initialised first.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from capeval.clip.open_clip_tables import LAYER_NORM_EPS, OpenClipArchitecture

if TYPE_CHECKING:
    from capeval.clip.checkpoints.layout import ClipGeometry

TOKENIZER_SOURCE = (
    "openai/clip-vit-base-patch32"  # OpenAI's BPE, open_clip's default tokenizer for these ViTs
)
# The tensors whose rows give the MLP widths (open_clip's mlp_ratio), vision then text.
_MLP_TENSORS = ("visual.transformer.resblocks.0.mlp.c_fc.weight", "transformer.resblocks.0.mlp.c_fc.weight")


def clip_config(arch: OpenClipArchitecture, vision_mlp: int, text_mlp: int):
    """The transformers ``CLIPConfig`` of an architecture (MLP widths from the tensors: open_clip's mlp_ratio)."""
    from transformers import CLIPConfig

    act = "quick_gelu" if arch.quick_gelu else "gelu"  # open_clip: QuickGELU, else nn.GELU (exact erf)
    return CLIPConfig(
        text_config={
            "vocab_size": arch.vocab_size,
            "hidden_size": arch.text_width,
            "intermediate_size": text_mlp,
            "num_hidden_layers": arch.text_layers,
            "num_attention_heads": arch.text_heads,
            "max_position_embeddings": arch.context_length,
            "hidden_act": act,
            "layer_norm_eps": LAYER_NORM_EPS,
            "projection_dim": arch.embed_dim,
            "bos_token_id": 49406,  # OpenAI's BPE: <|startoftext|>, <|endoftext|> (pooled: open_clip's argmax)
            "eos_token_id": 49407,
        },
        vision_config={
            "hidden_size": arch.vision_width,
            "intermediate_size": vision_mlp,
            "num_hidden_layers": arch.vision_layers,
            "num_attention_heads": arch.vision_heads,
            "image_size": arch.image_size,
            "patch_size": arch.patch_size,
            "hidden_act": act,
            "layer_norm_eps": LAYER_NORM_EPS,
            "projection_dim": arch.embed_dim,
        },
        projection_dim=arch.embed_dim,
    )


def clip_model(
    sd: dict[str, torch.Tensor],
    architecture: Callable[[ClipGeometry], OpenClipArchitecture],
    weights: str,
    kind: str,
):
    """A ``CLIPModel`` holding ``sd``, tensors in OpenAI's names, of the architecture ``architecture`` gives for the
    geometry they hold; ``weights`` names the file and ``kind`` what it should be, in errors.

    Raises:
        ValueError: what ``architecture`` raises; the MLP tensors that give the widths missing; see
            ``checkpoints.layout.openai_clip_model`` (not a CLIP state dict, tensors missing or unused).
    """
    from transformers import CLIPModel

    from capeval.clip.checkpoints.layout import openai_clip_model

    def empty_model(geometry: ClipGeometry):
        arch = architecture(geometry)
        missing = [k for k in _MLP_TENSORS if k not in sd]
        if missing:
            raise ValueError(f"{weights} lacks tensors {missing}: not {kind}")
        config = clip_config(arch, sd[_MLP_TENSORS[0]].shape[0], sd[_MLP_TENSORS[1]].shape[0])
        with torch.device("meta"):  # no initialisation: every tensor is set from the file
            return CLIPModel(config)

    return openai_clip_model(sd, empty_model, weights)


def clip_with_tokenizer(
    sd: dict[str, torch.Tensor],
    architecture: Callable[[ClipGeometry], OpenClipArchitecture],
    weights: str,
    kind: str,
    *,
    family,
    folder: Path,
    what: str,
):
    """``clip_model`` and its tokenizer, checked for the family (``tokenizer_check.checked_tokenizer``): OpenAI's BPE
    from the files in ``folder`` (beside the weights), else the cached ``TOKENIZER_SOURCE``.

    Returns:
        ``(model, text)``: the ``CLIPModel`` and the ``TextSettings`` of its tokenizer.

    Raises:
        ValueError: see ``clip_model`` and ``load_tokenizer``; a tokenizer that does not fit.
    """
    from capeval.clip.tokenizer_check import checked_tokenizer

    clip = clip_model(sd, architecture, weights, kind)
    text = checked_tokenizer(lambda: load_tokenizer(folder, what), family, clip.config, what)
    return clip, text


def load_tokenizer(folder: Path, what: str):
    """OpenAI's BPE tokenizer: from files in ``folder``, else the cached ``TOKENIZER_SOURCE`` one.

    Raises:
        ValueError: neither is available (the files to add named).
    """
    from transformers import CLIPTokenizer

    from capeval.clip.tokenizer_check import missing_tokenizer_files, read_once

    if not missing_tokenizer_files(folder):
        return read_once(lambda: CLIPTokenizer.from_pretrained(str(folder)), folder, "CLIPTokenizer")
    source = TOKENIZER_SOURCE
    from huggingface_hub import try_to_load_from_cache

    # Asked of the cache first: transformers gives back an empty tokenizer for a repo it cannot find locally.
    cached = [try_to_load_from_cache(source, name) for name in ("tokenizer.json", "vocab.json")]
    try:
        found = [Path(c) for c in cached if isinstance(c, str)]
        if not found:
            raise OSError(f"{source} is not in the Hugging Face cache")
        snapshot = found[0].parent
        return read_once(
            lambda: CLIPTokenizer.from_pretrained(source, local_files_only=True), snapshot, "CLIPTokenizer"
        )
    except OSError as err:
        raise ValueError(
            f"{what}: no tokenizer: put OpenAI's CLIP tokenizer files (tokenizer.json, or vocab.json and merges.txt, "
            f"as in {source}) beside the weights in {folder}, or have {source} in the Hugging "
            "Face cache"
        ) from err
