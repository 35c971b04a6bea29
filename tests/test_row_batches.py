"""Shards read and prepared in batches for the local engine: the batches ``prepare_rows`` makes in this process, cut
from each shard's start, whoever reads them; a worker that dies has its shard read again, or failed by name."""

from __future__ import annotations

import os
import signal

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from capeval.corpus import row_batches
from capeval.corpus.reader import choose_columns, read_shard
from capeval.corpus.row_batches import (
    SLOTS_PER_WORKER,
    ShardBatch,
    ShardDone,
    default_decode_workers,
    read_batches,
)
from capeval.corpus.row_scoring import prepare_rows
from capeval.corpus.run import score_corpus
from capeval.corpus.shards import list_shards
from capeval.shapes import shapes_clip_path
from capeval_dev.testing.shapes_shards import write_shapes_shards

MODEL = str(shapes_clip_path())


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    folder = tmp_path_factory.mktemp("shards")
    write_shapes_shards(folder, shards=3, rows_per_shard=40, damaged=True)
    listed = list_shards(folder)
    return listed, choose_columns(listed, {})


def _read(shards, batch_size, workers):
    """Every batch and end, the batches' columns copied out (their memory is given back as they are read)."""
    listed, columns = shards
    out = []
    for item in read_batches(listed, columns, batch_size, 64, workers):
        if isinstance(item, ShardBatch):
            out.append(ShardBatch(item.position, item.number, {k: _copy(v) for k, v in item.rows.items()}))
            item.release()
        else:
            out.append(item)
    return out


def _copy(value):
    return value.copy() if isinstance(value, np.ndarray) else list(value)


def _expected(shards, batch_size):
    listed, columns = shards
    expected = {}
    for position, shard in enumerate(listed):
        rows = read_shard(shard, columns)
        cut = [rows[s : s + batch_size] for s in range(0, len(rows), batch_size)]
        expected[position] = [prepare_rows(batch, 64) for batch in cut]
    return expected


def _by_shard(items):
    batches, ends = {}, {}
    for item in items:
        if isinstance(item, ShardBatch):
            assert item.position not in ends, "a batch after its shard's end"
            batches.setdefault(item.position, {})[item.number] = item.rows
        else:
            ends[item.position] = item
    return batches, ends


# --- The batches of prepare_rows, whoever reads them ---


@pytest.mark.parametrize("workers", [0, 2, 7])
@pytest.mark.parametrize("batch_size", [7, 32, 100])
def test_every_reader_gives_the_batches_prepare_rows_gives_here(shards, batch_size, workers):
    batches, ends = _by_shard(_read(shards, batch_size, workers))
    expected = _expected(shards, batch_size)
    assert sorted(ends) == sorted(expected) == sorted(batches)
    for position, want in expected.items():
        assert ends[position].failure is None and ends[position].batches == len(want)
        assert ends[position].rows == sum(len(b["key"]) for b in want)
        assert sorted(batches[position]) == list(range(len(want)))
        for number, rows in enumerate(want):
            got = batches[position][number]
            for field in ("key", "error", "caption", "references", "origin", "image_file"):
                assert got[field] == rows[field], (position, number, field)
            np.testing.assert_array_equal(got["index"], rows["index"])
            np.testing.assert_array_equal(got["pixels"], rows["pixels"])


def test_damaged_rows_are_error_rows_with_no_pixels_from_the_workers(shards):
    batches, _ = _by_shard(_read(shards, 16, 2))
    rows = {
        k: (e, p)
        for b in batches[1].values()
        for k, e, p in zip(b["key"], b["error"], b["pixels"], strict=True)
    }
    errors = {k: e for k, (e, _) in rows.items() if e is not None}
    assert set(errors) == {"000010001", "000010002"}
    assert errors["000010001"].startswith("image of 000010001 cannot be read")
    assert not rows["000010001"][1].any()


def test_a_shard_that_cannot_be_read_ends_with_why_and_the_others_are_read(shards, tmp_path):
    listed, columns = shards
    (tmp_path / "00009.tar").write_bytes(b"not a tar" * 100)
    broken = list_shards(tmp_path / "00009.tar")
    for workers in (0, 2):
        _, ends = _by_shard(_read(([*listed, *broken], columns), 16, workers))
        assert "00009.tar is not a readable tar file" in ends[3].failure
        assert [ends[p].failure for p in range(3)] == [None, None, None]


