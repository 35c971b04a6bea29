"""Random-weight CLIPs in the real geometries, for speed benchmarks.

Freshly initialised CLIPs give image and text embeddings that are nearly orthogonal, so CLIP-S clips almost
every cosine to 0 and per-sample agreement checks would compare zeros. A shared component is mixed into both
towers' outputs (through the final layer-norm biases and a rank-one term in each projection), so cosines land
in a trained CLIP's range (about 0.1-0.4) and vary from pair to pair. Speed does not depend on weight values.
"""

from __future__ import annotations

from pathlib import Path

import torch

SHARED_SCALE = 1.0  # size of the shared component relative to the random part of an embedding


def mix_shared_component(model, seed: int = 0, scale: float = SHARED_SCALE) -> None:
    """Give both towers' embeddings a common direction (in place)."""
    gen = torch.Generator().manual_seed(seed)
    dim = model.config.projection_dim
    shared = torch.randn(dim, generator=gen)
    shared /= shared.norm()
    towers = [
        (model.vision_model.post_layernorm, model.visual_projection),
        (model.text_model.final_layer_norm, model.text_projection),
    ]
    with torch.no_grad():
        for norm, proj in towers:
            bias = torch.randn(norm.bias.shape[0], generator=gen)
            norm.bias.copy_(bias)
            # typical norm of the random part of W x for x of norm sqrt(hidden)
            random_part = proj.weight.norm() * (norm.bias.shape[0] ** 0.5) / (proj.weight.shape[1] ** 0.5)
            proj.weight.add_(scale * random_part * torch.outer(shared, bias) / bias.dot(bias))


def build_benchmark_clip(arch: str, folder: str | Path, seed: int = 0) -> Path:
    """A random ``vit-b32`` or ``vit-l14`` CLIP with the real tokenizer and positive cosines, saved to ``folder``."""
    from transformers import CLIPModel

    from capeval.shapes.tiny_clip import (
        build_clip_tokenizer,
        save_clip_folder,
        vit_b32_config,
        vit_l14_config,
    )

    configs = {"vit-b32": vit_b32_config, "vit-l14": vit_l14_config}
    if arch not in configs:
        raise ValueError(f"unknown architecture {arch!r}; choose one of {sorted(configs)}")
    torch.manual_seed(seed)
    model = CLIPModel(configs[arch]()).eval()
    mix_shared_component(model, seed)
    return save_clip_folder(model, build_clip_tokenizer(), folder)
