"""What a model's files are before anything reads them: regular files only, and their contents' revision.

A device, pipe or socket is refused from its ``stat`` (``require_regular_file``, which every reader of weights calls
first); the files that decide a model's numbers are named by one sha256 over their contents (``files_sha256``,
``weights_sha256``), each file hashed once per process until it changes. Kept apart from ``files`` (reading the
tensors): a model's revision is taken before the backbone cache is asked, its tensors read only when that misses
(a weights file then handed on as a ``RegularFile``, not asked again).
"""

from __future__ import annotations

import hashlib
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


def require_regular_file(path: Path, what: str = "checkpoint file") -> None:
    """Refuse, from its ``stat`` and before any byte is read, a path that is a device, pipe or socket: hashing
    ``/dev/zero`` never ends, opening a pipe blocks forever.

    Raises:
        FileNotFoundError: nothing there.
        ValueError: not a regular file.
    """
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise FileNotFoundError(f"{what} {path.absolute()} does not exist") from None
    if not stat.S_ISREG(mode):
        raise ValueError(f"{what} {path}: not a regular file (a device, pipe or socket); refused unread")


# Besides its weights, the files of a model folder that decide its numbers: transformers reads configs, processor
# and tokenizer settings as JSON, vocabularies and merges as text, SentencePiece models as ``.model`` files; capeval
# reads its provenance record (pacscore.json: the origin that decides the image constants). Files of other kinds
# (README.md, .gitattributes) are not read by anything that scores.
_FOLDER_WEIGHT_SUFFIXES = (".safetensors", ".bin")
_SETTINGS_SUFFIXES = (".json", ".txt", ".model")


def settings_files(folder: Path) -> list[Path]:
    """The files of ``folder`` other than weights that may decide a model's numbers (configs, processor and
    tokenizer files, provenance), sorted by name."""
    return sorted(p for p in folder.iterdir() if p.suffix in _SETTINGS_SUFFIXES and p.is_file())


def weights_sha256(folder: Path) -> str:
    """The revision of a model folder: ``files_sha256`` of its weight files and every file that decides its
    numbers (``settings_files``: config.json, preprocessor_config.json or processor_config.json, the tokenizer's
    files, pacscore.json...), so editing any of them names another model.

    Raises:
        ValueError: no weight file, or one of the files is not a regular file.
    """
    weights = sorted(p for p in folder.iterdir() if p.name.endswith(_FOLDER_WEIGHT_SUFFIXES))
    if not weights:
        raise ValueError(f"model folder {folder} has no weight file (*.safetensors or *.bin)")
    for path in weights:
        require_regular_file(path, "weights file")
    return files_sha256(weights + settings_files(folder))


@dataclass(frozen=True)
class RegularFile:
    """A weights file found to be a regular file (``require_regular_file``) when its revision was taken: what
    ``files.read_state_dict`` reads without asking its ``stat`` again.

    Attributes:
        path: the file.
        revision: ``beside_sha256`` of it.
    """

    path: Path
    revision: str


def weights_file_revision(path: Path) -> RegularFile:
    """A weights file, refused unless regular, with its revision (``beside_sha256``), for its reader.

    Raises:
        FileNotFoundError: nothing there; ValueError: not a regular file (see ``require_regular_file``).
    """
    return RegularFile(path, beside_sha256(path))


def beside_sha256(path: Path) -> str:
    """The revision of a weights file read with the settings files beside it (its tokenizer's files, an OpenCLIP
    sidecar): ``files_sha256`` of the file and ``settings_files`` of its folder."""
    return files_sha256([path, *settings_files(path.parent)])


def files_sha256(paths: Iterable[Path]) -> str:
    """``sha256:`` and 12 hex digits over each file's name and contents hash (``file_sha256``, cached), in name
    order: a revision of a set of files that costs one read per file and process until a file changes."""
    digest = hashlib.sha256()
    for path in sorted(paths, key=lambda p: p.name):
        digest.update(f"{path.name}\0{file_sha256(path)}\n".encode())
    return "sha256:" + digest.hexdigest()[:12]


# (resolved path, size, mtime_ns, inode) -> hex sha256: a file replaced by another of the same size and time (a
# rename over it) has another inode.
_SHA_CACHE: dict[tuple, str] = {}


def file_sha256(path: str | Path) -> str:
    """Hex sha256 of a file, cached per (path, size, mtime_ns, inode) for the process."""
    path = Path(path).resolve()
    require_regular_file(path)
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns, st.st_ino)
    if key not in _SHA_CACHE:
        _SHA_CACHE[key] = _read_sha256(path)
    return _SHA_CACHE[key]


def _read_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()
