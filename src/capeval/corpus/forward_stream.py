"""A stream that can only be read forward (a pipe's output), seen by ``tarfile`` as a file it may seek in.

``tarfile`` opened for random access seeks forward to skip what it does not read and, through
``capeval.corpus.tar_members``' checks, steps back a little (an extended header is read once to be checked, then
again by ``tarfile``; the block after the end of a tar is read again to check the tail). ``ForwardStream`` keeps the
last ``keep`` bytes it read, so a step back within them replays them, and skips forward by reading and dropping
bytes, stopping at the stream's end: unlike ``tarfile``'s own stream mode, which skips a claimed size block by
block whether or not the data is there, the work of a skip is bounded by what the stream delivers.
"""

from __future__ import annotations

import io
from typing import BinaryIO

CHUNK_BYTES = 1 << 20  # read and dropped at a time when skipping forward


class ForwardStream:
    """``raw`` read forward, with its last ``keep`` bytes kept for stepping back.

    ``seek`` before those bytes raises ``OSError``; ``seek`` past the end of the stream leaves the position there
    and reads return ``b""``, as a file does. ``raw`` is not closed here: its owner closes it.
    """

    def __init__(self, raw: BinaryIO, keep: int) -> None:
        self._raw = raw
        self._keep = keep
        self._window = bytearray()  # the last bytes read from raw, ending at byte self._end of the stream
        self._end = 0
        self._pos = 0
        self._exhausted = False

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True  # within the kept bytes and forward; tarfile asks before it seeks

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_CUR:
            offset += self._pos
        elif whence != io.SEEK_SET:
            raise OSError("a stream's size is unknown: it cannot seek from its end")
        first_kept = self._end - len(self._window)
        if offset < first_kept:
            raise OSError(
                f"cannot step back to byte {offset} of a stream: only bytes {first_kept} to {self._end} are kept"
            )
        while self._end < offset and not self._exhausted:
            self._pull(min(offset - self._end, CHUNK_BYTES))
        self._pos = offset
        return offset

    def read(self, size: int | None = -1) -> bytes:
        size = -1 if size is None else size
        parts = []
        if self._pos < self._end:  # replay kept bytes first
            start = len(self._window) - (self._end - self._pos)
            stop = len(self._window) if size < 0 else min(len(self._window), start + size)
            parts.append(bytes(self._window[start:stop]))
            self._pos += stop - start
            size = size if size < 0 else size - (stop - start)
        if size != 0 and self._pos == self._end:
            data = self._pull(size)
            self._pos += len(data)
            parts.append(data)
        return b"".join(parts)

    def _pull(self, size: int) -> bytes:
        """Up to ``size`` new bytes of ``raw`` (all that is left when negative), kept in the window."""
        chunks, got = [], 0
        while (size < 0 or got < size) and not self._exhausted:
            want = CHUNK_BYTES if size < 0 else min(size - got, CHUNK_BYTES)
            chunk = self._raw.read(want)  # a pipe may return fewer bytes than asked: b"" alone is its end
            if not chunk:
                self._exhausted = True
                break
            chunks.append(chunk)
            got += len(chunk)
        data = b"".join(chunks)
        self._end += len(data)
        if len(data) >= self._keep:
            self._window = bytearray(data[-self._keep :])
        else:
            self._window += data
        if len(self._window) > 2 * self._keep:
            del self._window[: -self._keep]
        return data
