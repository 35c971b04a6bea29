"""clip-retrieval's inference layout, for indexers (autofaiss, clip-retrieval's back end, embedding-reader):

    FOLDER/img_emb/img_emb_N.npy        (rows, dim) float16, one row per sample, L2-normalised as given
    FOLDER/text_emb/text_emb_N.npy      (rows, dim) float16, the same rows' captions
    FOLDER/metadata/metadata_N.parquet  the same rows, in the same order

as ``clip_retrieval/clip_inference/writer.py`` (``OutputSink``) writes them: ``N`` is the output part, zero-padded to
``int(log10(part_count)) + 1`` digits so that sorted names are in part order (readers pair the ``.npy`` and
``.parquet`` files by sorting their names); the metadata's first columns are ``image_path`` (clip-retrieval puts a
WebDataset sample's key there, so the row's ``image_path`` if it has one, else its key) and ``caption``, then the
row's other fields in the order they first appear (``key``, ``url``, ``uid``, the scores, ...), as clip-retrieval
appends the fields of each sample's ``.json``.

Only rows with embeddings are in this layout: a row that could not be scored has none, so its key is kept in the
scores output and is absent here, and an embedding that is not finite or is all zeros is refused by key rather
than written. A part that holds no row writes no file (clip-retrieval skips an empty batch; an empty ``.npy``
would put embedding-reader's pairing of files out of step). Each file is written under a hidden temporary name
and renamed, the metadata last: a part is whole when its three files exist with one row count
(``incomplete_parts`` lists those that are not).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from capeval.corpus.output_files import write_atomically

FOLDERS = {"image": "img_emb", "text": "text_emb", "metadata": "metadata"}
FIRST_COLUMNS = ("image_path", "caption")


def part_digits(part_count: int) -> int:
    """Digits of a part's number, as clip-retrieval pads them for ``part_count`` parts."""
    return int(math.log10(part_count)) + 1


class EmbeddingLayoutWriter:
    """Writes output parts of clip-retrieval's layout in ``folder``; add rows to a part, then finish it.

    Args:
        folder: the output folder (created).
        part_count: how many parts the run writes (its shards): sets the padding of the numbers.
        image, text: whether ``img_emb``/``text_emb`` are written (clip-retrieval's enable_image/enable_text).
    """

    def __init__(self, folder: str | os.PathLike, part_count: int, *, image: bool = True, text: bool = True):
        if part_count < 1:
            raise ValueError(f"part_count must be at least 1; got {part_count}")
        if not (image or text):
            raise ValueError("write image or text embeddings, or both")
        self.folder = Path(folder)
        self.part_count = part_count
        self.kinds = [k for k, on in (("image", image), ("text", text)) if on]
        self._parts: dict[int, dict[str, list]] = {}
        self._dims: dict[str, int] = {}

    def paths(self, part: int) -> dict[str, Path]:
        """The files of ``part``: ``image``, ``text`` (those written) and ``metadata``."""
        number = str(part).zfill(part_digits(self.part_count))
        files = {k: self.folder / FOLDERS[k] / f"{FOLDERS[k]}_{number}.npy" for k in self.kinds}
        return {**files, "metadata": self.folder / "metadata" / f"metadata_{number}.parquet"}

    def add(
        self,
        part: int,
        rows: Sequence[Mapping[str, Any]],
        image_embeddings: np.ndarray | None = None,
        text_embeddings: np.ndarray | None = None,
    ) -> None:
        """Add a batch of rows to ``part``, after those added before.

        Args:
            rows: each row's metadata, a mapping with ``key`` and ``caption`` (and any other fields).
            image_embeddings, text_embeddings: ``(len(rows), dim)``, one row per row, for the kinds written.

        Raises:
            ValueError: a part out of range, a row without key or caption, embeddings of another shape, dimension
                or count, or not finite or all zeros (naming the row's index in the batch and its key).
        """
        if not 0 <= part < self.part_count:
            raise ValueError(f"part {part} is outside 0..{self.part_count - 1}")
        for index, row in enumerate(rows):
            missing = [f for f in ("key", "caption") if f not in row]
            if missing:
                raise ValueError(
                    f"row {index} of the batch has no {' or '.join(missing)}: {dict(row)!r:.200}"
                )
        given = {"image": image_embeddings, "text": text_embeddings}
        for kind, matrix in given.items():
            if (matrix is not None) != (kind in self.kinds):
                wanted = "needs" if kind in self.kinds else "does not write"
                raise ValueError(f"this layout {wanted} {kind} embeddings")
        checked = {kind: self._checked(kind, given[kind], rows) for kind in self.kinds}
        held = self._parts.setdefault(part, {"rows": [], **{kind: [] for kind in self.kinds}})
        held["rows"].extend(dict(row) for row in rows)
        for kind, matrix in checked.items():
            held[kind].append(matrix)

    def _checked(self, kind: str, matrix, rows: Sequence[Mapping[str, Any]]) -> np.ndarray:
        matrix = np.asarray(matrix)
        if matrix.ndim != 2 or matrix.shape[0] != len(rows):
            raise ValueError(f"{kind} embeddings have shape {matrix.shape}; expected ({len(rows)}, dim)")
        dim = self._dims.setdefault(kind, matrix.shape[1])
        if matrix.shape[1] != dim:
            raise ValueError(f"{kind} embeddings have {matrix.shape[1]} dimensions; this layout's have {dim}")
        half = matrix.astype(np.float16)
        bad = ~np.isfinite(half).all(axis=1) | ~half.any(axis=1)
        if bad.any():
            index = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"row {index} of the batch (key {rows[index]['key']!r}) has a {kind} embedding that is not finite "
                "or is all zeros: a row without an embedding is not written to this layout"
            )
        return half

    def finish(self, part: int) -> list[Path]:
        """Write ``part`` (files renamed into place, the metadata last) and forget its rows.

        Returns:
            The files written; none when the part holds no row.
        """
        held = self._parts.pop(part, None)
        if held is None or not held["rows"]:
            return []
        paths = self.paths(part)
        for kind in self.kinds:
            matrix = np.concatenate(held[kind])
            write_atomically(paths[kind], lambda fh, m=matrix: np.save(fh, m), "wb", inside=self.folder)
        table = metadata_table(held["rows"])
        write_atomically(paths["metadata"], lambda fh: _write_parquet(table, fh), "wb", inside=self.folder)
        return [paths[kind] for kind in self.kinds] + [paths["metadata"]]


