"""Reference-caption files in the layouts the benchmarks point to, read into ``{image key: [captions]}``.

Image keys are file stems (``1000268201_693b08cb0e``, ``1000092795``, ``COCO_val2014_000000000042``), so a
benchmark can look its references up from an image file name whatever layout they came in:

- Flickr8k / Flickr30k token files: ``<image>.jpg#<k><TAB><caption>`` (``Flickr8k.token.txt``,
  ``results_20130124.token``);
- COCO caption annotations (``captions_val2014.json``): ``{"images": [...], "annotations": [{image_id, caption}]}``;
- Karpathy split files (``dataset_coco.json``, ``dataset_flickr30k.json``): ``{"images": [{filename, sentences: [{raw}]}]}``;
- a JSON object ``{image: [captions]}`` or JSON lines ``{"image": ..., "refs"|"references": [...]}`` (JSON lines
  are recognised by their content, whatever the extension: THumB names its JSON-lines file ``.json``).

THumB's own references (``mscoco/mscoco_references.json``: ``{"seg_id", "set_id", "refs"}`` per line) are keyed
by segment, not by image; :func:`capeval.bench.thumb.load_thumb` reads them with :func:`read_json_lines`.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

from capeval.json_files import InputFileError, parse_json, read_json_file
from capeval.scoring.formats import reference_entries


def image_key(name: str | int) -> str:
    """File stem of an image name or path: ``a/b/123_x.jpg`` -> ``123_x``."""
    return Path(str(name)).stem


def read_token_file(path: str | os.PathLike) -> tuple[dict[str, list[str]], dict[str, str]]:
    """A ``image#k<TAB>caption`` file: ``({image key: [captions in file order]}, {caption id: caption})``."""
    by_image: dict[str, list[str]] = defaultdict(list)
    by_id: dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n").rstrip("\r")
            if not line.strip():
                continue
            if "\t" not in line:
                raise ValueError(f"{path}:{n}: expected '<image>#<k><TAB><caption>', got {line[:60]!r}")
            cid, caption = line.split("\t", 1)
            by_image[image_key(cid.split("#")[0])].append(caption)
            by_id[cid] = caption
    return dict(by_image), by_id


def is_json_lines(path: str | os.PathLike) -> bool:
    """True when the file holds one JSON value per line rather than one JSON document (checked on content)."""
    # Sniffed leniently: a file that is not UTF-8 is refused by name by the reader it goes on to.
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = [line for line in (f.readline() for _ in range(2)) if line.strip()]
    if len(lines) < 2:
        return Path(path).suffix == ".jsonl"
    try:
        json.loads(lines[0])
    except json.JSONDecodeError:
        return False  # the first line is part of a larger document
    return True


def read_json_lines(path: str | os.PathLike) -> list[tuple[int, dict]]:
    """``[(line number, object)]`` of a JSON-lines file; a line that is not a JSON object is an error naming it."""
    out = []
    with open(path, "rb") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            rec = parse_json(line, f"{path}:{n}")
            if not isinstance(rec, dict):
                raise ValueError(f"{path}:{n}: expected a JSON object, got {type(rec).__name__}")
            out.append((n, rec))
    return out


def read_references(path: str | os.PathLike) -> dict[str, list[str]]:
    """Reference captions per image key from any of the layouts in the module docstring."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"reference captions file not found: {path}")
    if path.suffix in (".txt", ".token") or path.name.endswith(".token.txt"):
        return read_token_file(path)[0]
    if is_json_lines(path):
        out: dict[str, list[str]] = {}
        for n, rec in read_json_lines(path):
            refs = rec.get("refs", rec.get("references"))
            img = rec.get("image", rec.get("image_id", rec.get("file_name")))
            if refs is None or img is None:
                hint = (
                    " (THumB's segment-keyed references: load them with load_thumb)"
                    if "seg_id" in rec
                    else ""
                )
                raise ValueError(
                    f"{path}:{n}: expected 'image' and 'refs' (or 'references') fields, got {sorted(rec)}{hint}"
                )
            out[image_key(img)] = [str(r) for r in refs]
        return out
    # The layouts a captioning researcher's references come in are read by capeval score's one strict reader;
    # a benchmark looks its references up by the image file's stem.
    layout, entries = reference_entries(read_json_file(path, "references"), str(path))
    out = defaultdict(list)
    for entry in entries:
        if entry.file_name is not None:
            name = entry.file_name
        elif layout == "coco":
            name = f"COCO_val2014_{int(entry.image_id):012d}.jpg"
        else:
            name = str(entry.image_id)
        key = image_key(name)
        if layout != "coco" and key in out:
            raise InputFileError(f"{path}: image {name!r} appears twice; one entry per image")
        out[key].extend(entry.captions)
    return dict(out)
