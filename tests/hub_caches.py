"""A Hugging Face cache in huggingface_hub's own layout (``models--org--name/refs/main`` naming the snapshot under
``snapshots/<commit>``), where openai/clip-vit-base-patch32 is the shapes CLIP: Hub-id model forms, offline."""

from __future__ import annotations

import shutil
from pathlib import Path

HUB_COMMIT = "0" * 40  # the stand-in cache's revision of openai/clip-vit-base-patch32


def shapes_clip_hub_cache(root: Path) -> Path:
    """Write the cache under ``root / "hub"`` and return that folder (what ``HF_HUB_CACHE`` names)."""
    from capeval.shapes import shapes_clip_path

    repo = root / "hub" / "models--openai--clip-vit-base-patch32"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(HUB_COMMIT)
    shutil.copytree(shapes_clip_path(), repo / "snapshots" / HUB_COMMIT)
    return root / "hub"
