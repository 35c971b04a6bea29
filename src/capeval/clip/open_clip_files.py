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

The tensors are built into a ``CLIPModel`` by ``openai_weights`` (the names OpenAI's and open_clip's ViT CLIPs share,
what Long-CLIP files share too) after their shapes are checked against the architecture. Configs using what ``CLIPModel`` lacks
(attentional pooling, layer scale, no pre-LayerNorm, timm or Hugging Face towers, custom text) are refused by name.
Texts go through OpenAI's BPE, as open_clip's default tokenizer: tokenizer files beside the weights, else the
cached tokenizer of ``openai/clip-vit-base-patch32``, with open_clip's reading of special-token text
(``<end_of_text>`` is end-of-text, ``<|endoftext|>`` plain text: ``families.OPEN_CLIP_FILE``). Images go through
open_clip's transform: for the default "shortest" resize the same PIL calls as OpenAI's, for "squash" a resize to
the square in the image's own mode with RGB after it (``image_geometry.ProcessorGeometry.rgb_after_resize``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from capeval.clip.open_clip_tables import (
    ARCHITECTURES,
    PRETRAINED,
    OpenClipArchitecture,
    PretrainedTag,
    base_name,
    tags_of,
)
from capeval.clip.openai_weights import clip_with_tokenizer

if TYPE_CHECKING:
    from capeval.clip.checkpoints.hashes import RegularFile

SPEC_PREFIX = "open_clip:"
CONFIG_FILE = "open_clip_config.json"  # open_clip's hf_hub layout: model_cfg and preprocess_cfg
WEIGHT_SUFFIXES = (".bin", ".pt", ".pth", ".safetensors")
_TENSORS_ONLY_HINT = (
    "open_clip saves its weights as a state dict of tensors (model.state_dict()): re-save that from a trusted copy, "
    "or use the safetensors file of its Hub repo."
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


def open_clip_backbone(model: str, checkpoint: str | None, cached: Callable):
    """The backbone of an OpenCLIP file: the file resolved (``resolve_open_clip``), named by its revision, then asked
    of the backbone cache, and built on a miss.

    Args:
        model: the ``model=`` string.
        checkpoint: PAC-S weights loaded over it, or ``None``.
        cached: ``cached(key, build)``, the backbone cache of ``backbones.load_backbone``: the backbone kept under
            ``key`` (everything of the file that decides its numbers), else the one it makes of ``build()``'s fields
            (``open_clip_fields``).

    Raises:
        FileNotFoundError, ValueError: see ``resolve_open_clip``, ``checkpoints.hashes.weights_file_revision`` and
            ``open_clip_fields``.
    """
    from capeval.clip.checkpoints.hashes import weights_file_revision

    source = resolve_open_clip(model)
    # The file, and beside it the sidecar and tokenizer files that may be read with it.
    file = weights_file_revision(source.path)
    # The source holds the architecture and the tag's preprocessing, which a spec names and the file does not:
    # one file named under two architectures is two models.
    key = ("open_clip", source, file.revision, checkpoint)
    return cached(key, lambda: open_clip_fields(source, file, model, checkpoint))


def _fitting_architecture(source: OpenClipSource, what: str) -> Callable:
    """The architecture of ``source``, for ``openai_weights.clip_model``: refused (naming every difference) when the
    geometry the file's tensors hold is not the architecture's."""
    from capeval.clip.checkpoints.layout import ClipGeometry

    arch = source.architecture
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

    def architecture(have) -> OpenClipArchitecture:
        if have != want:
            raise ValueError(
                f"{what} holds a {have.describe()}, not {source.name}'s {want.describe()}; differences (file vs "
                f"architecture): {', '.join(have.differences(want))}"
            )
        return arch

    return architecture


def open_clip_fields(source: OpenClipSource, file: RegularFile, model: str, checkpoint: str | None) -> dict:
    """The ``Backbone`` fields of an OpenCLIP file but its device and dtype: the model built and checked, still on
    the CPU in float32 (``load_backbone`` places it, as every model it loads).

    Args:
        source: the resolved file.
        file: it, found regular and named by its revision (``checkpoints.hashes.weights_file_revision``).
        model: the ``model=`` string, as errors name it.
        checkpoint: PAC-S weights loaded over it, or ``None``.

    Raises:
        ValueError: unreadable or unsafe file, NaN/inf weights, a shape that differs from the architecture (named),
            missing or unused tensors; no tokenizer (``openai_weights.load_tokenizer``) or one that does not fit.
    """
    from capeval.clip.checkpoints.files import read_finite_state_dict
    from capeval.clip.families import OPEN_CLIP_FILE
    from capeval.clip.image_constants import known_origin, open_clip_origin
    from capeval.clip.image_geometry import ProcessorGeometry

    what = f"model {model!r}"
    sd = read_finite_state_dict(file, what, hint=_TENSORS_ONLY_HINT)
    clip, text = clip_with_tokenizer(
        sd,
        _fitting_architecture(source, what),
        f"weights file {source.path}",
        "an OpenCLIP ViT state dict",
        family=OPEN_CLIP_FILE,
        folder=source.path.parent,
        what=what,
    )
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
        "revision": file.revision,
        "image_size": size,
        "image_mean": tuple(pre.mean),
        "image_std": tuple(pre.std),
        "context_length": text.context_length,  # the architecture's, as clip_config gave the text tower
        "weights": weights_tag,
        "origin": origin if origin is not None and known_origin(origin) is not None else None,
        "family": OPEN_CLIP_FILE,  # CLIPModel; captions tokenized as open_clip's SimpleTokenizer does
    }
