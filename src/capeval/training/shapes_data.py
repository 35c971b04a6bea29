"""PAC-S training tuples from the drawn-shapes world, to run the whole pipeline offline.

A "real" pair is a drawing of a scene with its canonical caption; the "generated" positives stand in for the
paper's diffusion images and captioner outputs: another drawing of the same scene (``redraw_variant``: other
canvas, size, jitter, background) and a paraphrase of its caption.
"""

from __future__ import annotations

import random

import torch

from capeval.shapes import shapes_clip_path
from capeval.shapes.drawing import draw, redraw_variant
from capeval.shapes.scenes import all_scenes, caption, paraphrase, random_scene


def shapes_pacs_dataset(n: int, seed: int = 0):
    """``n`` rows of (image, caption, generated_image, generated_caption) as a ``datasets.Dataset``."""
    import datasets

    rng = random.Random(seed)
    rows: dict[str, list] = {"image": [], "caption": [], "generated_image": [], "generated_caption": []}
    for _ in range(n):
        scene = random_scene(rng)
        rows["image"].append(draw(scene, rng))
        rows["caption"].append(caption(scene))
        rows["generated_image"].append(redraw_variant(scene, rng))
        rows["generated_caption"].append(paraphrase(scene, rng))
    features = datasets.Features(
        {
            "image": datasets.Image(),
            "caption": datasets.Value("string"),
            "generated_image": datasets.Image(),
            "generated_caption": datasets.Value("string"),
        }
    )
    return datasets.Dataset.from_dict(rows, features=features)


def held_out_scenes(n: int, seed: int = 10_000) -> tuple[list, list]:
    """``n`` drawings from their own seed (half of them variants), cycling through every scene."""
    from capeval.shapes.training import held_out_images

    return held_out_images(n, seed)


def caption_ranking_accuracy(
    model: str, images: list, scenes: list, prefix: str | None = "A photo depicts"
) -> float:
    """Share of images whose own canonical caption ranks first among all scenes' captions (through capeval)."""
    from capeval.clip.backbones import load_backbone
    from capeval.clip.image_encoding import encode_images
    from capeval.clip.text_encoding import encode_texts

    backbone = load_backbone(str(model), device="cpu")
    grid = all_scenes()
    index = {s: i for i, s in enumerate(grid)}
    sims = (
        encode_images(backbone, images)
        @ encode_texts(backbone, [caption(s) for s in grid], prefix=prefix).t()
    )
    truth = torch.tensor([index[s] for s in scenes])
    return float((sims.argmax(dim=1) == truth).float().mean())


def random_start_clip(out_dir, seed: int = 0):
    """A random tiny CLIP (real tokenizer, 64 px input): room to improve everywhere (about 1/75 top-1)."""
    from capeval.shapes.tiny_clip import build_tiny_clip, tiny_clip_config

    config = tiny_clip_config(
        hidden_size=64, layers=2, heads=1, image_size=64, patch_size=8, projection_dim=64
    )
    return build_tiny_clip(out_dir, seed=seed, config=config)


def shapes_clip_without_projections(out_dir, seed: int = 0):
    """The committed shapes CLIP with both projections re-drawn at random (CLIP's init scale, width^-0.5).

    Its encoders understand the shapes world; the two layers PAC-S trains do not: held-out top-1 drops to
    chance, and only the projections have to be learnt back.
    """
    from transformers import CLIPModel

    from capeval.clip.backbones import load_backbone
    from capeval.clip.checkpoints.convert import save_model_folder

    source = shapes_clip_path()
    model = CLIPModel.from_pretrained(source).float()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in (model.visual_projection, model.text_projection):
            width = layer.weight.shape[1]
            layer.weight.copy_(torch.randn(layer.weight.shape, generator=gen) * width**-0.5)
    provenance = {"start": f"{source.name} with visual/text projections re-initialised (seed {seed})"}
    return save_model_folder(model, load_backbone(str(source), device="cpu"), out_dir, provenance)