def metadata_table(rows: Sequence[Mapping[str, Any]]):
    """The metadata of ``rows`` as a pyarrow table: ``image_path`` (the row's, else its key), ``caption``, then
    every other field in the order fields first appear (a row without one has null there).

    Raises:
        ValueError: a field whose values pyarrow cannot hold in one column (naming it).
    """
    import pyarrow as pa

    names: dict[str, None] = {}
    for row in rows:
        names.update(dict.fromkeys(f for f in row if f not in FIRST_COLUMNS))
    columns = {
        "image_path": [row.get("image_path", row["key"]) for row in rows],
        "caption": [row["caption"] for row in rows],
        **{name: [row.get(name) for row in rows] for name in names},
    }
    arrays = {}
    for name, values in columns.items():
        try:
            arrays[name] = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as err:
            raise ValueError(f"metadata field {name!r} holds values of several types: {err}") from err
    return pa.table(arrays)


def _write_parquet(table, fh) -> None:
    import pyarrow.parquet as pq

    pq.write_table(table, fh)


def layout_files(folder: str | os.PathLike) -> list[Path]:
    """The files of ``folder`` that this layout names (``img_emb/img_emb_N.npy``, ``text_emb/text_emb_N.npy``,
    ``metadata/metadata_N.parquet``): what a reader of the layout globs. Other files there are not the layout's."""
    folder = Path(folder)
    found = []
    for kind, sub in FOLDERS.items():
        suffix = ".parquet" if kind == "metadata" else ".npy"
        for path in sorted((folder / sub).glob(f"{sub}_*{suffix}")):
            number = path.name[len(sub) + 1 : -len(suffix)]
            if number.isdigit() and not path.is_symlink():
                found.append(path)
    return found


def incomplete_parts(folder: str | os.PathLike) -> list[str]:
    """The parts of a layout whose files disagree, in words (a ``.npy`` without its metadata, row counts that
    differ); empty when every part is whole. Reads only the ``.npy`` headers and the Parquet footers."""
    import pyarrow.parquet as pq

    folder = Path(folder)
    counts: dict[str, dict[str, int]] = {}
    for kind, sub in FOLDERS.items():
        pattern = f"{sub}_*.parquet" if kind == "metadata" else f"{sub}_*.npy"
        for path in sorted((folder / sub).glob(pattern)):
            number = path.stem.rsplit("_", 1)[1]
            if kind == "metadata":
                rows = pq.ParquetFile(path).metadata.num_rows
            else:
                rows = np.load(path, mmap_mode="r").shape[0]
            counts.setdefault(number, {})[kind] = rows
    problems = []
    for number, found in sorted(counts.items()):
        if "metadata" not in found:
            problems.append(f"part {number} has {sorted(found)} embeddings but no metadata_{number}.parquet")
        elif len(set(found.values())) > 1:
            problems.append(f"part {number} has row counts that differ: {found}")
    return problems
