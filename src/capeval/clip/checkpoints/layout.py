"""OpenAI/OpenCLIP ViT-CLIP state dicts in transformers' ``CLIPModel`` names, checked before they are copied.

The key and tensor mapping: fused attention projections split into q, k, v; the (in, out) projection
matrices transposed into linear weights; position ids (which no checkpoint carries) reset to 0..n-1.
The architecture is read from tensor shapes, as ``clip/model.py build_model`` reads it, and compared
with the target config before anything is copied; every target tensor must be set and every source
tensor used.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields

import torch

from capeval.diagnostics.categories import CheckpointWarning, user_stacklevel

HEAD_WIDTH = 64  # clip/model.py build_model and OpenCLIP's CLIPVisionCfg: heads = width // 64
# Which transformers model each published PAC-S checkpoint was fine-tuned from (Sarto et al. 2023, README:
# clip_ViT-B-32.pth on OpenAI ViT-B/32; openClip_ViT-L-14.pth on OpenCLIP ViT-L-14 laion2b_s32b_b82k).
PACS_BASE_MODELS = {
    "ViT-B/32": "openai/clip-vit-base-patch32",
    "ViT-L/14": "laion/CLIP-ViT-L-14-laion2B-s32B-b82K",
}
# Integers that OpenAI's JIT archives keep beside the weights (clip/model.py build_model drops them too).
METADATA_KEYS = frozenset({"input_resolution", "context_length", "vocab_size"})
# Block sub-modules: OpenAI/OpenCLIP name -> transformers name (the fused attention is split separately).
_BLOCK_RENAMES = {
    "ln_1": "layer_norm1",
    "ln_2": "layer_norm2",
    "mlp.c_fc": "mlp.fc1",
    "mlp.c_proj": "mlp.fc2",
    "attn.out_proj": "self_attn.out_proj",
}
# Top-level tensors: source name -> (target name, transposed). OpenAI keeps projections as (in, out)
# matrices applied as x @ P; transformers keeps nn.Linear weights (out, in).
_TOP_LEVEL = {
    "token_embedding.weight": ("text_model.embeddings.token_embedding.weight", False),
    "positional_embedding": ("text_model.embeddings.position_embedding.weight", False),
    "ln_final.weight": ("text_model.final_layer_norm.weight", False),
    "ln_final.bias": ("text_model.final_layer_norm.bias", False),
    "text_projection": ("text_projection.weight", True),
    "logit_scale": ("logit_scale", False),
    "visual.class_embedding": ("vision_model.embeddings.class_embedding", False),
    "visual.conv1.weight": ("vision_model.embeddings.patch_embedding.weight", False),
    "visual.positional_embedding": ("vision_model.embeddings.position_embedding.weight", False),
    "visual.ln_pre.weight": ("vision_model.pre_layrnorm.weight", False),
    "visual.ln_pre.bias": ("vision_model.pre_layrnorm.bias", False),
    "visual.ln_post.weight": ("vision_model.post_layernorm.weight", False),
    "visual.ln_post.bias": ("vision_model.post_layernorm.bias", False),
    "visual.proj": ("visual_projection.weight", True),
}


@dataclass(frozen=True)
class ClipGeometry:
    """The shape of a ViT CLIP: everything a state dict fixes (heads follow from widths)."""

    vision_width: int
    vision_layers: int
    patch_size: int
    image_size: int
    text_width: int
    text_layers: int
    context_length: int
    vocab_size: int
    embed_dim: int

    @property
    def name(self) -> str:
        """``ViT-B/32``, ``ViT-L/14``... for the released geometries, else ``custom ViT``."""
        return _KNOWN_GEOMETRIES.get(self, "custom ViT")

    def describe(self) -> str:
        return (
            f"{self.name} (vision {self.vision_width} wide x {self.vision_layers} layers, patch {self.patch_size}, "
            f"{self.image_size} px; text {self.text_width} wide x {self.text_layers} layers; "
            f"embedding {self.embed_dim})"
        )

    def differences(self, other: ClipGeometry) -> list[str]:
        return [
            f"{f.name} {getattr(self, f.name)} vs {getattr(other, f.name)}"
            for f in fields(self)
            if getattr(self, f.name) != getattr(other, f.name)
        ]

    @classmethod
    def from_config(cls, config) -> ClipGeometry:
        """From a transformers ``CLIPConfig``."""
        v, t = config.vision_config, config.text_config
        return cls(
            vision_width=v.hidden_size,
            vision_layers=v.num_hidden_layers,
            patch_size=v.patch_size,
            image_size=v.image_size,
            text_width=t.hidden_size,
            text_layers=t.num_hidden_layers,
            context_length=t.max_position_embeddings,
            vocab_size=t.vocab_size,
            embed_dim=config.projection_dim,
        )

    @classmethod
    def from_state_dict(cls, sd: Mapping[str, torch.Tensor], what: str = "the checkpoint") -> ClipGeometry:
        """From an OpenAI/OpenCLIP state dict, as ``clip/model.py build_model`` reads it (``what`` names the
        file in errors)."""
        if any(k.startswith(("visual.layer1.", "visual.attnpool.")) for k in sd):
            raise ValueError(
                "this is a ResNet CLIP (visual.layer1..., visual.attnpool...): transformers' CLIPModel only "
                "has ViT vision towers, so capeval cannot load it"
            )
        needed = ("visual.conv1.weight", "visual.positional_embedding", "token_embedding.weight")
        needed += ("positional_embedding", "ln_final.weight", "text_projection")
        absent = [k for k in needed if k not in sd]
        if absent:
            raise ValueError(
                f"{what} lacks tensors {absent}: not an OpenAI/OpenCLIP CLIP state dict; its first keys are "
                f"{sorted(sd)[:8]}"
            )
        conv, grid = sd["visual.conv1.weight"], sd["visual.positional_embedding"].shape[0] - 1
        return cls(
            vision_width=conv.shape[0],
            vision_layers=_count_blocks(sd, "visual.transformer.resblocks."),
            patch_size=conv.shape[-1],
            image_size=conv.shape[-1] * round(grid**0.5),
            text_width=sd["ln_final.weight"].shape[0],
            text_layers=_count_blocks(sd, "transformer.resblocks."),
            context_length=sd["positional_embedding"].shape[0],
            vocab_size=sd["token_embedding.weight"].shape[0],
            embed_dim=sd["text_projection"].shape[1],
        )


_KNOWN_GEOMETRIES = {
    ClipGeometry(768, 12, 32, 224, 512, 12, 77, 49408, 512): "ViT-B/32",
    ClipGeometry(768, 12, 16, 224, 512, 12, 77, 49408, 512): "ViT-B/16",
    ClipGeometry(1024, 24, 14, 224, 768, 12, 77, 49408, 768): "ViT-L/14",
    ClipGeometry(1024, 24, 14, 336, 768, 12, 77, 49408, 768): "ViT-L/14@336px",
}


def _count_blocks(sd: Mapping[str, torch.Tensor], prefix: str) -> int:
    return len({k[len(prefix) :].split(".", 1)[0] for k in sd if k.startswith(prefix)})


def check_config_heads(config) -> None:
    """The authors' code derives heads as width // 64; a config that splits otherwise computes other numbers."""
    for tower in ("vision_config", "text_config"):
        cfg = getattr(config, tower)
        expected = cfg.hidden_size // HEAD_WIDTH
        if expected and cfg.num_attention_heads != expected:
            raise ValueError(
                f"model {tower} has {cfg.num_attention_heads} attention heads for width {cfg.hidden_size}; "
                f"OpenAI/OpenCLIP checkpoints use {HEAD_WIDTH}-wide heads ({expected} heads)"
            )


