"""open_clip's ``open_clip_config.json`` beside a weights file, read into the architecture and preprocessing a
transformers ``CLIPModel`` reproduces, every field checked before a tensor is read.

The file is the one ``open_clip.push_to_hf_hub`` writes: ``model_cfg`` (open_clip's ``CLIPVisionCfg`` and
``CLIPTextCfg``, their defaults where a key is left out) and ``preprocess_cfg`` (its ``PreprocessCfg``). A value
no model can have (zero or negative sizes, a width the heads do not divide, a non-finite or absurd mean/std) is
refused naming the file and the field, instead of failing deep inside transformers or scoring every image alike.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from capeval.clip.image_constants import check_mean_std
from capeval.clip.open_clip_tables import OpenClipArchitecture, PretrainedTag

# model_cfg keys a CLIPModel reproduces; any other (attentional_pool, ls_init_value, timm_model_name, ...) refuses.
_VISION_KEYS = {"image_size", "layers", "width", "head_width", "mlp_ratio", "patch_size", "patch_dropout"}
_TEXT_KEYS = {"context_length", "vocab_size", "width", "heads", "layers", "mlp_ratio"}
_TOP_KEYS = {"embed_dim", "quick_gelu", "vision_cfg", "text_cfg"}
# (field, open_clip's default) of the sizes read here; open_clip model.py CLIPVisionCfg / CLIPTextCfg.
_VISION_SIZES = (("image_size", 224), ("patch_size", 16), ("width", 768), ("layers", 12), ("head_width", 64))
_TEXT_SIZES = (("width", 512), ("heads", 8), ("layers", 12), ("context_length", 77), ("vocab_size", 49408))


def read_sidecar(sidecar: Path) -> tuple[OpenClipArchitecture, PretrainedTag, str]:
    """The architecture, the preprocessing and a digest of an ``open_clip_config.json``.

    Returns:
        ``(architecture, preprocessing, digest)``: the digest (12 hex digits of the file's sha256) names the
        file's contents in revisions and cache keys.

    Raises:
        ValueError: unreadable JSON, a missing ``model_cfg`` part, a setting CLIPModel lacks, a size that is not
            a positive integer, heads that do not divide the width, or a mean/std out of bounds: each naming the
            file and the field.
    """
    try:
        raw = sidecar.read_text()
        config = json.loads(raw)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{sidecar} is not readable JSON ({err})") from err
    model_cfg = config.get("model_cfg") if isinstance(config, dict) else None
    if not isinstance(model_cfg, dict):
        raise ValueError(f"{sidecar} has no model_cfg object (open_clip's hf_hub layout)")
    arch = _architecture(model_cfg, sidecar)
    pre = config.get("preprocess_cfg", {})
    if not isinstance(pre, dict):
        raise ValueError(f"{sidecar}: preprocess_cfg must be an object")
    digest = hashlib.sha256(raw.encode()).hexdigest()[:12]
    return arch, _preprocessing(pre, sidecar, arch.quick_gelu), digest


def _architecture(model_cfg: dict, sidecar: Path) -> OpenClipArchitecture:
    vision, text = model_cfg.get("vision_cfg"), model_cfg.get("text_cfg")
    if not isinstance(vision, dict) or not isinstance(text, dict):
        raise ValueError(f"{sidecar}: model_cfg needs vision_cfg and text_cfg objects")
    foreign = sorted(
        [k for k in model_cfg if k not in _TOP_KEYS]
        + [f"vision_cfg.{k}" for k in vision if k not in _VISION_KEYS]
        + [f"text_cfg.{k}" for k in text if k not in _TEXT_KEYS]
    )
    if foreign:
        raise ValueError(
            f"{sidecar}: model_cfg sets {foreign}, which transformers' CLIPModel does not reproduce; capeval loads "
            "plain ViT CLIPs (see capeval.clip.open_clip_tables)"
        )
    if isinstance(vision.get("layers"), list):
        raise ValueError(f"{sidecar}: vision_cfg layers is a list: a ResNet tower is not a ViT")
    if "embed_dim" not in model_cfg:
        raise ValueError(f"{sidecar}: model_cfg has no embed_dim")
    embed_dim = _size(sidecar, "model_cfg.embed_dim", model_cfg["embed_dim"])
    v = {k: _size(sidecar, f"model_cfg.vision_cfg.{k}", vision.get(k, d)) for k, d in _VISION_SIZES}
    t = {k: _size(sidecar, f"model_cfg.text_cfg.{k}", text.get(k, d)) for k, d in _TEXT_SIZES}
    # open_clip: heads = width // head_width, then nn.MultiheadAttention(width, heads), which needs width % heads == 0.
    vision_heads = v["width"] // v["head_width"]
    if vision_heads == 0:
        raise ValueError(
            f"{sidecar}: model_cfg.vision_cfg.head_width {v['head_width']} is wider than width {v['width']}"
        )
    if v["width"] % vision_heads:
        raise ValueError(
            f"{sidecar}: model_cfg.vision_cfg.width {v['width']} is not divisible by its {vision_heads} heads "
            f"(width // head_width {v['head_width']})"
        )
    if t["width"] % t["heads"]:
        raise ValueError(
            f"{sidecar}: model_cfg.text_cfg.width {t['width']} is not divisible by heads {t['heads']}"
        )
    return OpenClipArchitecture(
        embed_dim=embed_dim,
        image_size=v["image_size"],
        patch_size=v["patch_size"],
        vision_width=v["width"],
        vision_layers=v["layers"],
        vision_head_width=v["head_width"],
        text_width=t["width"],
        text_heads=t["heads"],
        text_layers=t["layers"],
        context_length=t["context_length"],
        vocab_size=t["vocab_size"],
        quick_gelu=bool(model_cfg.get("quick_gelu", False)),
    )


def _size(sidecar: Path, field: str, value) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{sidecar}: {field} must be a positive integer, got {value!r}")
    return value


def _preprocessing(pre: dict, sidecar: Path, quick_gelu: bool) -> PretrainedTag:
    """open_clip's PreprocessCfg (its defaults: OpenAI mean/std, bicubic, "shortest") as a PretrainedTag."""
    interpolation = pre.get("interpolation", "bicubic")
    resize_mode = pre.get("resize_mode", "shortest")
    if interpolation != "bicubic" or resize_mode not in ("shortest", "squash"):
        raise ValueError(
            f"{sidecar}: preprocess_cfg has interpolation={interpolation!r}, resize_mode={resize_mode!r}; capeval "
            "reproduces bicubic with 'shortest' (resize and centre crop) or 'squash'"
        )
    tag = PretrainedTag(resize_mode=resize_mode, quick_gelu=quick_gelu)
    # The check every preprocessor file and image processor goes through (capeval.clip.image_constants).
    mean, std = check_mean_std(
        str(sidecar),
        ("preprocess_cfg.mean", pre.get("mean", tag.mean)),
        ("preprocess_cfg.std", pre.get("std", tag.std)),
    )
    return PretrainedTag(mean, std, resize_mode, quick_gelu)
