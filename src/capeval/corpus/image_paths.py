"""Where a row may read its image from when it names it by path: inside its data file's folder, or an image root.

A JSONL, CSV or Parquet row, a ``datasets`` row or an image folder's entry may name its image by a path instead of
holding its bytes. Such a file comes from whoever wrote the corpus, so a path in it is data, not a permission: by
default a row reads only files inside its data file's folder (a relative path is read there; an absolute path, a
``..`` or a link that leads out of it is refused), and a source with no folder of its own (a ``datasets`` dataset,
a Parquet file in S3) reads no path at all. An image root (``image_root=DIR``, ``--image-root DIR``) is the folder
the user allows instead: every image a row names must lie inside it, and relative paths are still read in the data
file's folder (in the root where there is none).

Containment is decided on the real path (links followed), so a link inside the folder to a file outside it is
refused as the path ``../x`` is; the refusal's words are the same whether the file exists or not, so an error row
tells nothing about files outside the folder.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

IMAGE_ROOT_HINT = "image_root=DIR in Python, --image-root DIR on the command line"


class ImagePaths:
    """The rule for one shard's image paths.

    Args:
        base: the folder a relative path is read in (the data file's), or None where the source has none.
        root: the image root the user gave, or None (then ``base`` is the only folder read).
    """

    def __init__(self, base: str | os.PathLike | None, root: str | os.PathLike | None = None) -> None:
        self.base = os.fspath(base) if base is not None else None
        self.given_root = root is not None
        folder = root if root is not None else base
        self.root = os.path.abspath(os.fspath(folder)) if folder is not None else None
        self._real_root = os.path.realpath(self.root) if self.root is not None else None

    def resolve(self, value: str, where: str) -> tuple[str | None, str | None]:
        """``(the file to read, None)``, or ``(None, why)`` for a path the rule refuses.

        Args:
            value: the path as the row gives it.
            where: the row, for the message (``"rows.jsonl line 3"``).
        """
        if self._real_root is None:
            return None, (
                f"{where} names its image by a path ({value!r:.80}), and its source has no folder to read paths "
                f"in: give the folder that holds its images as an image root ({IMAGE_ROOT_HINT})"
            )
        try:
            joined = os.path.join(self.base or self.root, os.path.expanduser(value))
            real = os.path.realpath(joined)
        except (ValueError, OSError) as err:  # an embedded NUL; a name the OS refuses
            return None, f"{where} names its image by a path that is not usable ({value!r:.80}: {err})"
        if not _inside(real, self._real_root):
            folder = "the image root" if self.given_root else "its data file's folder"
            return None, (
                f"{where} names an image path that leads outside {folder} {self.root} ({value!r:.80}): a row reads "
                f"images only inside it; to read images elsewhere, give an image root that holds them "
                f"({IMAGE_ROOT_HINT})"
            )
        return real, None

    def files(self, values: Iterable[str]) -> Iterable[str]:
        """The files ``values`` name that the rule lets a row read (the others are error rows, read by no one)."""
        for value in values:
            path, problem = self.resolve(value, "")
            if problem is None:
                yield path


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def file_record(path: str) -> list:
    """What a shard's output records of an image file a row read: ``[path, size, mtime_ns]`` as it is when the row
    is read (``[path, None, None]`` for a file that is not there), so that a rerun finds a replaced image."""
    try:
        st = os.stat(path)
    except OSError:
        return [path, None, None]
    return [path, st.st_size, st.st_mtime_ns]


def changed_files(records: Iterable[list]) -> list[str]:
    """The recorded image files (``file_record``'s) that are no longer as recorded: replaced, touched, gone."""
    return [record[0] for record in records if file_record(record[0]) != list(record)]
