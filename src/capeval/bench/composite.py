"""Composite (Aditya et al. 2015): correctness ratings (1-5) of captions for Flickr8k, Flickr30k and COCO images.

Official files: ``8k_correctness.csv``, ``30k_correctness.csv``, ``coco_correctness.csv`` (also found as
``flickr8k_correctness.csv`` etc.), Amazon Mechanical Turk batch results: one row per image, the image URL
(``.../<image file>``), then the captions shown (3 for Flickr8k, 4 for Flickr30k and COCO; the first one is
one of the image's human references) and then one rating per caption. The parser finds the URL cell and reads
the captions and ratings that follow it, whatever the metadata columns before it; rows without an image URL
(the trailing summary lines of the files) are reported and skipped. References come from the datasets' own
caption files (see :mod:`capeval.bench.references`).
"""

from __future__ import annotations

import csv
import io
import os
import re
from pathlib import Path

import datasets

from capeval.bench._common import (
    RATING_FEATURES,
    build_dataset,
    image_path,
    normalize_caption,
    report_skipped,
)
from capeval.bench.references import image_key, read_references

SOURCES = {
    "flickr8k": ("8k_correctness.csv", "flickr8k_correctness.csv"),
    "flickr30k": ("30k_correctness.csv", "flickr30k_correctness.csv"),
    "coco": ("coco_correctness.csv",),
}
REFERENCE_FILES = {
    "flickr8k": ("Flickr8k.token.txt",),
    "flickr30k": ("results_20130124.token", "dataset_flickr30k.json"),
    "coco": ("captions_val2014.json", "dataset_coco.json"),
}
_URL = re.compile(r"https?://\S+?\.(?:jpe?g|png)", re.IGNORECASE)
_NUMBER = re.compile(r"^\s*-?\d+(?:\.\d+)?\s*$")


def parse_correctness_csv(path: str | os.PathLike) -> tuple[list[dict], list[str]]:
    """Rows ``{"image": file name, "captions": [...], "ratings": [...]}`` and the skipped line numbers."""
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    first = text.splitlines()[0] if text else ""
    delimiter = ";" if first.count(";") > first.count(",") else ","
    out, skipped = [], []
    for n, cells in enumerate(csv.reader(io.StringIO(text), delimiter=delimiter), 1):
        url_at = next((i for i, c in enumerate(cells) if _URL.search(c)), None)
        if url_at is None:
            if n > 1 and any(c.strip() for c in cells):
                skipped.append(f"line {n}")
            continue
        rest = cells[url_at + 1 :]
        k = 0
        while k < len(rest) and rest[k].strip() and not _NUMBER.match(rest[k]):
            k += 1
        captions, ratings = rest[:k], rest[k : 2 * k]
        if k == 0 or len(ratings) < k or not all(_NUMBER.match(r) for r in ratings):
            skipped.append(f"line {n}")
            continue
        image = _URL.search(cells[url_at]).group(0).rsplit("/", 1)[-1]
        out.append({"image": image, "captions": captions, "ratings": [float(r) for r in ratings]})
    return out, skipped


def load_composite(
    path: str | os.PathLike,
    references: dict[str, str | os.PathLike] | None = None,
    image_roots: dict[str, str | os.PathLike] | None = None,
) -> datasets.Dataset:
    """Composite: one row per rated caption, ``category`` = the image's source dataset.

    Args:
        path: folder with the ``*_correctness.csv`` files (and, by default, the reference caption files:
            ``Flickr8k.token.txt``, ``results_20130124.token`` or ``dataset_flickr30k.json``,
            ``captions_val2014.json`` or ``dataset_coco.json``).
        references: per source (``flickr8k``, ``flickr30k``, ``coco``), a reference file overriding the default.
        image_roots: per source, the folder of its images.

    Returns:
        Rating columns plus ``source``, ``caption_index`` (position in the rated row; 0 is the human reference
        that was shown as a candidate) and ``human_candidate`` (``caption_index == 0``).
    """
    folder = Path(path)
    references = references or {}
    image_roots = image_roots or {}
    rows, found = [], []
    for source, names in SOURCES.items():
        file = next((folder / n for n in names if (folder / n).is_file()), None)
        if file is None:
            continue
        found.append(source)
        ref_file = references.get(source) or next(
            (folder / n for n in REFERENCE_FILES[source] if (folder / n).is_file()), None
        )
        if ref_file is None:
            raise FileNotFoundError(
                f"Composite {source}: no reference captions ({' or '.join(REFERENCE_FILES[source])}) in {folder}; "
                f"pass references={{'{source}': path}}"
            )
        refs_by_image = read_references(ref_file)
        parsed, skipped = parse_correctness_csv(file)
        missing = []
        for r in parsed:
            key = image_key(r["image"])
            if key not in refs_by_image:
                missing.append(r["image"])
                continue
            refs = [normalize_caption(x) for x in refs_by_image[key]]
            for k, (caption, rating) in enumerate(zip(r["captions"], r["ratings"], strict=True)):
                rows.append(
                    {
                        "item_id": f"composite/{source}/{key}/{k}",
                        "image_id": key,
                        "image": image_path(image_roots.get(source), r["image"]),
                        "candidate": normalize_caption(caption),
                        "references": refs,
                        "human_scores": [rating],
                        "category": source,
                        "source": source,
                        "caption_index": k,
                        "human_candidate": k == 0,
                    }
                )
        report_skipped(
            f"Composite {file.name} (no image URL or ratings)", skipped, len(parsed) + len(skipped)
        )
        report_skipped(f"Composite {source} (image without references)", missing, len(parsed))
    if not found:
        raise FileNotFoundError(
            f"no Composite files ({', '.join(n for names in SOURCES.values() for n in names)}) in {folder}; "
            "they come with Aditya et al. 2015 (the CLIPScore authors link them)"
        )
    return build_dataset(
        rows,
        RATING_FEATURES,
        {
            "source": datasets.Value("string"),
            "caption_index": datasets.Value("int32"),
            "human_candidate": datasets.Value("bool"),
        },
        "Composite (Aditya et al. 2015): correctness ratings 1-5",
    )
