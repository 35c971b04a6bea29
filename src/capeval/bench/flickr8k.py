"""Flickr8k-Expert and Flickr8k-CF (Hodosh et al. 2013) and the CLIPScore authors' JSON layout.

Official files (``Flickr8k_text.zip``): ``ExpertAnnotations.txt`` (image, caption id, three expert ratings 1-4),
``CrowdFlowerAnnotations.txt`` (image, caption id, fraction of "yes", number of yes, number of no) and
``Flickr8k.token.txt`` (``image#k<TAB>caption``, five per image). The loaders keep every judged row and mark the
candidates that are one of their image's references (``candidate_in_references``); removing them is the
protocol's job (:mod:`capeval.bench.protocols`), so both the standard and the easier setting stay reachable.

The JSON files the CLIPScore authors' ``flickr8k_example/download.py`` writes from those, and PAC-S's
``compute_correlations.py`` reads (``flickr8k.json`` for Expert, ``crowdflower_flickr8k.json`` for CF), are
read too: by :func:`load_clipscore_json`, and by the two loaders when a folder holds one of them instead of
the text files (the Expert JSON already leaves out the 158 pairs whose candidate is a reference; the CF JSON
has each judged caption removed from its image's references).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import datasets

from capeval.bench._common import (
    RATING_FEATURES,
    build_dataset,
    find_file,
    image_path,
    normalize_caption,
    optional_file,
    report_skipped,
)
from capeval.bench.references import image_key, read_token_file
from capeval.json_files import read_json_file

_WHERE = (
    "Flickr8k_text.zip (Hodosh et al. 2013) holds ExpertAnnotations.txt, CrowdFlowerAnnotations.txt and "
    "Flickr8k.token.txt; pass the folder that contains them"
)
TOKEN_FILES = ("Flickr8k.token.txt",)
# Written by jmhessel/clipscore flickr8k_example/download.py, read by aimagelab/pacscore compute_correlations.py.
EXPERT_JSON = "flickr8k.json"
CF_JSON = "crowdflower_flickr8k.json"


def _json_instead(path: str | os.PathLike, text_names, json_name: str) -> Path | None:
    """The CLIPScore-layout JSON to read when ``path`` is one, or a folder with it and none of ``text_names``."""
    p = Path(path).expanduser()
    if p.is_file():
        return p if p.suffix == ".json" else None
    if any((p / n).is_file() for n in text_names):
        return None
    return p / json_name if (p / json_name).is_file() else None


def _captions(path: str | os.PathLike, captions: str | os.PathLike | None):
    token = Path(captions) if captions is not None else optional_file(path, TOKEN_FILES)
    if token is None or not token.is_file():
        raise FileNotFoundError(f"Flickr8k.token.txt not found next to {path}. {_WHERE}")
    return read_token_file(token)


def _read_rows(path: Path, n_fields: int, what: str) -> list[list[str]]:
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            parts = line.rstrip("\n").split("\t")
            if len(parts) != n_fields:
                raise ValueError(
                    f"{path}:{n}: {what} rows have {n_fields} tab-separated fields, got {len(parts)}"
                )
            rows.append(parts)
    return rows


def _judged_pair(
    image: str, cid: str, by_image, by_id, image_root, scores: list[float], category: str
) -> dict | None:
    """The row of one judged (image, caption id) pair, or None when the token file lacks either."""
    key = image_key(image)
    if cid not in by_id or key not in by_image:
        return None
    raw_refs = by_image[key]
    return {
        "item_id": f"{image}|{cid}",
        "image_id": key,
        "image": image_path(image_root, image),
        "candidate": normalize_caption(by_id[cid]),
        "references": [normalize_caption(r) for r in raw_refs],
        "human_scores": scores,
        "category": category,
        "candidate_id": cid,
        # The CLIPScore/SPICE rule compares the raw strings of the token file.
        "candidate_in_references": by_id[cid] in raw_refs,
    }


def load_flickr8k_expert(
    path: str | os.PathLike,
    image_root: str | os.PathLike | None = None,
    captions: str | os.PathLike | None = None,
) -> datasets.Dataset:
    """Flickr8k-Expert: one row per judged (image, caption) pair with its three expert ratings.

    Args:
        path: folder holding ``ExpertAnnotations.txt`` and ``Flickr8k.token.txt`` (or the annotation file), or
            the CLIPScore authors' ``flickr8k.json`` (or a folder holding it and not the text files).
        image_root: folder of the Flickr8k images (``Flicker8k_Dataset``); ``image`` is None without it.
        captions: the token file, when it is not next to the annotations.

    Returns:
        Columns ``item_id``, ``image_id``, ``image``, ``candidate``, ``references`` (the image's 5 captions),
        ``human_scores`` (3 expert ratings, 1-4), ``category`` (``"expert"``), ``candidate_id``,
        ``candidate_in_references`` (the candidate is one of the image's own references, 158 rows in the
        official file).
    """
    js = _json_instead(path, ("ExpertAnnotations.txt",), EXPERT_JSON)
    if js is not None:
        return load_clipscore_json(js, image_root=image_root, category="expert")
    ann = find_file(path, ("ExpertAnnotations.txt",), "Flickr8k-Expert annotations", _WHERE)
    by_image, by_id = _captions(ann.parent if Path(path).is_file() else path, captions)
    rows, skipped = [], []
    for image, cid, *ratings in _read_rows(ann, 5, "ExpertAnnotations.txt"):
        row = _judged_pair(image, cid, by_image, by_id, image_root, [float(r) for r in ratings], "expert")
        if row is None:
            skipped.append(cid)
        else:
            rows.append(row)
    report_skipped("Flickr8k-Expert (caption id not in the token file)", skipped, len(rows) + len(skipped))
    return build_dataset(
        rows,
        RATING_FEATURES,
        {"candidate_id": datasets.Value("string"), "candidate_in_references": datasets.Value("bool")},
        "Flickr8k-Expert (Hodosh et al. 2013): 3 expert ratings (1-4) per pair",
    )


def load_flickr8k_cf(
    path: str | os.PathLike,
    image_root: str | os.PathLike | None = None,
    captions: str | os.PathLike | None = None,
) -> datasets.Dataset:
    """Flickr8k-CF (CrowdFlower): one row per judged pair, ``human_scores = [fraction of "yes"]``.

    Reads ``CrowdFlowerAnnotations.txt`` (or a ``CrowdFlowerAnnotations*.txt`` variant such as the partial copy in
    ``../shared/benchmarks``), or the CLIPScore authors' ``crowdflower_flickr8k.json`` (a path to it, or a folder
    holding it and no text file). Extra columns: ``candidate_id``, ``n_yes``, ``n_no``, ``candidate_in_references``
    (from the JSON: ``candidate_in_references`` only).
    """
    folder = Path(path) if Path(path).is_dir() else Path(path).parent
    names = [
        "CrowdFlowerAnnotations.txt",
        *sorted(p.name for p in folder.glob("CrowdFlowerAnnotations*.txt")),
    ]
    js = _json_instead(path, names, CF_JSON)
    if js is not None:
        return load_clipscore_json(js, image_root=image_root, category="crowdflower")
    ann = find_file(path, names, "Flickr8k-CF annotations", _WHERE)
    by_image, by_id = _captions(folder, captions)
    rows, skipped = [], []
    for image, cid, frac, n_yes, n_no in _read_rows(ann, 5, "CrowdFlowerAnnotations.txt"):
        row = _judged_pair(image, cid, by_image, by_id, image_root, [float(frac)], "crowdflower")
        if row is None:
            skipped.append(cid)
        else:
            rows.append({**row, "n_yes": int(n_yes), "n_no": int(n_no)})
    report_skipped("Flickr8k-CF (caption id not in the token file)", skipped, len(rows) + len(skipped))
    return build_dataset(
        rows,
        RATING_FEATURES,
        {
            "candidate_id": datasets.Value("string"),
            "n_yes": datasets.Value("int32"),
            "n_no": datasets.Value("int32"),
            "candidate_in_references": datasets.Value("bool"),
        },
        "Flickr8k-CF (Hodosh et al. 2013): fraction of crowd workers answering yes",
    )


def load_clipscore_json(
    path: str | os.PathLike, image_root: str | os.PathLike | None = None, category: str = ""
) -> datasets.Dataset:
    """The JSON layout written by the CLIPScore authors' ``flickr8k_example/download.py``.

    ``{id: {"image_path": ..., "ground_truth": [refs], "human_judgement": [{"caption", "rating", ...}]}}``.
    Consecutive judgments of the same caption of one image become one row with several ``human_scores``
    (the Flickr8k-Expert file lists each caption three times, once per expert). NaN ratings are skipped and
    reported, as the authors' scripts skip them.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"CLIPScore-layout JSON not found: {path}")
    data = read_json_file(path, "CLIPScore-layout JSON")
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected an object {{id: {{image_path, ground_truth, human_judgement}}}}")
    rows, skipped = [], []
    for key, entry in data.items():
        for field in ("ground_truth", "human_judgement"):
            if field not in entry:
                raise ValueError(f"{path}: entry {key!r} has no {field!r}")
        refs = [normalize_caption(r) for r in entry["ground_truth"]]
        img = entry.get("image_path", "")
        groups: list[tuple[str, list[float]]] = []
        for j, judgement in enumerate(entry["human_judgement"]):
            rating = judgement.get("rating")
            if rating is None or (isinstance(rating, float) and math.isnan(rating)):
                skipped.append(f"{key}[{j}]")
                continue
            caption = normalize_caption(judgement["caption"])
            if groups and groups[-1][0] == caption:
                groups[-1][1].append(float(rating))
            else:
                groups.append((caption, [float(rating)]))
        for k, (caption, ratings) in enumerate(groups):
            rows.append(
                {
                    "item_id": f"{key}|{k}",
                    "image_id": image_key(img) if img else str(key),
                    "image": image_path(image_root, img),
                    "candidate": caption,
                    "references": refs,
                    "human_scores": ratings,
                    "category": category,
                    "candidate_in_references": caption in refs,
                }
            )
    report_skipped(
        f"{path.name} (NaN rating)", skipped, len(skipped) + sum(len(r["human_scores"]) for r in rows)
    )
    return build_dataset(
        rows,
        RATING_FEATURES,
        {"candidate_in_references": datasets.Value("bool")},
        f"CLIPScore-layout judgments from {path.name}",
    )
