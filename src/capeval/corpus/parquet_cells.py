"""Parquet shards read column by column and row group by row group, each size checked before it is materialised.

A Parquet file describes its data compactly: a 16 KB file can hold a 300 MB cell of zeros (compressed), or one
large value that a dictionary makes every row repeat. ``CheckedParquet`` reads only the columns asked for and
refuses, by row:

- before a row group is read, from the footer: a column chunk larger uncompressed than its rows' cells could be
  at ``max_cell_bytes`` each, or than ``MAX_COLUMN_CHUNK_BYTES``, and one holding more values than
  ``capeval.validation.MAX_REFERENCES`` per row (the references column is the only list a shard row has);
- once it is read with its text and bytes still dictionary-encoded (so a repeated value is held once): a column
  chunk that would decode to more than ``MAX_COLUMN_CHUNK_BYTES``, and each cell over ``max_cell_bytes``.

A refused cell reads as null and its row's problem is kept in ``problems`` (row index -> why, the key left
to the caller), for the row's error; the other cells and rows are read as usual. A row group pyarrow cannot decode is refused the same way.

A Parquet file is read from a path or from an open binary file that can seek (an fsspec file): its footer is at its
end and its row groups are read where the footer says, so a stream that cannot seek (a pipe) is refused.
"""

from __future__ import annotations

import os
from typing import BinaryIO

import numpy as np

from capeval.validation import MAX_REFERENCES

# One column of one row group, held in memory at once: img2dataset and datasets write row groups of 100 rows (a
# few to a few hundred MB of images); a larger chunk is refused rather than read (a Parquet file's own sizes can
# make a few KB of file decode to GBs).
MAX_COLUMN_CHUNK_BYTES = 2 * 1024**3


class CheckedParquet:
    """The columns of a Parquet file, read on demand with the checks above.

    ``column_names`` and ``schema`` are the file's (from its footer); ``column(name)`` reads one column as a
    ``pyarrow.ChunkedArray`` of the file's type, refused cells null; ``problems`` collects the refused rows.

    ``source`` is a path or a binary file object open for reading that can seek; a file object is left open (its
    owner closes it) and must stay open while columns are read.

    Raises:
        ValueError: ``source`` is a file object that cannot seek.
        Exception: pyarrow's own errors when the footer cannot be read (the caller reports the shard).
    """

    def __init__(self, source: str | os.PathLike | BinaryIO, max_cell_bytes: int) -> None:
        import pyarrow.parquet as pq

        if not isinstance(source, (str, os.PathLike)) and not _can_seek(source):
            raise ValueError(
                f"a Parquet file is read where its footer says, so it needs a file that can seek; got "
                f"{type(source).__name__}, a stream that cannot (a pipe: gives one: name the file itself)"
            )
        dense = pq.ParquetFile(source)
        self.metadata = dense.metadata
        self.schema = dense.schema_arrow
        self.column_names = self.schema.names
        self.num_rows = self.metadata.num_rows
        self.max_cell_bytes = max_cell_bytes
        self.problems: dict[int, str] = {}
        columns = [self.metadata.schema.column(j) for j in range(self.metadata.num_columns)]
        byte_arrays = [c.path for c in columns if c.physical_type == "BYTE_ARRAY"]
        # Text and bytes come back dictionary-encoded: a value the file repeats is held once until it is checked.
        self._file = pq.ParquetFile(source, metadata=self.metadata, read_dictionary=byte_arrays)
        self._leaves = _leaf_columns(self.schema, [c.path for c in columns])

    def column(self, name: str):
        """The whole column ``name``: its row groups' checked cells, joined."""
        import pyarrow as pa

        chunks = [chunk for _, group in self.row_groups([name]) for chunk in group[name].chunks]
        return pa.chunked_array(chunks, type=self.schema.field(name).type)

    def row_groups(self, names: list[str]):
        """The columns ``names`` one row group at a time: ``(first row, {name: ChunkedArray})``, in order, so that a
        reader holds one row group of the file at once. A refused column chunk reads as nulls, its rows' problem
        in ``problems``."""
        import pyarrow as pa

        start = 0
        for group in range(self.metadata.num_row_groups):
            rows = self.metadata.row_group(group).num_rows
            columns = {}
            for name in names:
                kind = self.schema.field(name).type
                read, problem = self._read(name, group, start, rows, kind)
                if problem is not None:
                    for row in range(start, start + rows):
                        self.problems.setdefault(row, problem)
                    read = [pa.nulls(rows, kind)]
                columns[name] = pa.chunked_array(read, type=kind)
            yield start, columns
            start += rows

    def _read(self, name: str, group: int, start: int, rows: int, dense_type):
        """One row group of a column, checked: ``(arrays, None)``, or ``(None, why it is refused)``."""
        where = f"column {name!r} of row group {group} ({rows} rows)"
        meta = self.metadata.row_group(group)
        leaves = [meta.column(j) for j in self._leaves[name]]
        stored = sum(leaf.total_uncompressed_size for leaf in leaves)
        bound = min(rows * self.max_cell_bytes, MAX_COLUMN_CHUNK_BYTES)
        if stored > bound:
            return None, f"{where} holds {stored:,} bytes uncompressed (limit {bound:,}); it is not read"
        values = max((leaf.num_values for leaf in leaves), default=0)
        if values > rows * MAX_REFERENCES:
            return None, f"{where} holds {values:,} values, over {MAX_REFERENCES} per row; it is not read"
        try:
            encoded = self._file.read_row_group(group, columns=[name]).column(0)
        except Exception as err:  # pyarrow's errors for damaged pages are several types
            return None, f"{where} cannot be decoded: {err}"
        sizes = np.concatenate([cell_sizes(c) for c in encoded.chunks] or [np.zeros(0, np.int64)])
        if sizes.sum() > MAX_COLUMN_CHUNK_BYTES:
            return None, f"{where} decodes to {int(sizes.sum()):,} bytes (limit {MAX_COLUMN_CHUNK_BYTES:,})"
        dense = encoded.cast(dense_type)
        over = sizes > self.max_cell_bytes
        for row in np.flatnonzero(over):
            self.problems.setdefault(
                start + int(row),
                f"its cell in column {name!r} is {int(sizes[row]):,} bytes (limit {self.max_cell_bytes:,})",
            )
        return (_null_where(dense, over) if over.any() else dense).chunks, None