def test_a_worker_holds_at_most_its_slots_of_prepared_batches(shards):
    listed, columns = shards
    batches = read_batches(listed[:1], columns, 4, 64, 1)
    held = [next(batches) for _ in range(SLOTS_PER_WORKER)]
    # Its slots are both lent out: it waits for one back before preparing another batch.
    assert all(isinstance(b, ShardBatch) for b in held)
    pixels = held[0].rows["pixels"].copy()
    held[0].release()
    following = next(batches)
    assert following.number == SLOTS_PER_WORKER
    np.testing.assert_array_equal(
        held[1].rows["pixels"], prepare_rows(read_shard(listed[0], columns)[4:8], 64)["pixels"]
    )
    assert pixels.shape == (4, 64, 64, 3)
    batches.close()


# --- A worker that dies ---


def _dying(monkeypatch, flag_dir, key: str, times: int):
    """Workers (forked after this) kill themselves with SIGKILL, as the OOM killer does, when they prepare the row
    ``key``, the first ``times`` times (counted in files: each worker is a process of its own)."""
    real = row_batches.prepare_rows

    def prepare(rows, image_size, out=None):
        if any(r.key == key for r in rows):
            done = len(list(flag_dir.iterdir()))
            if done < times:
                (flag_dir / str(done)).touch()
                os.kill(os.getpid(), signal.SIGKILL)
        return real(rows, image_size, out=out)

    monkeypatch.setattr(row_batches, "prepare_rows", prepare)


def test_a_worker_killed_mid_shard_is_replaced_and_its_shard_read_again_whole(shards, tmp_path, monkeypatch):
    _dying(monkeypatch, tmp_path, "000010020", times=1)
    batches, ends = _by_shard(_read(shards, 8, 2))
    expected = _expected(shards, 8)
    assert all(ends[p].failure is None for p in range(3))
    assert [len(batches[p]) for p in range(3)] == [len(expected[p]) for p in range(3)]
    for number, rows in enumerate(expected[1]):
        assert batches[1][number]["key"] == rows["key"]
        np.testing.assert_array_equal(batches[1][number]["pixels"], rows["pixels"])


def test_a_shard_whose_worker_dies_twice_is_failed_by_name_and_the_run_goes_on(shards, tmp_path, monkeypatch):
    _dying(monkeypatch, tmp_path, "000010020", times=2)
    items = _read(shards, 8, 2)
    _, ends = _by_shard(items)
    assert (
        ends[1].failure.startswith("shard ")
        and "00001.tar could not be read: the worker process reading it" in ends[1].failure
    )
    assert (
        "died 2 times (killed by signal 9, as the out-of-memory killer kills; then killed by signal 9"
        in ends[1].failure
    )
    assert ends[0].failure is None and ends[2].failure is None


def test_a_run_whose_worker_dies_writes_the_uninterrupted_output(tmp_path, monkeypatch):
    write_shapes_shards(tmp_path / "in", shards=2, rows_per_shard=12)
    options = dict(model=MODEL, batch_size=4, progress=False)
    score_corpus(tmp_path / "in", tmp_path / "plain", num_workers=2, **options)
    (tmp_path / "flags").mkdir()
    _dying(monkeypatch, tmp_path / "flags", "000000005", times=1)
    result = score_corpus(tmp_path / "in", tmp_path / "killed", num_workers=2, **options)
    assert result.summary["failed_shards"] == {}
    for name in ("00000", "00001"):
        assert (
            pq.read_table(tmp_path / "killed" / "scores" / f"{name}.parquet").to_pylist()
            == pq.read_table(tmp_path / "plain" / "scores" / f"{name}.parquet").to_pylist()
        )


# --- How many workers ---


def test_workers_decode_beside_a_gpu_and_not_on_the_cpu():
    assert default_decode_workers(torch.device("cpu")) == 0
    assert 1 <= default_decode_workers(torch.device("cuda")) <= 32


@pytest.mark.parametrize(
    "batch_size, workers, message", [(0, 2, "batch_size must be >= 1"), (8, -1, "workers must be >= 0")]
)
def test_bad_settings_are_refused_with_their_values(shards, batch_size, workers, message):
    with pytest.raises(ValueError, match=message):
        _read(shards, batch_size, workers)


# --- The local engine ---


def test_the_local_engine_writes_the_same_rows_with_decoding_workers(tmp_path, pinned_threads):
    write_shapes_shards(tmp_path / "in", shards=3, rows_per_shard=40, damaged=True)
    tables = {}
    for workers in (None, 1, 2, 5):
        out = tmp_path / f"out-{workers}"
        score_corpus(tmp_path / "in", out, ["clipscore"], model=MODEL, batch_size=16, num_workers=workers)
        tables[workers] = [pq.read_table(f).to_pylist() for f in sorted((out / "scores").glob("*.parquet"))]
    # The batches are the same whoever reads them: on pinned threads, the same rows bit for bit.
    assert tables[1] == tables[None] and tables[2] == tables[None] and tables[5] == tables[None]


def test_shard_done_is_a_plain_record():
    assert ShardDone(3).failure is None and ShardDone(3).late_errors == {}
