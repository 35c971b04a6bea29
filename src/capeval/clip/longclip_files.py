"""Long-CLIP's own checkpoint files as a base ``model=``: ``"longclip:/path/to/longclip-B.pt"``.

Long-CLIP (Zhang et al. 2024, github.com/beichenzbc/Long-CLIP) releases OpenAI-CLIP state dicts with a 248-position
text tower. Its text positions come from two tensors: ``model/model_longclip.py`` (``CLIP.encode_text``, at commit
3966af9) adds ``positional_embedding`` masked to the first 20 positions and ``positional_embedding_res`` masked to
positions 20-247 (``mask1``/``mask2`` there). A transformers ``CLIPModel`` has one position table, so it is built
here as rows 0-19 of the first and rows 20-247 of the second: the same sum, position by position. A conversion
that took ``positional_embedding`` alone scores every caption differently (up to 0.28 in CLIP-S on a random
model), which is why the authors' file is the reference to check a converted folder against.

Everything else is OpenAI's CLIP: QuickGELU, LayerNorm eps 1e-5, heads of width 64, OpenAI's BPE (its
``simple_tokenizer.py`` is OpenAI's, special tokens included) and OpenAI's image transform (``_transform`` in
``model/longclip.py``: bicubic resize of the short side, centre crop, OpenAI's mean and std). Files are read with
``torch.load(weights_only=True)``: nothing in them can run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

SPEC_PREFIX = "longclip:"
# model_longclip.py: mask1[:20] = 1 (positional_embedding), mask2[20:] = 1 (positional_embedding_res)
KEPT_POSITIONS = 20
_TENSORS_ONLY_HINT = (
    "Long-CLIP's released files are state dicts of tensors (torch.save(model.state_dict())): use the file as "
    "downloaded from its model zoo, or re-save its state dict from a trusted copy."
)


@dataclass(frozen=True)
class LongClipSource:
    """A resolved Long-CLIP file and how signatures name it."""

    path: Path

    @property
    def model_id(self) -> str:
        return f"{SPEC_PREFIX}{self.path.name}"


def resolve_longclip(model: str) -> LongClipSource:
    """The file a ``longclip:PATH`` spec names.

    Raises:
        ValueError: an empty path; FileNotFoundError: no such file.
    """
    text = model[len(SPEC_PREFIX) :]
    if not text:
        raise ValueError(f"model {model!r}: a Long-CLIP file is named 'longclip:/path/to/longclip-B.pt'")
    path = Path(os.path.expanduser(text))
    if not path.is_file():
        raise FileNotFoundError(f"model {model!r}: no Long-CLIP file at {path}")
    return LongClipSource(path.resolve())


def openai_state_dict(sd: dict[str, torch.Tensor], what: str) -> dict[str, torch.Tensor]:
    """The file's tensors with Long-CLIP's two position tables folded into one, as ``encode_text`` adds them.

    Raises:
        ValueError: ``positional_embedding_res`` absent (not a Long-CLIP file) or its shape unlike
            ``positional_embedding``'s.
    """
    if "positional_embedding_res" not in sd:
        raise ValueError(
            f"{what} has no positional_embedding_res: not a Long-CLIP checkpoint (an OpenAI or OpenCLIP state dict "
            "is named 'open_clip:ARCH/TAG:PATH', a PAC-S one is passed as checkpoint=)"
        )
    first, rest = sd["positional_embedding"], sd["positional_embedding_res"]
    if first.shape != rest.shape or first.dim() != 2 or first.shape[0] <= KEPT_POSITIONS:
        raise ValueError(
            f"{what}: positional_embedding {tuple(first.shape)} and positional_embedding_res {tuple(rest.shape)} "
            f"must be two (positions, width) tables of more than {KEPT_POSITIONS} positions"
        )
    out = {k: v for k, v in sd.items() if k != "positional_embedding_res"}
    out["positional_embedding"] = torch.cat([first[:KEPT_POSITIONS], rest[KEPT_POSITIONS:]])
    return out


def build_longclip_model(source: LongClipSource, what: str):
    """A ``CLIPModel`` holding the file's weights (architecture read from the tensors, OpenAI's conventions).

    Raises:
        ValueError: unreadable or unsafe file, NaN/inf weights, not a Long-CLIP ViT state dict, missing or unused
            tensors.
    """
    from capeval.clip.checkpoints.files import read_finite_state_dict
    from capeval.clip.checkpoints.layout import HEAD_WIDTH, ClipGeometry
    from capeval.clip.open_clip_files import clip_model_from_openai_names
    from capeval.clip.open_clip_tables import OpenClipArchitecture

    weights = f"weights file {source.path}"
    sd = read_finite_state_dict(source.path, what, hint=_TENSORS_ONLY_HINT)
    sd = openai_state_dict(dict(sd), weights)
    g = ClipGeometry.from_state_dict(sd, weights)
    arch = OpenClipArchitecture(
        g.embed_dim,
        g.image_size,
        g.patch_size,
        g.vision_width,
        g.vision_layers,
        HEAD_WIDTH,
        g.text_width,
        g.text_width // HEAD_WIDTH,
        g.text_layers,
        g.context_length,
        g.vocab_size,
        quick_gelu=True,
    )
    return clip_model_from_openai_names(sd, arch, weights, "a Long-CLIP ViT state dict")


def longclip_fields(source: LongClipSource, model: str, revision: str) -> dict:
    """The ``Backbone`` fields of a Long-CLIP file but its device and dtype: the model built and checked, still on the
    CPU in float32 (``load_backbone`` places it, as every model it loads).

    Raises:
        ValueError: see ``build_longclip_model``; no tokenizer (OpenAI's BPE beside the file or in the cache).
    """
    from capeval.clip.families import CLIP
    from capeval.clip.image_constants import OPENAI_IMAGE_MEAN, OPENAI_IMAGE_STD
    from capeval.clip.open_clip_files import load_tokenizer
    from capeval.clip.tokenizer_check import checked_tokenizer

    what = f"model {model!r}"
    clip = build_longclip_model(source, what)
    text = checked_tokenizer(lambda: load_tokenizer(source, what), CLIP, clip.config, what)
    return {
        "model": clip,
        "tokenizer": text.tokenizer,
        "model_id": source.model_id,
        "revision": revision,
        "image_size": clip.config.vision_config.image_size,
        "image_mean": tuple(OPENAI_IMAGE_MEAN),
        "image_std": tuple(OPENAI_IMAGE_STD),
        "context_length": text.context_length,  # the text tower's 248 positions
        "weights": None,
    }
