"""Benchmarks judged per captioning system: THumB 1.0 and the COCO 2015 captioning challenge (M1/M2).

THumB 1.0 (Kasai et al. 2022, ``mscoco/mscoco_THumB-1.0.jsonl``): one JSON object per line with ``SYS``,
``seg_id``, ``set_id``, ``hyp``, ``image``, ``P``, ``R``, ``Fl``, ``Inc``, ``Con``, ``human_score``; 500 COCO
Karpathy-test images x 5 systems (one of them, ``Human``, is a held-out COCO reference). References come from a
file the user supplies (any layout of :mod:`capeval.bench.references`).

COCO 2015: the human system-level scores (M1, M2, ...) are a small table the user supplies (CSV with a
``system`` column), and each system's captions a COCO results file (``[{image_id, caption}]``).
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import datasets

from capeval.bench._common import RATING_FEATURES, build_dataset, find_file, image_path, normalize_caption
from capeval.bench.references import image_key, read_references

THUMB_URL = "https://raw.githubusercontent.com/jungokasai/THumB/master/mscoco/mscoco_THumB-1.0.jsonl"


def load_thumb(
    path: str | os.PathLike,
    references: str | os.PathLike | None = None,
    image_root: str | os.PathLike | None = None,
) -> datasets.Dataset:
    """THumB 1.0: one row per (system, image); ``category`` and ``system`` are the system name.

    Args:
        path: ``mscoco_THumB-1.0.jsonl`` or its folder.
        references: COCO references (``captions_val2014.json``, ``dataset_coco.json`` or a jsonl with
            ``image`` and ``refs``); default: ``mscoco_references.jsonl`` or ``captions_val2014.json`` next to the
            THumB file, else none (reference-based metrics are then skipped). A ``Human`` hypothesis is removed
            from its own image's references.
        image_root: folder of the COCO images.

    Extra columns: ``system``, ``seg_id``, ``precision`` (P), ``recall`` (R).
    """
    file = find_file(path, ("mscoco_THumB-1.0.jsonl",), "THumB 1.0", f"download {THUMB_URL}")
    if references is None:
        for name in ("mscoco_references.jsonl", "captions_val2014.json", "dataset_coco.json"):
            if (file.parent / name).is_file():
                references = file.parent / name
                break
    refs_by_image = read_references(references) if references is not None else {}
    rows = []
    with open(file, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            rec = json.loads(line)
            for field in ("SYS", "seg_id", "hyp", "image", "human_score"):
                if field not in rec:
                    raise ValueError(f"{file}:{n}: missing field {field!r}")
            key = image_key(rec["image"])
            hyp = normalize_caption(rec["hyp"])
            refs = [normalize_caption(r) for r in refs_by_image.get(key, [])]
            if rec["SYS"] == "Human":
                refs = [r for r in refs if r.lower() != hyp.lower()]
            rows.append(
                {
                    "item_id": f"thumb/{rec['SYS']}/{rec['seg_id']}",
                    "image_id": key,
                    "image": image_path(image_root, rec["image"]),
                    "candidate": hyp,
                    "references": refs,
                    "human_scores": [float(rec["human_score"])],
                    "category": rec["SYS"],
                    "system": rec["SYS"],
                    "seg_id": str(rec["seg_id"]),
                    "precision": float(rec.get("P", float("nan"))),
                    "recall": float(rec.get("R", float("nan"))),
                }
            )
    return build_dataset(
        rows,
        RATING_FEATURES,
        {
            "system": datasets.Value("string"),
            "seg_id": datasets.Value("string"),
            "precision": datasets.Value("float64"),
            "recall": datasets.Value("float64"),
        },
        "THumB 1.0 (Kasai et al. 2022): precision/recall-based human scores per system",
    )


def load_system_human_scores(path: str | os.PathLike) -> dict[str, dict[str, float]]:
    """A CSV of system-level human scores: a ``system`` column and one column per measure (e.g. ``M1``, ``M2``)."""
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames is None or "system" not in reader.fieldnames:
            raise ValueError(f"{path}: needs a 'system' column and one column per human measure")
        out = {}
        for rec in reader:
            out[rec["system"]] = {
                k: float(v) for k, v in rec.items() if k != "system" and v not in (None, "")
            }
    return out


def load_system_captions(
    results_dir: str | os.PathLike,
    references: str | os.PathLike,
    image_root: str | os.PathLike | None = None,
) -> datasets.Dataset:
    """Captions of several systems: one COCO results file per system (``<system>.json``), scored per image.

    ``human_scores`` is empty (system-level judgments live in :func:`load_system_human_scores`).
    """
    folder = Path(results_dir)
    files = sorted(folder.glob("*.json"))
    if not files:
        raise FileNotFoundError(f"no <system>.json COCO results files in {folder}")
    refs_by_image = read_references(references)
    rows = []
    for file in files:
        with open(file, encoding="utf-8") as f:
            results = json.load(f)
        for k, res in enumerate(results):
            name = (
                f"COCO_val2014_{int(res['image_id']):012d}.jpg"
                if str(res["image_id"]).isdigit()
                else str(res["image_id"])
            )
            key = image_key(name)
            if key not in refs_by_image:
                raise ValueError(f"{file}: entry {k} image {res['image_id']} has no references")
            rows.append(
                {
                    "item_id": f"{file.stem}/{res['image_id']}",
                    "image_id": key,
                    "image": image_path(image_root, name),
                    "candidate": normalize_caption(res["caption"]),
                    "references": [normalize_caption(r) for r in refs_by_image[key]],
                    "human_scores": [],
                    "category": file.stem,
                    "system": file.stem,
                }
            )
    return build_dataset(rows, RATING_FEATURES, {"system": datasets.Value("string")}, "captions per system")
