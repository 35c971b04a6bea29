"""Tars read from open files and from streams: an fsspec file gives what the path gives, and a pipe's output,
read forward once, gives the same samples under the same limits, a claim its size cannot bound ending the tar."""

from __future__ import annotations

import io
import subprocess
import tarfile
import tracemalloc
from contextlib import contextmanager

import fsspec
import pytest

from capeval.corpus.tar_members import (
    MAX_CHAINED_HEADERS,
    MAX_STREAM_TAIL_BYTES,
    TarUnreadable,
    tar_samples,
)
from tests import hostile_shards as H

WANTED = ("jpg", "jpeg", "png", "webp", "txt", "json")
LIMIT = 64 * 1024 * 1024


class _Counted:
    """A stream (it cannot seek) that counts the bytes taken from it."""

    def __init__(self, raw) -> None:
        self.raw, self.taken = raw, 0

    def seekable(self) -> bool:
        return False

    def read(self, size=-1) -> bytes:
        data = self.raw.read(size)
        self.taken += len(data)
        return data


def _summary(samples):
    return [(s.key, sorted(s.fields), s.problem) for s in samples]


@contextmanager
def _pipe(path):
    """A real pipe: ``cat``'s standard output, which cannot seek."""
    proc = subprocess.Popen(["cat", str(path)], stdout=subprocess.PIPE)
    try:
        yield proc.stdout
    finally:
        proc.stdout.close()  # a reader that stopped early leaves cat writing: it gets SIGPIPE
        proc.wait(timeout=10)


class _Trickle(io.RawIOBase):
    """A stream that cannot seek and returns at most 7 bytes a read, as a slow pipe may."""

    def __init__(self, data: bytes) -> None:
        self._data = io.BytesIO(data)

    def readable(self):
        return True

    def readinto(self, buffer):
        chunk = self._data.read(min(len(buffer), 7))
        buffer[: len(chunk)] = chunk
        return len(chunk)


def _from_every_source(path):
    """The samples of ``path`` read from the path, an open file, an fsspec memory file and a pipe."""
    fs = fsspec.filesystem("memory")
    fs.pipe_file(f"/streams/{path.name}", path.read_bytes())
    by_path = _summary(tar_samples(path, WANTED, LIMIT))
    with open(path, "rb") as fh:
        by_file = _summary(tar_samples(fh, WANTED, LIMIT))
    with fs.open(f"/streams/{path.name}", "rb") as fh:
        by_fsspec = _summary(tar_samples(fh, WANTED, LIMIT))
    with _pipe(path) as stream:
        by_pipe = _summary(tar_samples(stream, WANTED, LIMIT))
    by_trickle = _summary(tar_samples(_Trickle(path.read_bytes()), WANTED, LIMIT))
    return by_path, by_file, by_fsspec, by_pipe, by_trickle