def _can_seek(fh) -> bool:
    try:
        return bool(fh.seekable())
    except (AttributeError, OSError, ValueError):
        return False


def _null_where(array, mask: np.ndarray):
    """``array`` (a ChunkedArray) with the cells under ``mask`` null: they are never turned into Python objects."""
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.if_else(pa.array(mask), pa.nulls(len(array), array.type), array)


def cell_sizes(array) -> np.ndarray:
    """Bytes of text and binary data in each cell of a pyarrow array (nested values summed), computed without
    decoding a dictionary: a value that many rows share counts in each of them. Other types count as 0."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = array.type
    if pa.types.is_dictionary(kind):
        values = cell_sizes(array.dictionary)
        indices = pc.fill_null(array.indices, 0).to_numpy(zero_copy_only=False).astype(np.int64)
        sizes = values[indices] if len(values) else np.zeros(len(array), np.int64)
        return np.where(array.is_null().to_numpy(zero_copy_only=False), 0, sizes)
    if _is_binary(kind):
        return pc.fill_null(pc.binary_length(array), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    if pa.types.is_struct(kind):
        return sum((cell_sizes(child) for child in array.flatten()), np.zeros(len(array), np.int64))
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        parents = pc.list_parent_indices(array).to_numpy(zero_copy_only=False)
        inner = cell_sizes(pc.list_flatten(array))
        return np.bincount(parents, weights=inner, minlength=len(array)).astype(np.int64)
    return np.zeros(len(array), np.int64)


def _is_binary(kind) -> bool:
    import pyarrow as pa

    checks = (
        "is_binary",
        "is_string",
        "is_large_binary",
        "is_large_string",
        "is_binary_view",
        "is_string_view",
    )
    return pa.types.is_fixed_size_binary(kind) or any(
        getattr(pa.types, c, lambda _: False)(kind) for c in checks
    )


def _leaf_columns(schema, paths: list[str]) -> dict[str, list[int]]:
    """The Parquet leaf columns of each top-level field, by their position in the footer (leaves come in field
    order, depth first; a name with dots in it is matched by count, never by splitting the path)."""
    import pyarrow as pa

    def leaves(kind) -> int:
        if pa.types.is_struct(kind):
            return sum(leaves(kind.field(i).type) for i in range(kind.num_fields))
        if pa.types.is_map(kind):
            return leaves(kind.key_type) + leaves(kind.item_type)
        if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
            return leaves(kind.value_type)
        if pa.types.is_dictionary(kind):
            return leaves(kind.value_type)
        return 1

    out, position = {}, 0
    for field in schema:
        count = leaves(field.type)
        out[field.name] = list(range(position, position + count))
        position += count
    if position != len(paths):  # a layout this count does not know: fall back on the paths' first part
        out = {f.name: [j for j, p in enumerate(paths) if p.split(".")[0] == f.name] for f in schema}
    return out
