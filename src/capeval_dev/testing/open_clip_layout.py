"""A transformers ``CLIPModel``'s weights written back in open_clip's names, as open_clip saves them, for tests.

The inverse of ``capeval.clip.checkpoints.layout.convert_openai_state_dict``: q, k and v projections fused into
``attn.in_proj_weight``/``in_proj_bias`` (in that order), linear projections transposed into (in, out)
matrices, transformers' block names back to ``ln_1``, ``mlp.c_fc``, ... (open_clip ``model.py`` /
``transformer.py``: ``VisionTransformer``, ``TextTransformer``, ``ResidualAttentionBlock``).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from capeval.clip.checkpoints.layout import _BLOCK_RENAMES, _TOP_LEVEL


def open_clip_state_dict(model) -> dict[str, torch.Tensor]:
    """(name -> tensor) of a ``CLIPModel`` in open_clip's names (position ids dropped: open_clip has none)."""
    sd = {k: v.detach().clone() for k, v in model.state_dict().items() if not k.endswith("position_ids")}
    out: dict[str, torch.Tensor] = {}
    for src, (dst, transpose) in _TOP_LEVEL.items():
        out[src] = sd.pop(dst).t().contiguous() if transpose else sd.pop(dst)
    towers = (
        ("transformer.resblocks.", "text_model.encoder.layers.", model.config.text_config.num_hidden_layers),
        ("visual.transformer.resblocks.", "vision_model.encoder.layers.", model.config.vision_config.num_hidden_layers),
    )  # fmt: skip
    for src_prefix, dst_prefix, layers in towers:
        for i in range(layers):
            s, d = f"{src_prefix}{i}.", f"{dst_prefix}{i}."
            for part in ("weight", "bias"):
                out[f"{s}attn.in_proj_{part}"] = torch.cat(
                    [sd.pop(f"{d}self_attn.{name}_proj.{part}") for name in ("q", "k", "v")]
                )
            for src_name, dst_name in _BLOCK_RENAMES.items():
                for part in ("weight", "bias"):
                    out[f"{s}{src_name}.{part}"] = sd.pop(f"{d}{dst_name}.{part}")
    if sd:
        raise ValueError(f"tensors left without an open_clip name: {sorted(sd)[:6]}")
    return out


def open_clip_model_cfg(model, quick_gelu: bool) -> dict:
    """The ``model_cfg`` of ``open_clip_config.json`` describing a ``CLIPModel``'s architecture."""
    v, t = model.config.vision_config, model.config.text_config
    return {
        "embed_dim": model.config.projection_dim,
        "quick_gelu": quick_gelu,
        "vision_cfg": {
            "image_size": v.image_size,
            "layers": v.num_hidden_layers,
            "width": v.hidden_size,
            "head_width": v.hidden_size // v.num_attention_heads,
            "patch_size": v.patch_size,
        },
        "text_cfg": {
            "context_length": t.max_position_embeddings,
            "vocab_size": t.vocab_size,
            "width": t.hidden_size,
            "heads": t.num_attention_heads,
            "layers": t.num_hidden_layers,
        },
    }


def write_open_clip_file(
    model,
    folder: str | Path,
    filename: str = "open_clip_pytorch_model.bin",
    preprocess_cfg: dict | None = None,
    quick_gelu: bool | None = None,
    tokenizer=None,
) -> Path:
    """Save a ``CLIPModel``'s weights as open_clip does (``torch.save`` of the state dict, or safetensors by the
    file's suffix), with ``open_clip_config.json`` when ``preprocess_cfg`` is given and the tokenizer's files when
    one is given.

    Returns:
        Path: the weights file.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / filename
    sd = open_clip_state_dict(model)
    if path.suffix == ".safetensors":
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in sd.items()}, str(path))
    else:
        torch.save(sd, path)
    if preprocess_cfg is not None:
        if quick_gelu is None:
            quick_gelu = model.config.text_config.hidden_act == "quick_gelu"
        config = {"model_cfg": open_clip_model_cfg(model, quick_gelu), "preprocess_cfg": preprocess_cfg}
        (folder / "open_clip_config.json").write_text(json.dumps(config, indent=2))
    if tokenizer is not None:
        tokenizer.save_pretrained(str(folder))
    return path
