"""Synthetic workloads shaped like the human-judgment benchmarks, for speed measurements.

Speed does not depend on weight values or caption meaning, only on sizes: images are drawn 500x375 JPEGs
(Flickr8k's typical size), captions have Flickr8k-like lengths, and the candidate/reference structure follows
Flickr8k-Expert (5.66 candidates per image, the image's 5 references shared by its candidates).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

CANDIDATES_PER_IMAGE = 5.66  # Flickr8k-Expert: 5,664 judged candidates over 1,000 images
REFERENCES_PER_IMAGE = 5  # Flickr8k: 5 captions per image
IMAGE_SIZE = (500, 375)
_WORDS = (
    "a the man woman dog child girl boy two people in on at of with and is are red blue white black "
    "green brown running jumping sitting standing playing water grass street beach snow ball shirt "
    "field bike rock air wall crowd building camera while near over through front small large young"
).split()


@dataclass
class ImageCaptionWorkload:
    """Candidates paired with images (by index) and each image's references."""

    image_paths: list  # file paths, or in-memory images
    candidates: list[str]
    candidate_image: list[int]
    references: list[list[str]]  # per image

    @property
    def candidate_images(self) -> list[str]:
        return [self.image_paths[i] for i in self.candidate_image]

    @property
    def candidate_references(self) -> list[list[str]]:
        return [self.references[i] for i in self.candidate_image]


def _caption(rng: np.random.Generator) -> str:
    n = int(np.clip(rng.normal(11.5, 3.5), 4, 30))  # Flickr8k captions: about 11 words, a long tail
    return " ".join(rng.choice(_WORDS, size=n)) + " ."


def draw_photo_like(rng: np.random.Generator, size: tuple[int, int] = IMAGE_SIZE) -> Image.Image:
    """Smooth colour gradients with noise and shapes, so JPEG decoding costs what a photo costs."""
    w, h = size
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    base = np.stack([np.sin(xx / rng.uniform(20, 90) + rng.uniform(0, 6)) for _ in range(3)], -1)
    base += np.stack([np.cos(yy / rng.uniform(20, 90) + rng.uniform(0, 6)) for _ in range(3)], -1)
    pixels = (base * 50 + 128 + rng.normal(0, 12, size=(h, w, 3))).clip(0, 255).astype(np.uint8)
    img = Image.fromarray(pixels)
    draw = ImageDraw.Draw(img)
    for _ in range(6):
        x0, y0 = rng.integers(0, w - 40), rng.integers(0, h - 40)
        x1, y1 = x0 + rng.integers(20, 200), y0 + rng.integers(20, 150)
        fill = tuple(int(c) for c in rng.integers(0, 256, 3))
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)((x0, y0, x1, y1), fill=fill)
    return img


def make_image_caption_workload(root: str | Path, n_images: int, seed: int = 0) -> ImageCaptionWorkload:
    """Write ``n_images`` JPEGs under ``root`` and build round(5.66 * n) candidates with 5 references per image."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    paths = []
    for i in range(n_images):
        path = root / f"{i:06d}.jpg"
        if not path.exists():
            draw_photo_like(rng).save(path, quality=90)
        paths.append(str(path))
    n_cands = round(CANDIDATES_PER_IMAGE * n_images)
    owner = sorted(int(i) % n_images for i in range(n_cands))
    candidates = [_caption(rng) for _ in range(n_cands)]
    references = [[_caption(rng) for _ in range(REFERENCES_PER_IMAGE)] for _ in range(n_images)]
    return ImageCaptionWorkload(paths, candidates, owner, references)


def make_shapes_workload(n_pairs: int, seed: int = 0) -> ImageCaptionWorkload:
    """Pairs from the drawn-shapes world, where the shapes CLIP's scores mean something: each drawing gets a
    candidate that is right or wrong in one attribute, and three paraphrases of its scene as references."""
    import random

    from capeval.shapes.drawing import draw
    from capeval.shapes.scenes import caption, mismatched, paraphrase, random_scene

    rng = random.Random(seed)
    images, candidates, references = [], [], []
    for _ in range(n_pairs):
        scene = random_scene(rng)
        images.append(draw(scene, rng, size=(160, 120)))
        shown = (
            scene
            if rng.random() < 0.5
            else mismatched(scene, rng.choice(["color", "shape", "position"]), rng)
        )
        candidates.append(caption(shown))
        references.append([paraphrase(scene, rng) for _ in range(3)])
    return ImageCaptionWorkload(images, candidates, list(range(n_pairs)), references)