def base_model_for(geometry: ClipGeometry) -> str:
    """The transformers model a PAC-S checkpoint of this geometry was fine-tuned from.

    Raises:
        ValueError: no published PAC-S checkpoint has this geometry: pass ``model=`` explicitly.
    """
    if geometry.name in PACS_BASE_MODELS:
        return PACS_BASE_MODELS[geometry.name]
    raise ValueError(
        f"the checkpoint is a {geometry.describe()}; no published PAC-S checkpoint has that shape, so the "
        "model it goes on top of is unknown: pass model= (a Hub id or folder of the same architecture)"
    )


def convert_openai_state_dict(
    sd: Mapping[str, torch.Tensor], what: str = "the checkpoint"
) -> dict[str, torch.Tensor]:
    """OpenAI/OpenCLIP ViT-CLIP tensors renamed and reshaped into transformers ``CLIPModel`` names.

    Fused attention projections ``in_proj_weight`` (3W, W) / ``in_proj_bias`` (3W,) are split into q, k, v
    in that order; ``visual.proj`` and ``text_projection`` (in, out) are transposed into linear weights.

    Args:
        sd: the tensors, in OpenAI's names.
        what: the file they come from, as errors name it (``weights file /x/open_clip_model.bin``).

    Raises:
        ValueError: a tensor that no rule uses, a block missing one of its tensors, or a bad fused shape.
    """
    return _renamed(sd, ClipGeometry.from_state_dict(sd, what), what)