HOSTILE = {
    "ordinary samples": lambda: H.tar_of(*H.sample("a", seed=1), *H.sample("b", seed=2)),
    "a key that comes back": lambda: H.tar_of(*H.sample("a"), *H.sample("b"), *H.sample("a")),
    "a field twice": lambda: H.tar_of(
        H.member("c.jpg", H.jpeg()), H.member("c.jpg", H.jpeg()), *H.sample("d")
    ),
    "a GNU sparse member": lambda: H.tar_of(*H.sample("a"), H.gnu_sparse_member("s.jpg", 60 * 2**20)),
    "a PAX sparse member": lambda: H.tar_of(*H.sample("a"), H.pax_sparse_member("s.jpg", 60 * 2**20)),
    "a damaged header": lambda: H.tar_of(
        *H.sample("a"), H.header("b.jpg", 10)[:100] + b"\1" * 412, *H.sample("c")
    ),
    "zeros after the end": lambda: H.tar_of(*H.sample("a")) + bytes(9000),
    "a long name and PAX records": lambda: H.tar_of(
        H.extended_header(H.pax_record("path", b"x" * 150 + b".jpg")),
        H.member("ignored", H.jpeg()),
        H.extended_header(H.pax_record("path", b"x" * 150 + b".txt")),
        H.member("ignored", "été".encode()),
    ),  # fmt: skip
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_tar_gives_the_same_samples_from_its_path_an_open_file_fsspec_and_a_pipe(tmp_path, case):
    path = tmp_path / "00000.tar"
    path.write_bytes(HOSTILE[case]())
    by_path, *others = _from_every_source(path)
    assert by_path  # every case holds at least one sample
    for other in others:
        assert other == by_path


def test_the_samples_of_a_pipe_hold_the_members_bytes(tmp_path):
    path = tmp_path / "00000.tar"
    path.write_bytes(H.tar_of(*H.sample("a", "a caption", seed=3), *H.sample("b", "another", seed=4)))
    with _pipe(path) as stream:
        samples = list(tar_samples(stream, WANTED, LIMIT))
    assert [(s.key, s.fields["jpg"], s.fields["txt"]) for s in samples] == [
        ("a", H.jpeg(3), b"a caption"),
        ("b", H.jpeg(4), b"another"),
    ]


@pytest.mark.parametrize(
    "payload, problem",
    [
        (H.chained_long_names(400, "a.jpg"), f"is header {MAX_CHAINED_HEADERS + 1} in a row"),
        (H.extended_header(b"2 " * 32767 + b"=\n"), "is malformed"),
    ],
    ids=["chained headers", "false PAX record lengths"],
)
def test_a_refused_header_makes_a_stream_unreadable_as_it_does_a_file(tmp_path, payload, problem):
    path = tmp_path / "00000.tar"
    path.write_bytes(H.tar_of(payload, H.padded(H.jpeg()), *H.sample("b")))
    for open_source in (lambda: open(path, "rb"), lambda: _pipe(path)):
        with open_source() as source, pytest.raises(TarUnreadable, match=problem):
            list(tar_samples(source, WANTED, LIMIT))


@pytest.mark.parametrize(
    "claim",
    [H.pax_size_claim("big.jpg", 10**11), H.header("big.jpg", 10**11) + H.padded(b"x")],
    ids=["PAX size record", "GNU base-256 size"],
)
def test_a_claim_over_the_member_limit_ends_a_stream_at_its_header_without_reading_on(tmp_path, claim):
    # A file's size shows a claim of 10**11 bytes false; a stream's cannot, so the member limit bounds it.
    path = tmp_path / "00000.tar"
    claim_ends = len(b"".join([*H.sample("a"), claim]))
    path.write_bytes(H.tar_of(*H.sample("a"), claim, *H.sample("never_read")))
    with _pipe(path) as pipe:
        stream = _Counted(pipe)
        samples = list(tar_samples(stream, WANTED, LIMIT))
    assert stream.taken <= claim_ends  # not a byte of what follows the claim is taken from the pipe
    assert [(s.key, s.problem is None) for s in samples] == [("a", True), ("big", False)]
    assert samples[1].problem == (
        f"tar member big.jpg claims {10**11} bytes (limit {LIMIT}) in a stream whose size is unknown: "
        "it is not skipped, and nothing after it is read"
    )


def test_a_member_over_the_limit_is_skipped_in_a_file_but_ends_a_stream(tmp_path):
    path = tmp_path / "00000.tar"
    path.write_bytes(H.tar_of(*H.sample("a"), H.member("b.jpg", b"x" * 5000), *H.sample("c")))
    with open(path, "rb") as fh:
        in_file = _summary(tar_samples(fh, WANTED, 4096))
    assert in_file == [
        ("a", ["jpg", "txt"], None),
        ("b", [], "member b.jpg is 5000 bytes (limit 4096)"),
        ("c", ["jpg", "txt"], None),
    ]
    with _pipe(path) as stream:
        in_stream = _summary(tar_samples(stream, WANTED, 4096))
    assert in_stream[:1] == in_file[:1] and len(in_stream) == 2
    assert in_stream[1][2].startswith("tar member b.jpg claims 5000 bytes (limit 4096) in a stream")


def test_a_stream_cut_inside_a_member_ends_the_tar_on_that_sample(tmp_path):
    data = H.tar_of(*H.sample("a"), *H.sample("b", seed=2))
    b_starts = len(H.tar_of(*H.sample("a"))) - len(H.END)
    cut = data[: b_starts + H.BLOCK + 200]  # inside b's picture
    samples = list(tar_samples(_Trickle(cut), WANTED, LIMIT))
    assert [(s.key, s.problem) for s in samples] == [
        ("a", None),
        ("b", "tar ends inside a member (unexpected end of data)"),
    ]


def test_a_stream_is_read_after_its_end_only_as_far_as_the_tail_limit(tmp_path):
    behind = H.member("z.jpg", H.jpeg())
    tar = H.tar_of(*H.sample("a"))
    near = tar + bytes(4096) + behind
    far = tar + bytes(MAX_STREAM_TAIL_BYTES + 4096) + behind
    [sample] = tar_samples(_Trickle(near), WANTED, LIMIT)
    end = len(tar) - len(H.END)
    assert sample.problem == (
        f"the tar has no valid header at byte {end} but data at byte {len(tar) + 4096}: it is damaged, and "
        "nothing after it is read"
    )
    [sample] = tar_samples(io.BufferedReader(_Trickle(far)), WANTED, LIMIT)
    assert sample.problem is None  # data behind a megabyte of zeros is not looked for in a stream


def test_sparse_members_in_a_stream_are_refused_before_their_holes_are_filled(tmp_path):
    path = tmp_path / "00000.tar"
    path.write_bytes(
        H.tar_of(*H.sample("a"), *[H.gnu_sparse_member(f"s{i}.jpg", 60 * 2**20) for i in range(8)])
    )
    tracemalloc.start()
    try:
        with _pipe(path) as stream:
            samples = list(tar_samples(stream, WANTED, LIMIT))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20
    assert samples[1].problem.startswith("member s0.jpg is a sparse file (")


def test_a_file_object_given_is_left_open_for_its_owner(tmp_path):
    path = tmp_path / "00000.tar"
    H.write_tar(path, [("a.jpg", H.jpeg()), ("a.txt", b"a caption")])
    with open(path, "rb") as fh:
        assert [s.key for s in tar_samples(fh, WANTED, LIMIT)] == ["a"]
        assert not fh.closed


def test_an_empty_stream_or_one_that_is_no_tar_is_unreadable():
    with pytest.raises(TarUnreadable, match="empty file"):
        list(tar_samples(_Trickle(b""), WANTED, LIMIT))
    with pytest.raises(TarUnreadable):
        list(tar_samples(_Trickle(b"<html>404 Not Found</html>" * 40), WANTED, LIMIT))


def test_members_written_by_tarfile_in_stream_mode_are_read_from_a_pipe(tmp_path):
    path = tmp_path / "00000.tar"
    with open(path, "wb") as out, tarfile.open(fileobj=out, mode="w|") as archive:
        for index in range(50):
            for ext, data in (("jpg", H.jpeg(index)), ("txt", f"caption {index}".encode())):
                info = tarfile.TarInfo(f"{index:05d}.{ext}")
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
    with _pipe(path) as stream:
        samples = list(tar_samples(stream, WANTED, LIMIT))
    assert [s.key for s in samples] == [f"{i:05d}" for i in range(50)]
    assert all(s.fields["jpg"] == H.jpeg(i) and s.problem is None for i, s in enumerate(samples))
