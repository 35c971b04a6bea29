"""Parquet shards read from open files: an open file or an fsspec file gives what the path gives, limits included,
and a stream that cannot seek is refused by name."""

from __future__ import annotations

import subprocess

import fsspec
import pytest

from capeval.corpus.parquet_cells import CheckedParquet
from tests import hostile_shards as H

CAP = 4096


def _read(source):
    table = CheckedParquet(source, CAP)
    return {name: table.column(name).to_pylist() for name in table.column_names}, dict(table.problems)


@pytest.fixture
def shard(tmp_path):
    path = tmp_path / "00000.parquet"
    H.write_parquet(
        path,
        {
            "key": ["a", "big", "c", "d"],
            "jpg": [H.jpeg(1), bytes(CAP + 1), H.jpeg(2), H.jpeg(3)],
            "caption": ["one", "two", "three", "four"],
            "references": [["r"], ["s", "t"], [], None],
        },
        row_group_size=2,
    )
    return path


def test_an_open_file_and_an_fsspec_file_read_as_the_path_does(shard):
    by_path = _read(shard)
    assert by_path[1] == {1: f"its cell in column 'jpg' is {CAP + 1:,} bytes (limit {CAP:,})"}
    assert by_path[0]["jpg"][1] is None and by_path[0]["caption"] == ["one", "two", "three", "four"]
    with open(shard, "rb") as fh:
        assert _read(fh) == by_path
        assert not fh.closed  # its owner closes it
    fs = fsspec.filesystem("memory")
    fs.pipe_file("/parquet-files/00000.parquet", shard.read_bytes())
    with fs.open("/parquet-files/00000.parquet", "rb") as fh:
        assert _read(fh) == by_path


def test_a_row_group_over_the_cap_is_refused_from_its_footer_when_read_from_a_file_object(tmp_path):
    path = tmp_path / "00000.parquet"
    H.write_parquet(
        path, {"key": ["big", "ok"], "jpg": [bytes(10 * CAP), b"x"], "caption": ["x", "y"]}, row_group_size=1
    )
    with open(path, "rb") as fh:
        columns, problems = _read(fh)
    assert columns["jpg"] == [None, b"x"]
    assert problems[0].startswith("column 'jpg' of row group 0 (1 rows) holds ")
    assert problems[0].endswith(f"bytes uncompressed (limit {CAP:,}); it is not read")


def test_a_stream_that_cannot_seek_is_refused_naming_what_it_needs(shard):
    proc = subprocess.Popen(["cat", str(shard)], stdout=subprocess.PIPE)
    try:
        with pytest.raises(
            ValueError, match="a Parquet file is read where its footer says, so it needs a file that can seek"
        ):
            CheckedParquet(proc.stdout, CAP)
    finally:
        proc.stdout.close()
        proc.wait(timeout=10)


def test_a_file_object_holding_no_parquet_raises_pyarrows_error(tmp_path):
    path = tmp_path / "00000.parquet"
    path.write_bytes(b"not a parquet file at all")
    with open(path, "rb") as fh, pytest.raises(Exception, match="[Pp]arquet"):
        CheckedParquet(fh, CAP)
