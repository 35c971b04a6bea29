"""The rows of a row-source shard (JSONL, CSV, image folder, ``datasets``), made by the same checks as a tar's.

Each record (a JSON object, a CSV record, an image with its caption file, a dataset row) goes through
``record_row``, which applies ``capeval.corpus.row_checks`` to its key, caption and references, exactly as the
tar and Parquet readers do: the same value gives the same row, or the same error, whatever file it came from and
whichever executor reads it. A record that cannot be parsed is an error row naming its file and line.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from capeval.corpus.image_paths import ImagePaths, file_record
from capeval.corpus.row_checks import (
    MAX_CAPTION_BYTES,
    caption_problem,
    key_problem,
    origin_fields,
    references_problem,
    writable,
)
from capeval.corpus.row_sources import bounded_lines, csv_records, open_regular
from capeval.corpus.shards import Shard, ShardRow, id_column
from capeval.json_files import InputFileError, parse_json

DATASET_BLOCK_ROWS = 256  # a saved dataset's rows are fetched in slices of this many, not a shard at once


def read_row_shard(shard: Shard, columns: dict[str, Any], records=None) -> Iterator[ShardRow]:
    """The rows of a row-source shard, in order, made as they are iterated.

    Args:
        shard: from ``capeval.corpus.row_sources``.
        columns: the fields read (``caption``, ``image``, ``references``, ``id``), as ``choose_columns`` chose.
        records: the shard's records, read in order by the caller (a streamed dataset's).
    """
    if shard.kind == "jsonl":
        entries = _jsonl_records(shard)
    elif shard.kind == "csv":
        entries = _csv_records(shard, columns)
    elif shard.kind == "image_folder":
        entries = _folder_records(shard)
    elif shard.kind == "datasets":
        start, stop = shard.span
        if records is None:
            records = dataset_records(shard.dataset, start, stop)
        entries = (
            (index, record, f"row {start + index}", str(start + index))
            for index, record in enumerate(records)
        )
    else:
        raise ValueError(f"shard {shard.name} is of kind {shard.kind!r}, not a row source")
    paths = shard.image_paths()
    return (_row(shard, columns, paths, *entry) for entry in entries)


def dataset_records(dataset: Any, start: int, stop: int) -> Iterator[dict]:
    """Rows ``start:stop`` of a dataset as dicts, fetched ``DATASET_BLOCK_ROWS`` at a time (a streamed one is read
    from its start)."""
    import datasets

    if not isinstance(dataset, datasets.Dataset):
        yield from itertools.islice(iter(dataset), start, stop)
        return
    for first in range(start, stop, DATASET_BLOCK_ROWS):
        last = min(stop, first + DATASET_BLOCK_ROWS)
        block = dataset[first:last]
        for k in range(last - first):
            yield {c: block[c][k] for c in block}


def _span_lines(shard: Shard) -> Iterator[bytes]:
    """The lines of the shard's span of its file, read one at a time (spans start and end at line ends), each at
    most ``MAX_LINE_BYTES`` (a longer one, in a file changed since it was listed, fails the shard by name)."""
    start, stop = shard.span
    try:
        fh = open_regular(shard.path, f"{shard.kind.upper()} file")
    except ValueError as err:  # it was a regular file when listed: the shard fails by name
        raise OSError(str(err)) from None
    with fh:
        fh.seek(start)
        for line in bounded_lines(fh, shard.path.name, shard.first_row):
            yield line
            if fh.tell() >= stop:
                return


def _jsonl_records(shard: Shard):
    """``(index, record, where, default key)`` of each non-blank line of the shard's bytes."""
    index = 0
    for lineno, line in enumerate(_span_lines(shard), shard.first_row):
        if not line.strip():
            continue
        where = f"{shard.path.name} line {lineno}"
        try:
            record = parse_json(line, where)
        except InputFileError as err:
            record = {"__error__": str(err)}
        if not isinstance(record, dict):
            record = {"__error__": f"{where} is a JSON {type(record).__name__}, not an object"}
        yield index, record, where, f"{shard.path.name}:{lineno}"
        index += 1


