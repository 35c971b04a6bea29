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
``torch.load(weights_only=True)``: nothing in them can run. The model and its tokenizer are built as an OpenCLIP
file's are (``openai_weights``), from the folded tensors.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from capeval.clip.open_clip_tables import OpenClipArchitecture

if TYPE_CHECKING:
    from capeval.clip.checkpoints.hashes import RegularFile
    from capeval.clip.checkpoints.layout import ClipGeometry

SPEC_PREFIX = "longclip:"
# model_longclip.py: mask1[:20] = 1 (positional_embedding), mask2[20:] = 1 (positional_embedding_res)
KEPT_POSITIONS = 20
_TENSORS_ONLY_HINT = (
    "Long-CLIP's released files are state dicts of tensors (torch.save(model.state_dict())): use the file as "
    "downloaded from its model zoo, or re-save its state dict from a trusted copy."
)
_KIND = "a Long-CLIP ViT state dict"


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


def longclip_backbone(model: str, cached: Callable):
    """The backbone of a Long-CLIP file: the file resolved (``resolve_longclip``), named by its revision (the file's
    and its tokenizer files' hash), then asked of the backbone cache, and built on a miss.

    Args:
        model: the ``model=`` string.
        cached: ``cached(key, build)``, the backbone cache of ``backbones.load_backbone``: the backbone kept under
            ``key``, else the one it makes of ``build()``'s fields (``longclip_fields``).

    Raises:
        FileNotFoundError, ValueError: see ``resolve_longclip``, ``checkpoints.hashes.weights_file_revision`` and
            ``longclip_fields``.
    """
    from capeval.clip.checkpoints.hashes import weights_file_revision

    source = resolve_longclip(model)
    file = weights_file_revision(source.path)
    return cached(("longclip", source, file.revision), lambda: longclip_fields(source, file, model))


def _architecture(g: ClipGeometry) -> OpenClipArchitecture:
    """The architecture of the geometry a Long-CLIP file holds: OpenAI's conventions (64-wide heads, QuickGELU)."""
    from capeval.clip.checkpoints.layout import HEAD_WIDTH

    return OpenClipArchitecture(
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


def _openai_tensors(file: RegularFile, source: LongClipSource, what: str) -> dict[str, torch.Tensor]:
    """The file's tensors, checked finite, its position tables folded (``openai_state_dict``)."""
    from capeval.clip.checkpoints.files import read_finite_state_dict

    sd = read_finite_state_dict(file, what, hint=_TENSORS_ONLY_HINT)
    return openai_state_dict(dict(sd), f"weights file {source.path}")


def longclip_fields(source: LongClipSource, file: RegularFile, model: str) -> dict:
    """The ``Backbone`` fields of a Long-CLIP file but its device and dtype: the model built and checked, still on the
    CPU in float32 (``load_backbone`` places it, as every model it loads).

    Args:
        source: the resolved file.
        file: it, found regular and named by its revision (``checkpoints.hashes.weights_file_revision``).
        model: the ``model=`` string, as errors name it.

    Raises:
        ValueError: unreadable or unsafe file, NaN/inf weights, not a Long-CLIP ViT state dict, missing or unused
            tensors; no tokenizer (OpenAI's BPE beside the file or in the cache).
    """
    from capeval.clip.families import CLIP
    from capeval.clip.image_constants import OPENAI_IMAGE_MEAN, OPENAI_IMAGE_STD
    from capeval.clip.openai_weights import clip_with_tokenizer

    what = f"model {model!r}"
    clip, text = clip_with_tokenizer(
        _openai_tensors(file, source, what),
        _architecture,
        f"weights file {source.path}",
        _KIND,
        family=CLIP,
        folder=source.path.parent,
        what=what,
    )
    return {
        "model": clip,
        "tokenizer": text.tokenizer,
        "model_id": source.model_id,
        "revision": file.revision,
        "image_size": clip.config.vision_config.image_size,
        "image_mean": tuple(OPENAI_IMAGE_MEAN),
        "image_std": tuple(OPENAI_IMAGE_STD),
        "context_length": text.context_length,  # the text tower's 248 positions
        "weights": None,
    }
