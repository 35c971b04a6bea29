"""The shapes world's committed CLIP and the example folders drawn from the world (README's ``examples/shapes``).

Needs only PIL (no torch).
"""

from __future__ import annotations

from pathlib import Path

from capeval.shapes.drawing import draw
from capeval.shapes.scenes import Rand, all_scenes, caption, mismatched, paraphrase


def shapes_clip_path() -> Path:
    """Folder of the committed shapes CLIP (a transformers ``CLIPModel`` folder with its tokenizer).

    Pass ``str(shapes_clip_path())`` as ``model=`` to any capeval metric. It knows only the words of the
    shapes world: the token rows of every other word are zeros (see ``training.zero_untrained_token_rows``).
    """
    from capeval.clip.model_sources import shipped_shapes_clip

    return shipped_shapes_clip()  # named in the engine's offline errors too


def example_items(n_images: int = 12, seed: int = 0, size: tuple[int, int] = (160, 120)) -> dict[str, dict]:
    """The drawn scenes of an example folder, with their candidate and reference captions (nothing written).

    Half the candidates describe their image (canonical caption or a paraphrase); the other half get one
    attribute wrong (colour, shape or position, in turn) or, every fourth, all three. Scenes are distinct.
    References are 2 to 5 paraphrases of the true scene, never its canonical caption.

    Returns:
        ``{image_id: {"scene", "image" (PIL), "candidate", "references", "correct" (bool),
        "wrong" ("color", "shape", "position", "all" or None)}}``, in id order.
    """
    grid = all_scenes()
    if not 1 <= n_images <= len(grid):
        raise ValueError(f"n_images must be between 1 and {len(grid)} (distinct scenes), got {n_images}")
    r = Rand(seed)
    order = list(range(len(grid)))
    for i in range(len(order) - 1, 0, -1):  # Fisher-Yates through Rand, so the folder depends on seed only
        j = r.index(i + 1)
        order[i], order[j] = order[j], order[i]
    wrong_kinds = ("color", "shape", "position", "all")
    items: dict[str, dict] = {}
    for k in range(n_images):
        scene = grid[order[k]]
        image = draw(scene, r, size=size)
        if k % 2 == 0:
            text = caption(scene) if k % 4 == 0 else paraphrase(scene, r)
            wrong = None
        else:
            wrong = wrong_kinds[(k // 2) % len(wrong_kinds)]
            other = scene
            for attr in ("color", "shape", "position") if wrong == "all" else (wrong,):
                other = mismatched(other, attr, r)
            text = caption(other)
        refs: list[str] = []
        n_refs = 2 + r.index(4)
        while len(refs) < n_refs:
            ref = paraphrase(scene, r)
            if ref not in refs:
                refs.append(ref)
        items[f"shapes{k:02d}"] = {
            "scene": scene,
            "image": image,
            "candidate": text,
            "references": refs,
            "correct": wrong is None,
            "wrong": wrong,
        }
    return items


def make_example_folder(
    folder: str | Path, n_images: int = 12, seed: int = 0, size: tuple[int, int] = (160, 120)
) -> dict[str, dict]:
    """Write ``example_items`` as a folder in the layout of the CLIPScore authors' script.

    Layout: ``images/<image_id>.png``, ``candidates.json`` (``{image_id: caption}``) and ``references.json``
    (``{image_id: [captions]}``); a second system, ``canonical_results.json``, captions every image with its
    scene's canonical caption, as a COCO results list (``[{"image_id": ..., "caption": ...}]``), for comparing
    systems; ``pairs.jsonl`` holds the same candidates as a corpus, one ``{"id", "image", "caption",
    "references"}`` row per line (images relative to the file), as ``capeval corpus`` reads them. The same seed
    writes byte-identical files.

    Returns:
        the items, as ``example_items`` returns them.
    """
    import json

    items = example_items(n_images, seed, size)
    folder = Path(folder)
    (folder / "images").mkdir(parents=True, exist_ok=True)
    for image_id, item in items.items():
        item["image"].save(folder / "images" / f"{image_id}.png", optimize=True)
    candidates = {image_id: item["candidate"] for image_id, item in items.items()}
    references = {image_id: item["references"] for image_id, item in items.items()}
    (folder / "candidates.json").write_text(json.dumps(candidates, indent=2) + "\n")
    (folder / "references.json").write_text(json.dumps(references, indent=2) + "\n")
    canonical = [
        {"image_id": image_id, "caption": caption(item["scene"])} for image_id, item in items.items()
    ]
    (folder / "canonical_results.json").write_text(json.dumps(canonical, indent=2) + "\n")
    pairs = [
        {"id": i, "image": f"images/{i}.png", "caption": item["candidate"], "references": item["references"]}
        for i, item in items.items()
    ]
    (folder / "pairs.jsonl").write_text("".join(json.dumps(row) + "\n" for row in pairs))
    return items
