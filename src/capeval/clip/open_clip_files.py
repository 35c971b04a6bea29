"""OpenCLIP checkpoint files as a base ``model=``: a ``.bin``/``.pt``/``.pth``/``.safetensors`` state dict in
open_clip's names, loaded into transformers' ``CLIPModel``.

Two spellings:

- ``"open_clip:ARCH/TAG:/path/to/weights"``, e.g. ``"open_clip:ViT-B-32/laion2b_s34b_b79k:/data/open_clip_model.safetensors"``:
  the architecture fixes heads and activation (``open_clip_tables.ARCHITECTURES``), the pretrained tag the
  normalisation, resize and activation it was trained with (``open_clip_tables.PRETRAINED``). ``ARCH`` alone
  (no ``/TAG``) is refused unless every tag of the architecture agrees; a tag whose QuickGELU setting differs
  from the architecture's is refused (open_clip itself only warns, and scores with the wrong activation).
- a plain path to the weights file with open_clip's own ``open_clip_config.json`` beside it (the file
  ``open_clip.push_to_hf_hub`` writes: ``model_cfg`` and ``preprocess_cfg``), as in open_clip's Hub repos.

The tensors are converted by ``checkpoints.layout.convert_openai_state_dict`` (the names OpenAI's and open_clip's
ViT CLIPs share) after their shapes are checked against the architecture. Configs using what ``CLIPModel`` lacks
(attentional pooling, layer scale, no pre-LayerNorm, timm or Hugging Face towers, custom text) are refused by name.
Texts go through OpenAI's BPE, as open_clip's default tokenizer: tokenizer files beside the weights, else the
cached tokenizer of ``openai/clip-vit-base-patch32``, with open_clip's reading of special-token text
(``<end_of_text>`` is end-of-text, ``<|endoftext|>`` plain text: ``families.OPEN_CLIP_FILE``). Images go through
open_clip's transform: for the default "shortest" resize the same PIL calls as OpenAI's, for "squash" a resize to
the square in the image's own mode with RGB after it (``image_geometry.ProcessorGeometry.rgb_after_resize``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from capeval.clip.open_clip_tables import (
    ARCHITECTURES,
    LAYER_NORM_EPS,
    PRETRAINED,
    OpenClipArchitecture,
    PretrainedTag,
    base_name,
    tags_of,
)

SPEC_PREFIX = "open_clip:"
CONFIG_FILE = "open_clip_config.json"  # open_clip's hf_hub layout: model_cfg and preprocess_cfg
WEIGHT_SUFFIXES = (".bin", ".pt", ".pth", ".safetensors")
_TENSORS_ONLY_HINT = (
    "open_clip saves its weights as a state dict of tensors (model.state_dict()): re-save that from a trusted copy, "
    "or use the safetensors file of its Hub repo."
)
TOKENIZER_SOURCE = (
    "openai/clip-vit-base-patch32"  # OpenAI's BPE, open_clip's default tokenizer for these ViTs
)


@dataclass(frozen=True)
class OpenClipSource:
    """A resolved OpenCLIP file: its architecture, preprocessing, and how signatures name it."""

    path: Path
    name: str  # "ViT-B-32/laion2b_s34b_b79k", or the folder's name for a sidecar config
    architecture: OpenClipArchitecture
    preprocessing: PretrainedTag
    config_digest: str = ""  # of the sidecar config, when it decided the architecture

    @property
    def model_id(self) -> str:
        return f"{SPEC_PREFIX}{self.name}"


def resolve_open_clip(model: str) -> OpenClipSource:
    """Parse an ``open_clip:ARCH[/TAG]:PATH`` spec or a weights path with its sidecar config.

    Raises:
        FileNotFoundError: no such weights file.
        ValueError: a malformed spec, an unknown architecture or tag (the known ones listed), a tag trained with
            another activation than the architecture's, tags that disagree when none is named, a missing or
            unreadable sidecar, or a sidecar config using what CLIPModel lacks (named).
    """
    if model.startswith(SPEC_PREFIX):
        arch_tag, sep, path_text = model[len(SPEC_PREFIX) :].partition(":")
        if not sep or not path_text or not arch_tag:
            raise ValueError(
                f"model {model!r}: an OpenCLIP file is named 'open_clip:ARCH/TAG:/path/to/weights' (e.g. "
                "'open_clip:ViT-B-32/laion2b_s34b_b79k:/data/open_clip_pytorch_model.bin')"
            )
        architecture, _, tag = arch_tag.partition("/")
        path = _weights_path(path_text, model)
        return _from_tables(path, architecture, tag or None, model)
    path = _weights_path(model, model)
    sidecar = path.parent / CONFIG_FILE
    if not sidecar.is_file():
        if _is_longclip_file(path):
            raise ValueError(
                f"model {model!r} is a Long-CLIP checkpoint (it holds positional_embedding_res): name it "
                f"model='longclip:{path}'"
            )
        raise ValueError(
            f"model {model!r} is a weights file without open_clip's {CONFIG_FILE} beside it, so its architecture "
            f"is unknown: name it, model='open_clip:ARCH/TAG:{path}' (architectures: {', '.join(ARCHITECTURES)})"
        )
    return _from_sidecar(path, sidecar)


def _is_longclip_file(path: Path) -> bool:
    """Whether a weights file holds Long-CLIP's second position table (read safely; unreadable: no)."""
    from capeval.clip.checkpoints.files import read_state_dict

    try:
        return "positional_embedding_res" in read_state_dict(path, hint=_TENSORS_ONLY_HINT)
    except (ValueError, OSError):
        return False


