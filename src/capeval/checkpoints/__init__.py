"""PAC-S and other CLIP checkpoints in their authors' formats, loaded into transformers' ``CLIPModel``.

``checkpoint=`` accepts:

- a state-dict file: the PAC-S authors' ``.pth`` (``{"state_dict": {...}}`` holding a full OpenAI-CLIP state
  dict as ``clip/model.py`` names it, or an OpenCLIP one, whose ViT CLIPs use the same names), with or
  without DataParallel ``module.`` prefixes; a state dict already in transformers' names is taken as is.
  Files are read with ``torch.load(weights_only=True)``: nothing in them can run;
- a converted transformers folder (``scripts/convert_pacscore.py`` writes one) or a Hub repo holding one
  (``"org/name"``);
- a file inside a Hub repo: ``"org/name/path/file.pth"``.

Loading fails loudly instead of half-loading: the architecture (widths, depths, patch, image size, heads)
is compared first, every tensor of the target model must come from the checkpoint and every tensor of the
checkpoint must be used.
"""

from __future__ import annotations

import os

import torch

from capeval.checkpoints.files import file_sha256, read_model_folder, read_state_dict, torch_load_weights
from capeval.checkpoints.layout import (
    HEAD_WIDTH,
    PACS_BASE_MODELS,
    CheckpointWarning,
    ClipGeometry,
    base_model_for,
    check_architecture,
    check_config_heads,
    convert_openai_state_dict,
    copy_into,
    is_transformers_layout,
)
from capeval.checkpoints.locate import PROVENANCE_FILE, ResolvedCheckpoint, resolve_checkpoint

PACS_WEIGHTS_URL = "https://drive.google.com/drive/folders/15Da_nh7CYv8xfryIdETG6dPFSqcBiqpd"
PACS_REPO_URL = "https://github.com/aimagelab/pacscore"

__all__ = [
    "HEAD_WIDTH",
    "PACS_BASE_MODELS",
    "PACS_REPO_URL",
    "PACS_WEIGHTS_URL",
    "PROVENANCE_FILE",
    "CheckpointWarning",
    "ClipGeometry",
    "ResolvedCheckpoint",
    "base_model_for",
    "check_architecture",
    "check_config_heads",
    "checkpoint_geometry",
    "checkpoint_tensors",
    "convert_openai_state_dict",
    "copy_into",
    "file_sha256",
    "load_checkpoint_into",
    "missing_checkpoint_help",
    "read_model_folder",
    "read_state_dict",
    "resolve_checkpoint",
    "torch_load_weights",
]


def missing_checkpoint_help() -> str:
    """Where PAC-S weights come from, for errors raised when none was given."""
    return (
        "PAC-S needs its fine-tuned weights: pass checkpoint= one of: the authors' file "
        f"(clip_ViT-B-32.pth or openClip_ViT-L-14.pth, from the Google Drive folder {PACS_WEIGHTS_URL} "
        f"linked in {PACS_REPO_URL}), a folder converted from it by scripts/convert_pacscore.py, "
        "a Hub repo holding such a folder ('org/name'), or a file in a Hub repo ('org/name/clip_ViT-B-32.pth')."
    )


def checkpoint_tensors(resolved: ResolvedCheckpoint, config) -> dict[str, torch.Tensor]:
    """A resolved checkpoint's tensors in transformers names, checked against ``config``'s architecture."""
    what = f"checkpoint {resolved.spec!r}"
    if resolved.kind == "model_folder":
        from transformers import CLIPConfig

        theirs = CLIPConfig.from_pretrained(resolved.path)
        diffs = ClipGeometry.from_config(theirs).differences(ClipGeometry.from_config(config))
        for tower in ("text_config", "vision_config"):
            for name in ("hidden_act", "num_attention_heads"):
                a, b = getattr(getattr(theirs, tower), name), getattr(getattr(config, tower), name)
                if a != b:
                    diffs.append(f"{tower}.{name} {a} vs {b}")
        if diffs:
            raise ValueError(f"{what} has another architecture than the model (checkpoint vs model): {diffs}")
        return read_model_folder(resolved.path)
    sd = read_state_dict(resolved.path)
    check_architecture(sd, config, what)
    return dict(sd) if is_transformers_layout(sd) else convert_openai_state_dict(sd)


def load_checkpoint_into(clip_model, checkpoint: str | os.PathLike) -> str:
    """Replace all weights of a transformers ``CLIPModel`` with a checkpoint's; return its signature tag.

    Args:
        clip_model: the model whose config (architecture, activation) the checkpoint must fit.
        checkpoint: a state-dict file, a converted folder, a Hub repo or a Hub file (see the module doc).

    Returns:
        str: ``label@sha256:<12 hex>``, e.g. ``clip_ViT-B-32@sha256:0123456789ab``.

    Raises:
        FileNotFoundError: the checkpoint is nowhere to be found (the message says where it looked).
        ValueError: unreadable or unsafe file, other architecture, missing or unused tensors.
    """
    resolved = resolve_checkpoint(checkpoint)
    copy_into(clip_model, checkpoint_tensors(resolved, clip_model.config), f"checkpoint {resolved.spec!r}")
    return resolved.tag


def checkpoint_geometry(resolved: ResolvedCheckpoint) -> ClipGeometry:
    """The architecture a checkpoint holds (read from its config or its tensors)."""
    if resolved.kind == "model_folder":
        from transformers import CLIPConfig

        return ClipGeometry.from_config(CLIPConfig.from_pretrained(resolved.path))
    sd = read_state_dict(resolved.path)
    if is_transformers_layout(sd):
        raise ValueError(
            f"checkpoint {resolved.spec!r} is in transformers' names: pass model= to give its config"
        )
    return ClipGeometry.from_state_dict(sd)
