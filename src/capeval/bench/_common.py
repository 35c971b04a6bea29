"""Shared pieces of the benchmark loaders: dataset schemas, file lookup, caption normalisation, images."""

from __future__ import annotations

import logging
import os
import urllib.request
from collections.abc import Iterable
from pathlib import Path

import datasets

logger = logging.getLogger("capeval.bench")

# One row per judged caption (correlation benchmarks).
RATING_FEATURES = {
    "item_id": datasets.Value("string"),
    "image_id": datasets.Value("string"),
    "image": datasets.Value("string"),
    "candidate": datasets.Value("string"),
    "references": datasets.Sequence(datasets.Value("string")),
    "human_scores": datasets.Sequence(datasets.Value("float64")),
    "category": datasets.Value("string"),
}

# One row per judged pair of captions (Pascal-50S, Abstract-50S, FOIL).
PAIR_FEATURES = {
    "item_id": datasets.Value("string"),
    "image_id": datasets.Value("string"),
    "image": datasets.Value("string"),
    "candidates": datasets.Sequence(datasets.Value("string")),
    "references": datasets.Sequence(datasets.Value("string")),
    "votes": datasets.Sequence(datasets.Value("int32")),
    "label": datasets.Value("int32"),
    "category": datasets.Value("string"),
}


def normalize_caption(text: str) -> str:
    """Collapse runs of whitespace and strip, as the CLIPScore and PAC-S scripts do (``' '.join(s.split())``)."""
    return " ".join(str(text).split())


def as_folder(path: str | os.PathLike) -> Path:
    p = Path(path).expanduser()
    return p if p.is_dir() else p.parent


def find_file(path: str | os.PathLike, names: Iterable[str], what: str, hint: str = "") -> Path:
    """``path`` itself when it is a file, else the first of ``names`` inside the folder ``path``.

    Raises:
        FileNotFoundError: naming the files looked for and, through ``hint``, where to get them.
    """
    p = Path(path).expanduser()
    names = list(names)
    if p.is_file():
        return p
    for name in names:
        if (p / name).is_file():
            return p / name
    raise FileNotFoundError(
        f"{what}: none of {', '.join(names)} found in {p}" + (f". {hint}" if hint else "")
    )


def optional_file(path: str | os.PathLike, names: Iterable[str]) -> Path | None:
    folder = as_folder(path)
    for name in names:
        if (folder / name).is_file():
            return folder / name
    return None


def image_path(image_root: str | os.PathLike | None, name: str) -> str | None:
    """``image_root/name`` as a string, or None without a root. Existence is checked by the runner, not here,
    so text-only metrics work on benchmarks whose images are absent."""
    if image_root is None or not name:
        return None
    return str(Path(image_root).expanduser() / name)


def build_dataset(
    rows: list[dict], features: dict, extra: dict | None = None, description: str = ""
) -> datasets.Dataset:
    """A ``datasets.Dataset`` with the shared schema plus loader-specific columns."""
    feats = datasets.Features({**features, **(extra or {})})
    columns = {name: [row.get(name) for row in rows] for name in feats}
    info = datasets.DatasetInfo(description=description, features=feats)
    return datasets.Dataset.from_dict(columns, features=feats, info=info)


def report_skipped(what: str, skipped: list[str], total: int) -> None:
    """Loaders never drop rows silently: they log how many and which."""
    if skipped:
        sample = ", ".join(skipped[:5])
        logger.warning(
            "%s: skipped %d of %d rows (%s%s)",
            what,
            len(skipped),
            total,
            sample,
            ", ..." if len(skipped) > 5 else "",
        )


def offline() -> bool:
    return os.environ.get("HF_DATASETS_OFFLINE", "0") not in ("0", "", "false", "False") or os.environ.get(
        "HF_HUB_OFFLINE", "0"
    ) not in ("0", "", "false", "False")


def download(url: str, dest: str | os.PathLike, timeout: float = 60.0) -> Path:
    """Fetch a public benchmark file once into ``dest`` (a file path); refused when the HF offline flags are set."""
    dest = Path(dest).expanduser()
    if dest.is_file():
        return dest
    if offline():
        raise FileNotFoundError(
            f"{dest} is missing and downloads are off (HF_DATASETS_OFFLINE/HF_HUB_OFFLINE); fetch {url}"
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(dest.suffix + ".part")
    logger.info("downloading %s", url)
    with urllib.request.urlopen(url, timeout=timeout) as response, open(tmp, "wb") as out:  # noqa: S310
        while chunk := response.read(1 << 20):
            out.write(chunk)
    os.replace(tmp, dest)
    return dest
