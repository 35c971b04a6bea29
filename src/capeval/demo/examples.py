"""Example inputs of the demos: pictures and short clips of the drawn-shapes world.

They are drawn by ``capeval.shapes`` (deterministically) into a folder under the system's temp
directory the first time a demo is built, so an installed package or a published Space needs no extra
files, and the shapes CLIP (the offline demo model) scores them meaningfully.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from capeval.shapes.drawing import draw, draw_frames
from capeval.shapes.scenes import Scene, all_scenes, caption, mismatched

EXAMPLE_SCENES = (
    Scene("red", "circle", "left"),
    Scene("blue", "square", "right"),
    Scene("green", "triangle", "top"),
)
VIDEO_FRAMES = 12  # frames of an example clip (1.2 s at 10 fps)
IMAGE_SIZE = (224, 224)


def example_folder() -> Path:
    folder = Path(tempfile.gettempdir()) / "capeval-demo-examples"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _atomic_write(path: Path, write) -> Path:
    if path.is_file():
        return path
    tmp = path.with_name(f".{path.stem}.{os.getpid()}{path.suffix}")
    write(tmp)
    os.replace(tmp, path)
    return path


def _stem(scene: Scene) -> str:
    return f"{scene.color}-{scene.shape}-{scene.position}"


def example_image(scene: Scene) -> Path:
    """PNG of the scene (224 x 224)."""
    path = example_folder() / f"{_stem(scene)}.png"
    return _atomic_write(path, lambda p: draw(scene, size=IMAGE_SIZE).save(p, format="PNG"))


def example_video(scene: Scene) -> Path:
    """Short H.264 MP4 of the scene, the shape moving slightly around its position."""
    from capeval.clip.video import write_video

    path = example_folder() / f"{_stem(scene)}.mp4"
    return _atomic_write(path, lambda p: write_video(p, draw_frames(scene, VIDEO_FRAMES, size=IMAGE_SIZE)))


def candidate_captions(scene: Scene) -> list[str]:
    """The right caption and three hard negatives (colour, shape, position changed), in a fixed mix."""
    seed = all_scenes().index(scene)
    wrong = [
        caption(mismatched(scene, a, rng=seed + i)) for i, a in enumerate(("color", "shape", "position"))
    ]
    return [wrong[0], caption(scene), wrong[1], wrong[2]]


def references_for(scene: Scene) -> list[str]:
    """Two reference captions of the scene, other wordings than the canonical caption."""
    from capeval.shapes.scenes import paraphrase

    return list(dict.fromkeys(paraphrase(scene, rng=seed) for seed in (0, 1, 2)))[:2]