def openai_clip_model(
    sd: Mapping[str, torch.Tensor], build: Callable[[ClipGeometry], torch.nn.Module], what: str
) -> torch.nn.Module:
    """A whole model from OpenAI/OpenCLIP ViT-CLIP tensors, in one pass: the architecture read from them, the model
    ``build(geometry)`` makes (a ``CLIPModel`` on the meta device: nothing initialised that the tensors replace),
    then every tensor renamed (``convert_openai_state_dict``) and set into it, checked as ``copy_into`` checks.

    Args:
        sd: the tensors, in OpenAI's names.
        build: the empty model of a geometry; whatever it raises (a geometry refused) comes before any renaming.
        what: the file they come from, as errors name it.

    Raises:
        ValueError: see ``ClipGeometry.from_state_dict``, ``convert_openai_state_dict`` and ``copy_into``.
    """
    geometry = ClipGeometry.from_state_dict(sd, what)
    model = build(geometry)
    _assign_into(model, _renamed(sd, geometry, what), what)
    return model


def _renamed(sd: Mapping[str, torch.Tensor], geometry: ClipGeometry, what: str) -> dict[str, torch.Tensor]:
    """``convert_openai_state_dict`` of tensors whose geometry is already read."""
    out: dict[str, torch.Tensor] = {}
    used: set[str] = set(METADATA_KEYS & set(sd))
    missing: list[str] = []

    def take(key: str) -> torch.Tensor | None:
        if key not in sd:
            missing.append(key)
            return None
        used.add(key)
        return sd[key]

    for src, (dst, transpose) in _TOP_LEVEL.items():
        t = take(src)
        if t is not None:
            out[dst] = t.t() if transpose else t
    towers = (
        ("transformer.resblocks.", "text_model.encoder.layers.", geometry.text_layers, geometry.text_width),
        ("visual.transformer.resblocks.", "vision_model.encoder.layers.", geometry.vision_layers, geometry.vision_width),
    )  # fmt: skip
    for src_prefix, dst_prefix, layers, width in towers:
        for i in range(layers):
            s, d = f"{src_prefix}{i}.", f"{dst_prefix}{i}."
            for part in ("weight", "bias"):
                fused = take(f"{s}attn.in_proj_{part}")
                if fused is None:
                    continue
                if fused.shape[0] != 3 * width:
                    raise ValueError(
                        f"{what}: {s}attn.in_proj_{part} has shape {tuple(fused.shape)}, expected 3 x {width} rows"
                    )
                for name, chunk in zip(("q", "k", "v"), fused.chunk(3, dim=0), strict=True):
                    out[f"{d}self_attn.{name}_proj.{part}"] = chunk
            for src_name, dst_name in _BLOCK_RENAMES.items():
                for part in ("weight", "bias"):
                    t = take(f"{s}{src_name}.{part}")
                    if t is not None:
                        out[f"{d}{dst_name}.{part}"] = t
    if missing:
        raise ValueError(f"{what} lacks {len(missing)} tensor(s) of its own architecture: {missing[:6]}")
    unused = sorted(set(sd) - used)
    if unused:
        raise ValueError(
            f"{what} has {len(unused)} unexpected tensor(s), which map to nothing in transformers' CLIPModel "
            f"(another architecture or variant?): {unused[:6]}"
        )
    return out


def is_transformers_layout(sd: Mapping[str, torch.Tensor]) -> bool:
    return "text_model.embeddings.token_embedding.weight" in sd


def check_architecture(sd: Mapping[str, torch.Tensor], config, what: str = "the checkpoint") -> None:
    """Raise a ValueError naming every difference between a state dict's architecture and ``config``'s.

    Only OpenAI/OpenCLIP state dicts are checked here (their heads are implied: width // 64); tensors in
    transformers' names are checked tensor by tensor when copied.
    """
    if is_transformers_layout(sd):
        return
    have = ClipGeometry.from_state_dict(sd, what)
    want = ClipGeometry.from_config(config)
    if have != want:
        suggestion = f": pass model={PACS_BASE_MODELS[have.name]!r}" if have.name in PACS_BASE_MODELS else ""
        raise ValueError(
            f"{what} is a {have.describe()} but the model is a {want.describe()}; differences "
            f"(checkpoint vs model): {', '.join(have.differences(want))}{suggestion}"
        )
    check_config_heads(config)


