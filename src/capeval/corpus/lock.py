"""One run per output folder at a time: an OS lock on ``OUTPUT/run.lock``, released when its process ends.

Two runs writing one folder would interleave their parts and race on the merged outputs' temporary files, so the
second is refused with an error that names the folder. The lock is the operating system's (``flock`` on POSIX,
``msvcrt.locking`` on Windows) on an open file, not a PID file: a crashed or killed run releases it with its
process, and the next run needs no clean-up. The file itself stays (removing it could let two runs each lock a
different file); it holds the holder's process id and host, for the message. The processes of one distributed
run are one run: its main process holds the lock for all of them.
"""

from __future__ import annotations

import os
import socket
import stat
import time
from pathlib import Path

from capeval.corpus.output_files import refuse_links

LOCK_NAME = "run.lock"


class FolderInUseError(ValueError):
    """Another run holds the output folder."""


def _try_lock(fd: int) -> bool:
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        import msvcrt

        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


class OutputLock:
    """The lock of one output folder, held from ``acquire`` until ``release`` or the end of the process.

    Args:
        folder: the run's output folder (it must exist).
    """

    def __init__(self, folder: str | os.PathLike) -> None:
        self.folder = Path(folder)
        self.path = self.folder / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> OutputLock:
        """Take the lock at once, or refuse.

        Raises:
            FolderInUseError: another run (in this process or another) holds the folder.
        """
        fd = self._open()
        if not _try_lock(fd):
            try:
                holder = os.read(fd, 200).decode("utf-8", "replace").strip() or "holder unknown"
            except OSError:  # Windows refuses reads of a locked byte range
                holder = "holder unknown"
            finally:
                os.close(fd)
            raise FolderInUseError(
                f"another run holds the output folder {self.folder} ({holder}; lock file {self.path}): wait for "
                "it to finish, or give this run another output folder"
            )
        os.ftruncate(fd, 0)
        os.write(fd, f"process {os.getpid()} on {socket.gethostname()} since {time.ctime()}\n".encode())
        self._fd = fd
        return self

    def _open(self) -> int:
        """The lock file, open for writing: never through a link (which would truncate the file it points at), and
        never a FIFO or device (opened without blocking, then refused).

        Raises:
            LinkInOutputError: ``run.lock`` is a symbolic link. ValueError: it is not a regular file.
        """
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        try:
            fd = os.open(self.path, flags, 0o644)
        except OSError as err:
            if os.path.islink(self.path):
                refuse_links(self.folder, self.path)
            raise ValueError(f"the lock file {self.path} cannot be opened ({err})") from err
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise ValueError(
                f"the lock file {self.path} is not a regular file: remove it, or give another output folder"
            )
        return fd

    def release(self) -> None:
        """Give the lock back (closing the file releases it); a second call does nothing."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def __enter__(self) -> OutputLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