def _csv_records(shard: Shard, columns: dict[str, Any]):
    """``(index, record, where, default key)`` of each CSV record; a references cell holds a JSON list."""
    header = list(shard.fields)
    # Lines as the listing cut them (csv_shards); a data span never starts at the file's byte-order mark.
    text = (line.decode("utf-8") for line in _span_lines(shard))
    reader = csv_records(text, shard.path)
    index, next_line = 0, shard.first_row
    for values in reader:
        line, next_line = next_line, shard.first_row + reader.line_num  # a record may span several lines
        where = f"{shard.path.name} line {line}"
        if not values:
            continue
        if len(values) != len(header):
            record = {"__error__": f"{where} has {len(values)} fields, the header {len(header)}"}
        else:
            record = dict(zip(header, values, strict=True))
            refs = columns.get("references") or "references"
            if record.get(refs):
                try:
                    record[refs] = parse_json(record[refs].encode("utf-8"), f"the {refs!r} field of {where}")
                except InputFileError as err:
                    record = {"__error__": f"{err} (a CSV references field holds a JSON list of strings)"}
            elif refs in record:
                record[refs] = None  # an empty cell: no references
        yield index, record, where, f"{shard.path.name}:{line}"
        index += 1


def _folder_records(shard: Shard):
    """``(index, record, where, default key)`` of each image of the shard and its ``.txt`` caption."""
    for index, relative in enumerate(shard.fields):
        image = shard.path / relative
        text = image.with_suffix(".txt")
        key = str(Path(relative).with_suffix(""))
        record: dict[str, Any] = {"image": str(image)}
        try:
            record["caption"] = _caption_file(text, relative)
        except FileNotFoundError:
            record = {"__error__": f"no caption file {text.name} beside {relative}"}
        except (UnicodeDecodeError, OSError, ValueError) as err:
            record = {"__error__": f"caption file {text.name} of {relative} cannot be read ({err})"}
        yield index, record, f"image {relative}", key


def _caption_file(path: Path, image: str) -> str:
    """An image's ``.txt`` caption, stripped: a regular file of at most twice ``MAX_CAPTION_BYTES`` (room for the
    whitespace the strip removes; the caption's own cap is checked on the row), never read past that.

    Raises:
        ValueError: not a regular file, or longer than that. OSError, UnicodeDecodeError: as reading says.
    """
    limit = 2 * MAX_CAPTION_BYTES
    with open_regular(path, "caption file") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"it holds more than {limit:,} bytes; a caption holds at most {MAX_CAPTION_BYTES:,}")
    return data.decode("utf-8").strip()


def _image(value: Any, paths: ImagePaths, where: str) -> tuple[Any, str | None]:
    """A record's image as the decoder takes it (encoded bytes, a file its rule lets it read, a datasets Image
    value's bytes or path, or a decoded picture), and why a path it names is refused (else None)."""
    if isinstance(value, dict) and set(value) <= {"bytes", "path"}:
        value = value.get("bytes") or value.get("path")
    if isinstance(value, str) and value:
        return paths.resolve(value, where)
    return value, None


def _row(
    shard: Shard,
    columns: dict[str, Any],
    paths: ImagePaths,
    index: int,
    record: dict,
    where: str,
    default_key: str,
) -> ShardRow:
    """One record checked into a row: its key (the id field, else its place), caption, image and references, or
    the first problem found."""
    field = id_column(list(record), columns.get("id"))
    key, problem = (
        (default_key, None) if field is None else key_problem(record[field], f"{where} field {field!r}")
    )
    if "__error__" in record:
        return ShardRow(
            key=key, shard=shard.name, index=index, caption=None, image=None, error=record["__error__"]
        )
    caption_field, image_field = columns.get("caption") or "caption", columns.get("image") or "image"
    caption = record.get(caption_field)
    image, refused = _image(record.get(image_field), paths, where)
    problem = problem or refused
    if problem is None and (image is None or image == b"" or image == ""):
        problem = f"{where} has no image in field {image_field!r}"
    if problem is None and not isinstance(image, (str, bytes)) and not _is_picture(image):
        problem = f"{where} has an image of type {type(image).__name__} in field {image_field!r}"
    problem = problem or caption_problem(caption, where, f" in field {caption_field!r}")
    references, refs_issue = references_problem(record.get(columns.get("references") or "references"), where)
    origin, origin_issue = origin_fields(record, where)
    return ShardRow(
        key=key,
        shard=shard.name,
        index=index,
        caption=writable(caption),
        image=image,
        error=problem or refs_issue or origin_issue,
        references=references,
        origin=origin,
        image_file=file_record(image) if isinstance(image, str) else None,
    )


def _is_picture(value: Any) -> bool:
    """A decoded picture the image reader takes (a PIL image or a numpy array)."""
    import numpy as np
    from PIL import Image

    return isinstance(value, (Image.Image, np.ndarray))
