"""Every file a corpus run writes in its output folder, written one way: whole or not at all, never through a link.

A file is written to a hidden temporary name beside it (``.<name>.<pid>.capeval-tmp``), created exclusively and
without following links, synced, then renamed over its name: a reader never sees half a file, and a rename replaces
a link rather than writing into what it points at. Before that, no entry between the output folder and the file
(``scores/``, ``embeddings/img_emb/``, the file itself) may be a symbolic link: a link planted in an output folder
(one shared in ``/tmp``, one copied from elsewhere) would otherwise have the run overwrite any file the user can
write. The output folder itself may be a link: the user named it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

TEMPORARY_SUFFIX = ".capeval-tmp"


class LinkInOutputError(ValueError):
    """An entry of a run's output folder that capeval would write through is a symbolic link."""


def refuse_links(inside: Path, path: Path) -> None:
    """Refuse ``path`` when it, or a folder between ``inside`` and it, is a symbolic link.

    Raises:
        LinkInOutputError: naming the link and where it points.
    """
    inside, path = Path(inside), Path(path)
    try:
        parts = path.relative_to(inside).parts
    except ValueError:
        raise ValueError(f"{path} is not inside the output folder {inside}") from None
    entry = inside
    for part in parts:
        entry = entry / part
        try:
            is_link = stat.S_ISLNK(os.lstat(entry).st_mode)
        except FileNotFoundError:
            return  # nothing below a missing entry exists yet: it will be made here, as a folder or a file
        if is_link:
            raise LinkInOutputError(
                f"{entry} is a symbolic link (to {os.readlink(entry)}): capeval writes nothing through links in "
                f"its output folder {inside}; remove the link, or give another output folder"
            )


def refuse_links_below(output: Path) -> None:
    """Refuse an output folder holding a symbolic link anywhere below it (checked when a run claims the folder, so
    a planted link fails the run before any work rather than at its end).

    Raises:
        LinkInOutputError: naming the first link found.
    """
    folders = [Path(output)]
    while folders:
        with os.scandir(folders.pop()) as entries:
            for entry in entries:
                if entry.is_symlink():
                    refuse_links(Path(output), Path(entry.path))
                elif entry.is_dir(follow_symlinks=False):
                    folders.append(Path(entry.path))


def write_atomically(
    path: Path, write: Callable[[Any], None], mode: str = "w", *, inside: Path, sync: bool = True
) -> Path:
    """``write(file)`` to a temporary file beside ``path``, synced, then renamed over ``path``.

    Args:
        path: the file, inside ``inside``.
        write: called with the open temporary file.
        mode: ``"w"`` (UTF-8 text) or ``"wb"``.
        inside: the run's output folder: no entry below it on the way to ``path`` may be a link.
        sync: ``fsync`` before the rename. A shard's output goes without (a flush to the disk per shard cost more
            than scoring its rows on a fast host, and one torn by a power cut is found damaged and scored again).

    Raises:
        LinkInOutputError: a link on the way (nothing is written).
    """
    path = Path(path)
    refuse_links(inside, path.parent)
    path.parent.mkdir(parents=True, exist_ok=True)
    refuse_links(inside, path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}{TEMPORARY_SUFFIX}")
    try:
        os.unlink(tmp)  # a killed run's temporary of the same process id (a link is removed, never followed)
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    try:
        with open(fd, mode, encoding=None if "b" in mode else "utf-8") as fh:
            write(fh)
            fh.flush()
            if sync:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
    return path
