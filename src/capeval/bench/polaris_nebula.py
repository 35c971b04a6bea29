"""Polaris (Wada et al. 2024) and Nebula (Matsuda et al. 2024): large judgment sets published on the Hub.

Layouts accepted (a local folder or file, or the Hub repository when online):

- Polaris, Hub parquet (``yuwd/Polaris``, ``data/{train,validation,test}-*.parquet``): ``refs``, ``cand``,
  ``img`` (image), ``human_score``.
- Polaris, the original CSV files (``polaris_{train,val,test}.csv``): ``mt``, ``refs`` (a Python list literal),
  ``score``, ``imgid``; images in an ``images/`` folder.
- Nebula, Hub parquet (``Ka2ukiMatsuda/Nebula``, ``data/{train,valid,test}-*.parquet``): ``file_name``,
  ``image``, ``refs``, ``mt``, ``human_score``.

Every layout comes out with the shared rating columns; ``image`` is a ``datasets.Image`` when the images are
embedded, else a path string (or None).
"""

from __future__ import annotations

import ast
import csv
import os
from pathlib import Path

import datasets

from capeval.bench._common import RATING_FEATURES, image_path, normalize_caption, offline

POLARIS_REPO = "yuwd/Polaris"
NEBULA_REPO = "Ka2ukiMatsuda/Nebula"
_SPLIT_ALIASES = {"validation": ("validation", "val", "valid"), "valid": ("valid", "validation", "val")}


def _split_names(split: str) -> tuple[str, ...]:
    return _SPLIT_ALIASES.get(split, (split,))


def _local_parquet(folder: Path, split: str) -> list[str]:
    for name in _split_names(split):
        files = sorted(str(p) for p in folder.glob(f"**/{name}-*.parquet"))
        if files:
            return files
    return []


def _from_hub_layout(
    ds: datasets.Dataset, name: str, split: str, cand: str, image_col: str, file_col: str | None
) -> datasets.Dataset:
    def convert(batch, idx):
        n = len(batch[cand])
        return {
            "item_id": [f"{name}/{split}/{i}" for i in idx],
            "image_id": [str(batch[file_col][k]) if file_col else str(idx[k]) for k in range(n)],
            "candidate": [normalize_caption(c) for c in batch[cand]],
            "references": [[normalize_caption(r) for r in refs] for refs in batch["refs"]],
            "human_scores": [[float(s)] for s in batch["human_score"]],
            "category": [name] * n,
        }

    keep = {image_col}
    out = ds.map(
        convert,
        batched=True,
        with_indices=True,
        remove_columns=[c for c in ds.column_names if c not in keep],
        desc=f"{name} {split}",
    )
    if image_col != "image":
        out = out.rename_column(image_col, "image")
    cols = ["item_id", "image_id", "image", "candidate", "references", "human_scores", "category"]
    return out.select_columns(cols)


def _load_parquet_or_hub(path, repo: str, split: str) -> tuple[datasets.Dataset, str]:
    if path is not None and Path(path).expanduser().exists():
        p = Path(path).expanduser()
        files = [str(p)] if p.is_file() and p.suffix == ".parquet" else _local_parquet(p, split)
        if files:
            return datasets.load_dataset("parquet", data_files={split: files}, split=split), "parquet"
        return None, "missing"
    if offline():
        raise FileNotFoundError(
            f"{repo}: no local copy given and the Hub is off (HF_DATASETS_OFFLINE); pass the downloaded folder"
        )
    return datasets.load_dataset(repo, split=split), "hub"


def load_polaris(
    path: str | os.PathLike | None = None, split: str = "test", image_root: str | os.PathLike | None = None
) -> datasets.Dataset:
    """Polaris judgments (``human_scores = [score]``, scores in [0, 1]).

    Args:
        path: a local folder (Hub parquet snapshot or the original ``polaris_<split>.csv`` files) or None to
            download ``yuwd/Polaris`` (online only).
        split: ``train``, ``validation`` (``val``) or ``test``.
        image_root: for the CSV layout, the folder of the images (default ``<path>/images``).
    """
    ds, kind = _load_parquet_or_hub(path, POLARIS_REPO, split)
    if ds is not None:
        return _from_hub_layout(ds, "polaris", split, "cand", "img", None)
    folder = Path(path).expanduser()
    csv_file = next(
        (folder / f"polaris_{n}.csv" for n in _split_names(split) if (folder / f"polaris_{n}.csv").is_file()),
        folder if folder.is_file() and folder.suffix == ".csv" else None,
    )
    if csv_file is None:
        raise FileNotFoundError(
            f"no Polaris {split} data (data/{split}-*.parquet or polaris_{split}.csv) in {folder}"
        )
    root = image_root if image_root is not None else (csv_file.parent / "images")
    rows = []
    with open(csv_file, encoding="utf-8", newline="") as f:
        for i, rec in enumerate(csv.DictReader(f)):
            for col in ("mt", "refs", "score", "imgid"):
                if col not in rec:
                    raise ValueError(f"{csv_file}: missing column {col!r} (expected mt, refs, score, imgid)")
            refs = ast.literal_eval(rec["refs"])  # a list literal, never code
            img = rec["imgid"] if Path(rec["imgid"]).suffix else f"{rec['imgid']}.jpg"
            rows.append(
                {
                    "item_id": f"polaris/{split}/{i}",
                    "image_id": Path(img).stem,
                    "image": image_path(root, img),
                    "candidate": normalize_caption(rec["mt"]),
                    "references": [normalize_caption(r) for r in refs],
                    "human_scores": [float(rec["score"])],
                    "category": "polaris",
                }
            )
    feats = datasets.Features(RATING_FEATURES)
    return datasets.Dataset.from_list(rows, features=feats)


def load_nebula(path: str | os.PathLike | None = None, split: str = "test") -> datasets.Dataset:
    """Nebula judgments from its Hub parquet layout (a local snapshot, or ``Ka2ukiMatsuda/Nebula`` online)."""
    ds, kind = _load_parquet_or_hub(path, NEBULA_REPO, split)
    if ds is None:
        raise FileNotFoundError(f"no Nebula {split} parquet files (data/{split}-*.parquet) under {path}")
    return _from_hub_layout(ds, "nebula", split, "mt", "image", "file_name")
