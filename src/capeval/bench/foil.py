"""FOIL-COCO (Shekhar et al. 2017): a correct COCO caption against the same caption with one word swapped.

Official file ``foilv1.0_test_2017.json`` (COCO layout): ``images`` and ``annotations`` with ``id`` (shared by a
caption and its foils), ``image_id``, ``caption``, ``foil`` (bool), ``target_word``, ``foil_word``. References are
the image's COCO captions (``captions_val2014.json``) other than the correct caption, in file order, as in the
public FOIL evaluation scripts; the protocol keeps the first one ("1 reference") or all four.
"""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

import datasets

from capeval.bench._common import (
    PAIR_FEATURES,
    build_dataset,
    find_file,
    image_path,
    normalize_caption,
    report_skipped,
)
from capeval.bench.references import image_key, read_references
from capeval.json_files import read_json_file


def load_foil(
    path: str | os.PathLike,
    coco_captions: str | os.PathLike | None = None,
    image_root: str | os.PathLike | None = None,
) -> datasets.Dataset:
    """FOIL: one row per (correct, foil) pair; ``candidates = [correct, foil]``, ``label = 0``.

    Args:
        path: ``foilv1.0_test_2017.json`` or its folder (which may also hold ``captions_val2014.json``).
        coco_captions: COCO caption annotations for the references, when not next to the FOIL file.
        image_root: folder of the COCO val2014 images.

    Extra columns: ``target_word``, ``foil_word``.
    """
    file = find_file(
        path,
        ("foilv1.0_test_2017.json", "foil_test.json"),
        "FOIL-COCO",
        "download foilv1.0_test_2017.json from the FOIL project page (foilunitn.github.io)",
    )
    coco = Path(coco_captions) if coco_captions is not None else file.parent / "captions_val2014.json"
    if not coco.is_file():
        raise FileNotFoundError(f"FOIL needs the COCO captions for its references: {coco} not found")
    refs_by_image = read_references(coco)
    data = read_json_file(file, "FOIL")
    names = {
        img["id"]: img.get("file_name", f"COCO_val2014_{int(img['id']):012d}.jpg") for img in data["images"]
    }
    groups: dict[int, dict[str, list]] = defaultdict(lambda: {"orig": [], "foil": []})
    for ann in data["annotations"]:
        groups[ann["id"]]["foil" if ann["foil"] else "orig"].append(ann)
    rows, skipped = [], []
    for anno_id, g in groups.items():
        if len(g["orig"]) != 1 or not g["foil"]:
            skipped.append(str(anno_id))
            continue
        orig = g["orig"][0]
        name = names.get(orig["image_id"], f"COCO_val2014_{int(orig['image_id']):012d}.jpg")
        refs = [normalize_caption(r) for r in refs_by_image.get(image_key(name), []) if r != orig["caption"]]
        for j, foil in enumerate(g["foil"]):
            rows.append(
                {
                    "item_id": f"foil/{anno_id}/{j}",
                    "image_id": image_key(name),
                    "image": image_path(image_root, name),
                    "candidates": [normalize_caption(orig["caption"]), normalize_caption(foil["caption"])],
                    "references": refs,
                    "votes": [],
                    "label": 0,
                    "category": "foil",
                    "target_word": str(foil.get("target_word", "")),
                    "foil_word": str(foil.get("foil_word", "")),
                }
            )
    report_skipped("FOIL (caption id without exactly one correct caption and a foil)", skipped, len(groups))
    return build_dataset(
        rows,
        PAIR_FEATURES,
        {"target_word": datasets.Value("string"), "foil_word": datasets.Value("string")},
        "FOIL-COCO (Shekhar et al. 2017): correct vs foil caption",
    )
