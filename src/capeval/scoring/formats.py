"""The caption files a captioning researcher already holds, read into ``{image id: ...}``.

Candidates (one system's captions):

- the CLIPScore authors' layout: a JSON object ``{image_id: caption}``;
- a COCO results file: a JSON list ``[{"image_id": 42, "caption": "..."}]``, what pycocotools' ``COCO.loadRes``
  takes (cocoapi ``results/captions_val2014_fakecap_results.json``). One caption per image: pycocoevalcap's
  scorers assert ``len(hypo) == 1`` per image (``bleu/bleu.py``, ``cider/cider.py``), so a second caption for an
  image is refused here, naming the image, rather than one of them silently kept.

References:

- the authors' layout ``{image_id: [captions]}``;
- a COCO caption annotations file (``captions_val2014.json``): ``{"images": [{"id", "file_name", ...}],
  "annotations": [{"image_id", "id", "caption"}]}``, every annotation of an image kept in file order;
- Karpathy's split file (``dataset_coco.json``, ``dataset_flickr8k.json``, ...): ``{"images": [{"filepath",
  "filename", "imgid", "cocoid" (COCO only), "split", "sentences": [{"raw", "tokens", ...}]}]}``; an image is
  keyed by ``cocoid`` when present (the id of COCO results files), else by its file name's stem; the ``raw``
  sentence is used, since the metrics tokenise themselves (PTB for the n-gram baselines).

Images: a folder whose files are named ``<id>.<ext>`` (the authors' layout) or by COCO's patterns
``COCO_val2014_%012d.jpg`` (any split: ``COCO_train2014_``, ``COCO_test2014_``) and ``%012d.jpg`` (COCO 2017).

Ids are matched by one canonical form on every side: COCO's ints (``42``), their strings (``"42"``) and the stems
of COCO's file names (``COCO_val2014_000000000042``, ``000000000042``) are all ``"42"``; any other id is its
string. Two entries of one file with the same canonical id are an error naming both; nothing is dropped.

Every file is read by :func:`capeval.json_files.read_json_file`: a key written twice in one object, text that is
not UTF-8, nesting past ``MAX_JSON_DEPTH`` or an integer too long for Python is refused naming the file.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from capeval.json_files import InputFileError, read_json_file

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".tiff", ".tif", ".bmp", ".webp", ".gif")
# COCO's image file stems: COCO_<split><year>_%012d (2014 release) and %012d (2017 release).
_COCO_STEM = re.compile(r"^(?:COCO_[A-Za-z]+\d{4}_)?(\d{12})$")
_SHOWN = 5  # ids named in an error message


def canonical_id(image_id: object) -> str:
    """The form ids are matched by: COCO ints, their strings and COCO file stems -> ``"42"``; else ``str(id)``.

    Raises:
        TypeError: an id that is neither an int nor a string (a float, a bool, a list).
    """
    if isinstance(image_id, bool) or not isinstance(image_id, (int, str)):
        raise TypeError(f"image id {image_id!r} is {type(image_id).__name__}, expected an int or a string")
    if isinstance(image_id, int):
        return str(image_id)
    text = image_id.strip()
    match = _COCO_STEM.match(text)
    if match:
        return str(int(match.group(1)))
    if text.isascii() and text.isdigit():
        return str(int(text))
    return image_id


def _shown(ids: list) -> str:
    more = f" and {len(ids) - _SHOWN} more" if len(ids) > _SHOWN else ""
    return f"{ids[:_SHOWN]}{more}"


def _put(out: dict, key: str, original: object, value, where: str) -> None:
    if key in out:
        raise InputFileError(
            f"{where}: image id {original!r} appears twice (as {out[key][0]!r} and {original!r}); "
            "one entry per image"
        )
    out[key] = (original, value)


def parse_candidates(data, where: str = "candidates") -> dict[str, tuple[object, object]]:
    """Captions by canonical id, each with the id as written: ``{canonical: (id, caption)}``, in file order.

    ``data`` is a COCO results list or an ``{image_id: caption}`` object. Captions are returned as found; the
    metrics check them (an empty caption is an error naming the item there).

    Raises:
        InputFileError: another layout, an entry without ``image_id`` / ``caption``, or an image given twice.
    """
    out: dict[str, tuple[object, object]] = {}
    if isinstance(data, list):
        entries: dict[str, list[int]] = {}
        for k, entry in enumerate(data):
            if not isinstance(entry, dict) or "image_id" not in entry or "caption" not in entry:
                raise InputFileError(
                    f"{where}: entry {k} is {str(entry)[:80]!r}; a COCO results file is a list of "
                    '{"image_id": ..., "caption": ...}'
                )
            try:
                key = canonical_id(entry["image_id"])
            except TypeError as err:
                raise InputFileError(f"{where}: entry {k}: {err}") from None
            entries.setdefault(key, []).append(k)
            out.setdefault(key, (entry["image_id"], entry["caption"]))
        repeated = [f"{out[key][0]!r} (entries {ks})" for key, ks in entries.items() if len(ks) > 1]
        if repeated:
            raise InputFileError(
                f"{where}: {len(repeated)} image_id(s) have more than one caption: {_shown(repeated)}; "
                "pycocoevalcap scores one caption per image (its scorers assert len(hypo) == 1): keep one each"
            )
        return out
    if isinstance(data, dict):
        for original, caption in data.items():
            _put(out, canonical_id(original), original, caption, where)
        return out
    raise InputFileError(
        f"{where}: expected a COCO results list [{{image_id, caption}}] or an object {{image_id: caption}}, "
        f"got {type(data).__name__}"
    )


def read_candidates(path: str | os.PathLike) -> dict[str, tuple[object, object]]:
    """:func:`parse_candidates` of a JSON file."""
    return parse_candidates(read_json_file(path, "candidates"), where=str(path))


@dataclass(frozen=True)
class ReferenceEntry:
    """One image's reference captions as a references file gives them.

    Attributes:
        image_id: the image as the file names it: a COCO id, a Karpathy ``cocoid`` (else its file's stem), a key
            of the authors' object.
        file_name: the image file the layout names (COCO's ``images[].file_name``, Karpathy's ``filename``), or
            None.
        captions: its reference captions, in file order (one per COCO annotation).
    """

    image_id: object
    file_name: str | None
    captions: list


def reference_entries(data, where: str = "references") -> tuple[str, list[ReferenceEntry]]:
    """The one strict reading of a references document: COCO caption annotations (one entry per annotation),
    Karpathy's split file or the authors' ``{image_id: [captions]}`` object (one entry per image). ``capeval
    score`` keys the entries by canonical id (``parse_references``), the benchmarks by image file stem.

    Returns:
        ``("coco" | "karpathy" | "authors", entries)``.

    Raises:
        InputFileError: another layout, a record missing a field, or references of an image that are not a list
            (a bare string is refused rather than guessed at).
    """
    if isinstance(data, dict) and isinstance(data.get("annotations"), list):
        files = {
            img["id"]: img.get("file_name")
            for img in data.get("images") or []
            if isinstance(img, dict) and isinstance(img.get("id"), (int, str))
        }
        entries = []
        for k, ann in enumerate(data["annotations"]):
            if not isinstance(ann, dict) or "image_id" not in ann or "caption" not in ann:
                raise InputFileError(f"{where}: annotation {k} has no 'image_id' and 'caption'")
            image_id = ann["image_id"]
            named = files.get(image_id) if isinstance(image_id, (int, str)) else None
            entries.append(
                ReferenceEntry(image_id, named if isinstance(named, str) else None, [ann["caption"]])
            )
        return "coco", entries
    if isinstance(data, dict) and isinstance(data.get("images"), list) and "annotations" not in data:
        entries = []
        for k, img in enumerate(data["images"]):
            if not isinstance(img, dict) or not isinstance(img.get("sentences"), list):
                raise InputFileError(f"{where}: images[{k}] has no 'sentences' list (Karpathy's layout)")
            file_name = str(img["filename"]) if "filename" in img else None
            if "cocoid" in img:
                original = img["cocoid"]
            elif file_name is not None:
                original = Path(file_name).stem
            else:
                raise InputFileError(f"{where}: images[{k}] has neither 'cocoid' nor 'filename'")
            refs = []
            for j, sent in enumerate(img["sentences"]):
                if not isinstance(sent, dict) or not ("raw" in sent or "tokens" in sent):
                    raise InputFileError(f"{where}: images[{k}].sentences[{j}] has no 'raw' or 'tokens'")
                refs.append(sent["raw"] if "raw" in sent else " ".join(sent["tokens"]))
            entries.append(ReferenceEntry(original, file_name, refs))
        return "karpathy", entries
    if isinstance(data, dict):
        not_lists = [original for original, refs in data.items() if not isinstance(refs, list)]
        if not_lists:
            raise InputFileError(f"references of {_shown(not_lists)} are not lists of captions")
        return "authors", [ReferenceEntry(original, None, refs) for original, refs in data.items()]
    raise InputFileError(
        f"{where}: expected {{image_id: [captions]}}, COCO annotations ({{images, annotations}}) or Karpathy's "
        f"split file ({{images: [{{sentences}}]}}), got {type(data).__name__}"
    )


def parse_references(data, where: str = "references") -> dict[str, list]:
    """Reference captions by canonical id from the authors' layout, COCO annotations or a Karpathy split file
    (``reference_entries``).

    Raises:
        InputFileError: as ``reference_entries``, or an image given twice (Karpathy's file, the authors' object).
    """
    layout, entries = reference_entries(data, where)
    if layout == "coco":
        out: dict[str, list] = {}
        for k, entry in enumerate(entries):
            try:
                key = canonical_id(entry.image_id)
            except TypeError as err:
                raise InputFileError(f"{where}: annotation {k}: {err}") from None
            out.setdefault(key, []).extend(entry.captions)
        return out
    by_id: dict[str, tuple[object, list]] = {}
    for entry in entries:
        _put(by_id, canonical_id(entry.image_id), entry.image_id, entry.captions, where)
    return {key: refs for key, (_, refs) in by_id.items()}


def read_references(path: str | os.PathLike) -> dict[str, list]:
    """:func:`parse_references` of a JSON file."""
    return parse_references(read_json_file(path, "references"), where=str(path))


def find_images(image_dir: str | os.PathLike) -> dict[str, Path]:
    """Image files of a folder by canonical id (``<id>.<ext>``, ``COCO_val2014_%012d.jpg``, ``%012d.jpg``).

    Raises:
        InputFileError: the folder is missing, or two files have the same id (``7.png`` and ``7.jpg``,
            ``COCO_val2014_000000000007.jpg`` and ``000000000007.jpg``).
    """
    folder = Path(image_dir)
    if not folder.is_dir():
        raise InputFileError(f"image folder not found: {folder}")
    found: dict[str, Path] = {}
    for path in sorted(folder.iterdir()):
        if path.suffix.lower() in IMAGE_EXTENSIONS and path.is_file():
            key = canonical_id(path.stem)
            if key in found:
                raise InputFileError(f"two images share the id {key!r}: {found[key].name}, {path.name}")
            found[key] = path
    return found


def match_inputs(
    systems: Mapping[str, Mapping[str, tuple[object, object]]],
    images: Mapping[str, Path] | None,
    references: Mapping[str, list] | None,
) -> tuple[list[str], list[object]]:
    """The image ids every system is scored on (the first system's order) and the ids as that file wrote them.

    Raises:
        InputFileError: a system without an image another has (or with one more), a candidate with no image
            file, or one with no references; each names a few ids.
    """
    if not systems:
        raise InputFileError("no candidates to score")
    names = list(systems)
    first = systems[names[0]]
    keys = list(first)
    if not keys:
        raise InputFileError(f"{names[0]}: no captions")
    for name in names[1:]:
        missing = [first[k][0] for k in keys if k not in systems[name]]
        extra = [v[0] for k, v in systems[name].items() if k not in first]
        if missing or extra:
            raise InputFileError(
                f"systems must caption the same images: {name} lacks {len(missing)} image(s) of {names[0]} "
                f"{_shown(missing)} and has {len(extra)} it lacks {_shown(extra)}"
            )
    if images is not None:
        no_image = [first[k][0] for k in keys if k not in images]
        if no_image:
            raise InputFileError(
                f"{len(no_image)} candidate id(s) have no image in the folder, e.g. {_shown(no_image)} "
                "(images are matched by file name without extension, or COCO's COCO_val2014_%012d / %012d)"
            )
    if references is not None:
        no_refs = [first[k][0] for k in keys if k not in references]
        if no_refs:
            raise InputFileError(f"{len(no_refs)} candidate id(s) have no references, e.g. {_shown(no_refs)}")
    return keys, [first[k][0] for k in keys]


@dataclass
class CaptionFiles:
    """Candidate files of one or more systems, paired with their images and references by image id.

    Attributes:
        ids: the images, as the first candidates file names them, in its order.
        systems: ``{system name: [caption per image]}``.
        images: an image path per id, or None without an image folder.
        references: a list of references per id, or None without a references file.
        unused_images: image files in the folder that no candidate names (reported, not scored).
    """

    ids: list
    systems: dict[str, list]
    images: list[str] | None
    references: list[list] | None
    unused_images: int


def system_names(paths: Sequence[str | os.PathLike]) -> list[str]:
    """A name per candidates file: its stem (``runs/blip.json`` -> ``blip``), or the path as given where two
    stems are the same.

    Raises:
        InputFileError: the same file given twice.
    """
    texts = [os.fspath(p) for p in paths]
    repeated = sorted({t for t in texts if texts.count(t) > 1})
    if repeated:
        raise InputFileError(f"candidates file(s) given twice: {repeated}")
    stems = [Path(t).stem for t in texts]
    return [stem if stems.count(stem) == 1 else text for stem, text in zip(stems, texts, strict=True)]


def read_caption_files(
    candidate_files: Sequence[str | os.PathLike],
    image_dir: str | os.PathLike | None = None,
    references: str | os.PathLike | None = None,
    names: Sequence[str] | None = None,
) -> CaptionFiles:
    """Read candidates files (any layout of the module docstring), the image folder and the references.

    Raises:
        InputFileError: a file in no supported layout, an image captioned twice in one file, systems that do not
            caption the same images, or an image id without an image file or references (naming a few ids).
    """
    names = list(names) if names is not None else system_names(candidate_files)
    if len(names) != len(candidate_files):
        raise InputFileError(f"got {len(names)} names for {len(candidate_files)} candidates files")
    parsed = {name: read_candidates(path) for name, path in zip(names, candidate_files, strict=True)}
    found = find_images(image_dir) if image_dir is not None else None
    refs = read_references(references) if references is not None else None
    keys, ids = match_inputs(parsed, found, refs)
    return CaptionFiles(
        ids=ids,
        systems={name: [parsed[name][k][1] for k in keys] for name in names},
        images=[str(found[k]) for k in keys] if found is not None else None,
        references=[refs[k] for k in keys] if refs is not None else None,
        unused_images=len(found) - len(keys) if found is not None else 0,
    )
