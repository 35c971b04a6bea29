"""A stream read forward: steps back within the kept bytes replay them, a skip stops at the stream's end."""

from __future__ import annotations

import io

import pytest

from capeval.corpus.forward_stream import CHUNK_BYTES, ForwardStream

DATA = bytes(range(256)) * 64  # 16 KiB, every offset's byte known


class _Counting(io.RawIOBase):
    """A stream that cannot seek, counting the bytes it hands out, at most 100 a read."""

    def __init__(self, data: bytes) -> None:
        self._data = io.BytesIO(data)
        self.handed = 0

    def readable(self):
        return True

    def readinto(self, buffer):
        chunk = self._data.read(min(len(buffer), 100))
        buffer[: len(chunk)] = chunk
        self.handed += len(chunk)
        return len(chunk)


def test_reads_return_what_was_asked_even_when_the_raw_stream_returns_less():
    stream = ForwardStream(_Counting(DATA), keep=1024)
    assert stream.read(1000) == DATA[:1000]
    assert stream.tell() == 1000
    assert stream.read() == DATA[1000:]
    assert stream.read(10) == b""


def test_a_step_back_within_the_kept_bytes_replays_them():
    stream = ForwardStream(_Counting(DATA), keep=1024)
    stream.read(5000)
    assert stream.seek(5000 - 1024) == 5000 - 1024
    assert stream.read(2000) == DATA[5000 - 1024 : 7000 - 1024]  # kept bytes, then new ones
    assert stream.read(3) == DATA[7000 - 1024 : 7003 - 1024]


def test_a_step_back_before_the_kept_bytes_is_refused_naming_them():
    stream = ForwardStream(_Counting(DATA), keep=1024)
    stream.read(5000)
    with pytest.raises(
        OSError, match="cannot step back to byte 100 of a stream: only bytes 3976 to 5000 are kept"
    ):
        stream.seek(100)


def test_a_skip_forward_reads_and_drops_and_stops_at_the_end():
    raw = _Counting(DATA)
    stream = ForwardStream(raw, keep=1024)
    stream.seek(10_000)
    assert stream.read(4) == DATA[10_000:10_004]
    stream.seek(10**15)  # a claim far past the end: read to the end, not 10**15 / CHUNK_BYTES times
    assert raw.handed == len(DATA) and stream.tell() == 10**15
    assert stream.read(1) == b""
    assert CHUNK_BYTES >= 1 << 16


def test_seeking_from_the_end_is_refused_and_relative_seeks_work():
    stream = ForwardStream(_Counting(DATA), keep=1024)
    with pytest.raises(OSError, match="cannot seek from its end"):
        stream.seek(0, io.SEEK_END)
    stream.read(10)
    assert stream.seek(-5, io.SEEK_CUR) == 5
    assert stream.read(5) == DATA[5:10]


def test_a_read_longer_than_the_kept_bytes_keeps_the_last_of_them():
    stream = ForwardStream(_Counting(DATA), keep=512)
    stream.read(300)
    stream.read(9000)  # more than keep in one read: the window is the last 512 bytes, contiguous
    stream.seek(9300 - 512)
    assert stream.read(600) == DATA[9300 - 512 : 9900 - 512]
