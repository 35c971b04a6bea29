"""A shard read as it streams (``capeval.corpus.reader.stream_shard``): a tar one sample at a time, a Parquet file
one row group at a time, a row source one record at a time, so memory does not grow with the shard; what is known
only at a shard's end (a tar key naming two samples) comes as late errors, which ``read_shard`` applies."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from capeval.corpus.reader import open_corpus, read_shard, rows_or_why, stream_shard
from capeval.corpus.shards import ShardReadError, list_shards
from tests import hostile_shards as H

MEMBER_BYTES = 64 * 1024


# Run in a fresh process: tracemalloc counts the allocations of every thread, and this process's other threads
# (Ray's, servers' left by other tests) would be counted with the reading's, more so on a loaded host.
_MEASURE = """
import json, pickle, sys, tracemalloc
from capeval.corpus.reader import stream_shard
shard = pickle.loads(sys.stdin.buffer.read())
for _ in stream_shard(shard).rows:  # once untraced: what reading imports on first use is not the shard's memory
    pass
count = 0
tracemalloc.start()
for _ in stream_shard(shard).rows:
    count += 1
print(json.dumps([count, tracemalloc.get_traced_memory()[1]]))
"""


def _peak_while_reading(shard) -> tuple[int, int]:
    """(rows read, peak bytes Python allocated while reading them one by one, each dropped once read)."""
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE], input=pickle.dumps(shard), capture_output=True, timeout=300
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    count, peak = json.loads(done.stdout.decode().splitlines()[-1])
    return count, peak


def _big_tar(path, samples: int) -> None:
    members = []
    for i in range(samples):
        members += [
            H.member(f"{i:05d}.jpg", os.urandom(MEMBER_BYTES)),
            H.member(f"{i:05d}.txt", b"a red circle"),
        ]
    path.write_bytes(H.tar_of(*members))


# --- memory held: one sample, one row group ---------------------------------------------------------------------


def test_a_tar_is_read_one_sample_at_a_time(tmp_path):
    _big_tar(tmp_path / "00000.tar", 600)  # 38 MiB of pictures
    rows, peak = _peak_while_reading(list_shards(tmp_path / "00000.tar")[0])
    assert rows == 600
    # A sample's members, and the 1 MiB read at the end to check for data behind the tar's end.
    assert peak < 2 * 1024**2, f"{peak:,} bytes held while reading {600 * MEMBER_BYTES:,}"


def test_a_parquet_file_is_read_one_row_group_at_a_time(tmp_path):
    images = [os.urandom(MEMBER_BYTES) for _ in range(600)]
    table = pa.table(
        {"key": [f"{i:05d}" for i in range(600)], "jpg": images, "caption": ["a red circle"] * 600}
    )
    pq.write_table(table, tmp_path / "00000.parquet", row_group_size=50)  # 12 row groups of 3.2 MiB
    rows, peak = _peak_while_reading(list_shards(tmp_path / "00000.parquet")[0])
    assert rows == 600
    # One row group's cells as Python values (3.2 MiB), and the buffer Arrow read them from, which a busy host may
    # free late; the previous row group's values are let go before the next is read.
    assert peak < 8 * 1024**2, f"{peak:,} bytes held while reading {600 * MEMBER_BYTES:,}"


def test_a_jsonl_shard_is_made_one_record_at_a_time(tmp_path):
    lines = [json.dumps({"id": f"r{i}", "image": "x.jpg", "caption": "c" * 2000}) for i in range(3000)]
    (tmp_path / "rows.jsonl").write_text("\n".join(lines) + "\n")
    (shard,) = open_corpus(tmp_path / "rows.jsonl", chunk_size=3000).shards
    rows, peak = _peak_while_reading(shard)
    assert rows == 3000
    # A line at a time: neither the shard's 6 MiB of lines nor its rows as Python objects are held.
    assert peak < 1024**2, f"{peak:,} bytes"


# --- what is known only at the end -------------------------------------------------------------------------------


def test_a_repeated_tar_key_comes_as_late_errors_once_the_shard_is_read(tmp_path):
    path = tmp_path / "00000.tar"
    path.write_bytes(H.tar_of(*H.sample("a", seed=1), *H.sample("b", seed=2), *H.sample("a", seed=3)))
    shard = list_shards(path)[0]
    stream = stream_shard(shard)
    streamed = []
    for row in stream.rows:
        assert stream.late_errors == {}  # nothing is known of a later sample before it is read
        streamed.append(row)
    assert [r.error for r in streamed] == [None, None, None]
    assert sorted(stream.late_errors) == [0, 2]
    assert stream.late_errors[0].startswith(
        "key a names 2 samples of this shard (rows [0, 2]; members a.jpg, a.txt)"
    )
    assert [r.error for r in read_shard(shard)] == [stream.late_errors[0], None, stream.late_errors[2]]


def test_a_problem_of_the_tar_itself_keeps_its_place_before_the_repeated_key(tmp_path):
    # Sample a's second .txt member is the tar's problem; the key's repetition does not replace it.
    path = tmp_path / "00000.tar"
    parts = [*H.sample("a", seed=1), H.member("a.txt", b"again"), *H.sample("b"), *H.sample("a", seed=3)]
    path.write_bytes(H.tar_of(*parts))
    rows = read_shard(list_shards(path)[0])
    assert rows[0].error == "sample a has 2 members for its field .txt (a.txt, a.txt)"
    assert rows[2].error.startswith("key a names 2 samples of this shard (rows [0, 2]")


# --- failures: at the start, or part-way -------------------------------------------------------------------------


def test_a_shard_that_cannot_be_opened_or_holds_nothing_is_a_reason_not_rows(tmp_path):
    (tmp_path / "00000.tar").write_bytes(b"not a tar" * 100)
    (tmp_path / "00001.tar").write_bytes(b"\0" * 1024)
    bad, empty = list_shards(tmp_path)
    assert (
        rows_or_why(bad, {})[0] is None and "00000.tar is not a readable tar file" in rows_or_why(bad, {})[1]
    )
    assert rows_or_why(empty, {}) == (None, f"shard {empty.where} holds no sample")


def test_a_tar_refused_part_way_raises_after_its_first_rows(tmp_path):
    refused = H.extended_header(H.pax_record("path", b"1" * 200))
    (tmp_path / "00000.tar").write_bytes(H.tar_of(*H.sample("a"), *H.sample("b"), refused, *H.sample("c")))
    rows, why = rows_or_why(list_shards(tmp_path / "00000.tar")[0], {})
    assert why is None
    assert next(rows.rows).key == "a"  # only the first row was read to know the shard opens
    with pytest.raises(ShardReadError, match="00000.tar is not a readable tar file: extended header"):
        list(rows.rows)