def _weights_path(text: str, model: str) -> Path:
    path = Path(os.path.expanduser(text))
    if not path.is_file():
        raise FileNotFoundError(f"model {model!r}: no weights file at {path}")
    if path.suffix not in WEIGHT_SUFFIXES:
        raise ValueError(f"model {model!r}: {path.name} is not a weights file ({', '.join(WEIGHT_SUFFIXES)})")
    return path.resolve()


def _from_tables(path: Path, architecture: str, tag: str | None, model: str) -> OpenClipSource:
    arch = ARCHITECTURES.get(architecture)
    if arch is None:
        raise ValueError(
            f"model {model!r}: unknown OpenCLIP architecture {architecture!r}; capeval loads the ViT CLIPs "
            f"transformers' CLIPModel holds: {', '.join(ARCHITECTURES)}"
        )
    tags = tags_of(architecture)
    if tag is None:
        settings = {PRETRAINED[(base_name(architecture), t)] for t in tags}
        kinds = {s for s in settings if s.quick_gelu == arch.quick_gelu}
        if len(kinds) != 1:
            raise ValueError(
                f"model {model!r}: the pretrained tags of {architecture} differ in normalisation, resize or "
                f"activation, so name the tag the weights were trained as: 'open_clip:{architecture}/TAG:...' "
                f"with TAG one of {', '.join(tags)}"
            )
        return OpenClipSource(path, architecture, arch, kinds.pop())
    settings = PRETRAINED.get((base_name(architecture), tag))
    if settings is None:
        raise ValueError(
            f"model {model!r}: open_clip lists no pretrained tag {tag!r} for {architecture} (it lists "
            f"{', '.join(tags) or 'none'})"
        )
    if settings.quick_gelu != arch.quick_gelu:
        wanted = base_name(architecture) + ("-quickgelu" if settings.quick_gelu else "")
        raise ValueError(
            f"model {model!r}: {base_name(architecture)}/{tag} was trained with "
            f"{'QuickGELU' if settings.quick_gelu else 'GELU'}, but architecture {architecture} uses "
            f"{'QuickGELU' if arch.quick_gelu else 'GELU'}: name it open_clip:{wanted}/{tag}"
        )
    return OpenClipSource(path, f"{architecture}/{tag}", arch, settings)


def _from_sidecar(path: Path, sidecar: Path) -> OpenClipSource:
    from capeval.clip.open_clip_sidecar import read_sidecar

    arch, settings, digest = read_sidecar(sidecar)
    return OpenClipSource(path, path.parent.name, arch, settings, digest)


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


def build_open_clip_model(source: OpenClipSource, what: str):
    """A ``CLIPModel`` holding the file's weights, after its shapes are checked against the architecture.

    Raises:
        ValueError: unreadable or unsafe file, NaN/inf weights, a shape that differs from the architecture (named),
            missing or unused tensors.
    """
    from capeval.clip.checkpoints.files import read_finite_state_dict
    from capeval.clip.checkpoints.layout import ClipGeometry

    weights = f"weights file {source.path}"
    sd = read_finite_state_dict(source.path, what, hint=_TENSORS_ONLY_HINT)
    arch = source.architecture
    have = ClipGeometry.from_state_dict(sd, weights)
    want = ClipGeometry(
        arch.vision_width,
        arch.vision_layers,
        arch.patch_size,
        arch.image_size,
        arch.text_width,
        arch.text_layers,
        arch.context_length,
        arch.vocab_size,
        arch.embed_dim,
    )
    if have != want:
        raise ValueError(
            f"{what} holds a {have.describe()}, not {source.name}'s {want.describe()}; differences (file vs "
            f"architecture): {', '.join(have.differences(want))}"
        )
    return clip_model_from_openai_names(sd, arch, weights, "an OpenCLIP ViT state dict")


