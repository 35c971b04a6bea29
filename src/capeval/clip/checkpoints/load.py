"""Loading a checkpoint's tensors into a transformers ``CLIPModel``, checked against its architecture."""

from __future__ import annotations

import os

import torch

from capeval.clip.checkpoints.files import check_finite, read_model_folder, read_state_dict
from capeval.clip.checkpoints.layout import (
    ClipGeometry,
    check_architecture,
    convert_openai_state_dict,
    copy_into,
    is_transformers_layout,
)
from capeval.clip.checkpoints.locate import ResolvedCheckpoint, resolve_checkpoint

PACS_WEIGHTS_URL = "https://drive.google.com/drive/folders/15Da_nh7CYv8xfryIdETG6dPFSqcBiqpd"
PACS_REPO_URL = "https://github.com/aimagelab/pacscore"


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
    where = what if str(resolved.path) == resolved.spec else f"{what} ({resolved.path})"
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
        sd = read_model_folder(resolved.path)
        check_finite(sd.items(), where)
        return sd
    sd = read_state_dict(resolved.path)
    check_finite(sd.items(), where)
    check_architecture(sd, config, where)
    return dict(sd) if is_transformers_layout(sd) else convert_openai_state_dict(sd, where)


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
    return ClipGeometry.from_state_dict(sd, f"checkpoint {resolved.spec!r}")