def copy_into(
    model, sd: Mapping[str, torch.Tensor], what: str = "the checkpoint", check_base: bool = True
) -> None:
    """Set every parameter and buffer of a ``CLIPModel`` from transformers-named tensors, or raise.

    Position ids (buffers no checkpoint carries) are reset to 0..n-1. ``check_base``: warn where a PAC-S
    checkpoint does not look fine-tuned from this model (off for a whole model loaded into a fresh one).

    Raises:
        ValueError: a target tensor the checkpoint does not give, a checkpoint tensor the model does not
            have, or a shape mismatch; nothing is copied then.
    """
    target = model.state_dict()
    _check_fit(target, sd, what)
    if check_base:
        _warn_if_suspicious(model, sd, what)
    with torch.no_grad():
        model.load_state_dict({k: v.to(target[k].dtype) for k, v in sd.items()}, strict=True)
        for name, buf in model.named_buffers():
            if name.endswith("position_ids"):
                buf.copy_(torch.arange(buf.shape[-1], device=buf.device).expand_as(buf))
            elif name not in target:
                raise ValueError(f"model buffer {name} is not covered by any checkpoint tensor")


def _check_fit(target: Mapping[str, torch.Tensor], sd: Mapping[str, torch.Tensor], what: str) -> None:
    """Raise unless ``sd`` gives exactly the model's tensors (``target``: its state dict), each in its shape."""
    missing = sorted(set(target) - set(sd))
    unexpected = sorted(set(sd) - set(target))
    shapes = [
        f"{k} {tuple(sd[k].shape)} vs model {tuple(v.shape)}"
        for k, v in target.items()
        if k in sd and tuple(sd[k].shape) != tuple(v.shape)
    ]
    problems = []
    if missing:
        problems.append(f"{len(missing)} model tensor(s) not in it: {missing[:6]}")
    if unexpected:
        problems.append(f"{len(unexpected)} tensor(s) the model does not have: {unexpected[:6]}")
    if shapes:
        problems.append(f"{len(shapes)} shape mismatch(es): {shapes[:4]}")
    if problems:
        raise ValueError(f"{what} does not fit the model: " + "; ".join(problems))


def _assign_into(model, sd: Mapping[str, torch.Tensor], what: str) -> None:
    """Set every parameter and buffer of a ``CLIPModel`` built on the meta device from transformers-named tensors,
    or raise as ``copy_into`` does: each tensor copied into new contiguous memory of the model's dtype (the model
    then owns its weights, as one loaded by ``copy_into``), position ids made 0..n-1."""
    target = model.state_dict()
    _check_fit(target, sd, what)

    def owned(key: str, tensor: torch.Tensor) -> torch.Tensor:
        return torch.empty(target[key].shape, dtype=target[key].dtype).copy_(tensor)

    model.load_state_dict({k: owned(k, v) for k, v in sd.items()}, strict=True, assign=True)
    for name, buf in list(model.named_buffers()):
        if name.endswith("position_ids"):
            owner, _, leaf = name.rpartition(".")
            ids = torch.arange(buf.shape[-1], dtype=buf.dtype).expand(buf.shape)
            setattr(model.get_submodule(owner), leaf, ids)
        elif name not in target:
            raise ValueError(f"model buffer {name} is not covered by any checkpoint tensor")


def _warn_if_suspicious(model, sd: Mapping[str, torch.Tensor], what: str) -> None:
    current = model.state_dict()

    def same(key: str) -> bool:
        return torch.equal(current[key].float(), sd[key].float())

    if same("visual_projection.weight") and same("text_projection.weight"):
        warnings.warn(
            f"{what} has exactly the projections the model already had: scores will equal plain CLIP-S",
            CheckpointWarning,
            stacklevel=user_stacklevel(),
        )
    encoders = (
        "vision_model.embeddings.patch_embedding.weight",
        "text_model.embeddings.token_embedding.weight",
    )
    if not any(same(k) for k in encoders):
        act = model.config.text_config.hidden_act
        warnings.warn(
            f"{what}'s encoders differ from those of the model it is loaded into. PAC-S fine-tunes only the "
            "projections of its base model, so this model is probably not that base; its config is used as is "
            f"(activation {act!r}: OpenAI CLIPs use quick_gelu, OpenCLIP ViT-L-14 uses gelu)",
            CheckpointWarning,
            stacklevel=user_stacklevel(),
        )
