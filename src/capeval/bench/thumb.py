"""Benchmarks judged per captioning system: THumB 1.0 and the COCO 2015 captioning challenge (M1/M2).

THumB 1.0 (Kasai et al. 2022, ``mscoco/mscoco_THumB-1.0.jsonl``): one JSON object per line with ``SYS``,
``seg_id``, ``set_id``, ``hyp``, ``image``, ``P``, ``R``, ``Fl``, ``Inc``, ``Con``, ``human_score``; 500 COCO
Karpathy-test images x 5 systems (one of them, ``Human``, is a held-out COCO reference). Its references,
``mscoco/mscoco_references.json``, are JSON lines despite the extension, one ``{"seg_id", "set_id", "refs"}``
per image with the 4 COCO references other than the ``Human`` caption; they are matched on ``seg_id``. Any
image-keyed layout of :mod:`capeval.bench.references` (``captions_val2014.json``, ``dataset_coco.json``) works
too, matched on the image file name.

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
from capeval.bench.references import image_key, read_json_lines, read_references
from capeval.json_files import read_json_file

THUMB_URL = "https://raw.githubusercontent.com/jungokasai/THumB/master/mscoco/mscoco_THumB-1.0.jsonl"
# Looked for next to the THumB file, official name first.
THUMB_REFERENCE_NAMES = (
    "mscoco_references.json",
    "mscoco_references.jsonl",
    "captions_val2014.json",
    "dataset_coco.json",
)


def read_thumb_references(path: str | os.PathLike) -> tuple[str, dict[str, list[str]]]:
    """References for THumB: ``("seg_id", {seg_id: refs})`` for THumB's own file, else ``("image", {key: refs})``.

    THumB's file is recognised by content (every line an object with ``seg_id`` and ``refs``), so a renamed
    copy works; anything else goes through :func:`capeval.bench.references.read_references`.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"THumB references file not found: {path}")
    # Sniffed leniently: a file that is not UTF-8 is refused by name by the reader it goes on to.
    with open(path, encoding="utf-8", errors="replace") as f:
        first = f.readline()
    try:
        head = json.loads(first)
    except json.JSONDecodeError:
        head = None
    if not (isinstance(head, dict) and "seg_id" in head and "refs" in head):
        return "image", read_references(path)
    out: dict[str, list[str]] = {}
    for n, rec in read_json_lines(path):
        if "seg_id" not in rec or not isinstance(rec.get("refs"), list):
            raise ValueError(f"{path}:{n}: expected 'seg_id' and a 'refs' list, got fields {sorted(rec)}")
        seg = str(rec["seg_id"])
        if seg in out:
            raise ValueError(f"{path}:{n}: seg_id {seg!r} appears twice")
        out[seg] = [str(r) for r in rec["refs"]]
    return "seg_id", out


def load_thumb(
    path: str | os.PathLike,
    references: str | os.PathLike | None = None,
    image_root: str | os.PathLike | None = None,
) -> datasets.Dataset:
    """THumB 1.0: one row per (system, image); ``category`` and ``system`` are the system name.

    Args:
        path: ``mscoco_THumB-1.0.jsonl`` or its folder.
        references: THumB's ``mscoco_references.json`` (matched on ``seg_id``) or COCO references in an
            image-keyed layout (``captions_val2014.json``, ``dataset_coco.json``, JSON lines with ``image`` and
            ``refs``); default: the first of :data:`THUMB_REFERENCE_NAMES` next to the THumB file, else none
            (reference-based metrics are then skipped). A ``Human`` hypothesis is removed from its own image's
            references when they come from a full COCO set (THumB's own file already leaves it out).
        image_root: folder of the COCO images.

    Extra columns: ``system``, ``seg_id``, ``precision`` (P), ``recall`` (R).
    """
    file = find_file(path, ("mscoco_THumB-1.0.jsonl",), "THumB 1.0", f"download {THUMB_URL}")
    if references is None:
        references = next(
            (file.parent / n for n in THUMB_REFERENCE_NAMES if (file.parent / n).is_file()), None
        )
    keyed_by, refs_by_key = read_thumb_references(references) if references is not None else ("image", {})
    rows = []
    missing = []
    for n, rec in read_json_lines(file):
        for field in ("SYS", "seg_id", "hyp", "image", "human_score"):
            if field not in rec:
                raise ValueError(f"{file}:{n}: missing field {field!r}")
        key = image_key(rec["image"])
        hyp = normalize_caption(rec["hyp"])
        found = refs_by_key.get(str(rec["seg_id"]) if keyed_by == "seg_id" else key)
        if references is not None and not found:
            missing.append(f"line {n} (seg_id {rec['seg_id']}, {rec['image']})")
        refs = [normalize_caption(r) for r in found or []]
        if rec["SYS"] == "Human" and keyed_by == "image":
            # Full COCO reference sets hold the Human caption itself; THumB's own file already leaves it out,
            # and there an equal sentence is another annotator's duplicate (39 of the 500 images), so it stays.
            same = [i for i, r in enumerate(refs) if r.lower() == hyp.lower()]
            refs = [r for i, r in enumerate(refs) if i != (same[0] if same else -1)]
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
    if missing:
        raise ValueError(
            f"{len(missing)} of {len(rows)} THumB rows have no references in {references} (matched on "
            f"{keyed_by}): {', '.join(missing[:3])}"
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
        results = read_json_file(file, "COCO results")
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