def clip_model_from_openai_names(sd, arch: OpenClipArchitecture, weights: str, kind: str):
    """A ``CLIPModel`` of ``arch`` holding ``sd``, tensors in OpenAI's names (OpenCLIP and Long-CLIP files);
    ``weights`` names the file and ``kind`` what it should be, in errors.

    Raises:
        ValueError: the MLP tensors that give the widths missing, or tensors missing or unused by the model.
    """
    from transformers import CLIPModel

    from capeval.clip.checkpoints.layout import convert_openai_state_dict, copy_into

    fc = ("visual.transformer.resblocks.0.mlp.c_fc.weight", "transformer.resblocks.0.mlp.c_fc.weight")
    missing = [k for k in fc if k not in sd]
    if missing:
        raise ValueError(f"{weights} lacks tensors {missing}: not {kind}")
    config = clip_config(arch, sd[fc[0]].shape[0], sd[fc[1]].shape[0])
    torch.manual_seed(0)  # every tensor is overwritten below; a fixed seed keeps the build itself repeatable
    model = CLIPModel(config)
    copy_into(model, convert_openai_state_dict(sd, weights), weights, check_base=False)
    return model


def load_tokenizer(source: OpenClipSource, what: str):
    """OpenAI's BPE tokenizer: from files beside the weights, else the cached ``openai/clip-vit-base-patch32`` one.

    Raises:
        ValueError: neither is available (the files to add named).
    """
    from transformers import CLIPTokenizer

    from capeval.clip.tokenizer_check import missing_tokenizer_files

    folder = source.path.parent
    if not missing_tokenizer_files(folder):
        return CLIPTokenizer.from_pretrained(str(folder))
    from huggingface_hub import try_to_load_from_cache

    # Asked of the cache first: transformers gives back an empty tokenizer for a repo it cannot find locally.
    cached = [try_to_load_from_cache(TOKENIZER_SOURCE, name) for name in ("tokenizer.json", "vocab.json")]
    try:
        if not any(isinstance(c, str) for c in cached):
            raise OSError(f"{TOKENIZER_SOURCE} is not in the Hugging Face cache")
        return CLIPTokenizer.from_pretrained(TOKENIZER_SOURCE, local_files_only=True)
    except OSError as err:
        raise ValueError(
            f"{what}: no tokenizer: put OpenAI's CLIP tokenizer files (tokenizer.json, or vocab.json and merges.txt, "
            f"as in {TOKENIZER_SOURCE}) beside the weights in {folder}, or have {TOKENIZER_SOURCE} in the Hugging "
            "Face cache"
        ) from err


def open_clip_fields(
    source: OpenClipSource,
    model: str,
    revision: str,
    checkpoint: str | None,
) -> dict:
    """The ``Backbone`` fields of an OpenCLIP file but its device and dtype: the model built and checked, still on
    the CPU in float32 (``load_backbone`` places it, as every model it loads).

    Raises:
        ValueError: see ``build_open_clip_model`` and ``load_tokenizer``; a tokenizer that does not fit.
    """
    from capeval.clip.families import OPEN_CLIP_FILE
    from capeval.clip.image_constants import known_origin, open_clip_origin
    from capeval.clip.image_geometry import ProcessorGeometry
    from capeval.clip.tokenizer_check import checked_tokenizer

    what = f"model {model!r}"
    clip = build_open_clip_model(source, what)
    text = checked_tokenizer(lambda: load_tokenizer(source, what), OPEN_CLIP_FILE, clip.config, what)
    weights_tag = None
    if checkpoint is not None:
        from capeval.clip.checkpoints.load import load_checkpoint_into

        weights_tag = load_checkpoint_into(clip, checkpoint)
    arch, pre = source.architecture, source.preprocessing
    size = arch.image_size
    if pre.resize_mode == "squash":  # open_clip: Resize((S, S)) in the image's own mode, no crop, RGB after
        size = ProcessorGeometry(size, ("exact", size, size), None, 3, rgb_after_resize=True)
    origin = open_clip_origin(*source.name.split("/", 1)) if "/" in source.name else None
    return {
        "model": clip,
        "tokenizer": text.tokenizer,
        "model_id": source.model_id,
        "revision": revision,
        "image_size": size,
        "image_mean": tuple(pre.mean),
        "image_std": tuple(pre.std),
        "context_length": text.context_length,  # the architecture's, as clip_config gave the text tower
        "weights": weights_tag,
        "origin": origin if origin is not None and known_origin(origin) is not None else None,
        "family": OPEN_CLIP_FILE,  # CLIPModel; captions tokenized as open_clip's SimpleTokenizer does
    }
