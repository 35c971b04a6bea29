"""Prepared batches of a shard's rows for the local engine: the same rows, in order, decoded here or by workers."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from capeval.corpus.reader import read_shard
from capeval.corpus.row_batches import MAX_CHUNK, DecodePool, default_decode_workers
from capeval.corpus.row_scoring import prepare_rows
from capeval.corpus.run import score_corpus
from capeval.corpus.shards import list_shards
from capeval.testing.shapes import shapes_clip_path
from capeval.testing.shapes_shards import write_shapes_shards

MODEL = str(shapes_clip_path())


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    folder = tmp_path_factory.mktemp("shards")
    write_shapes_shards(folder, shards=2, rows_per_shard=40, damaged=True)
    return [r for s in list_shards(folder) for r in read_shard(s)]


def _batches(rows, batch_size, workers):
    with DecodePool(workers) as pool:
        return list(pool.batches(rows, 64, batch_size))


def _flat(batches):
    return {
        "key": [k for b in batches for k in b["key"]],
        "error": [e for b in batches for e in b["error"]],
        "caption": [c for b in batches for c in b["caption"]],
        "references": [r for b in batches for r in b["references"]],
        "index": np.concatenate([b["index"] for b in batches]),
        "pixels": np.concatenate([b["pixels"] for b in batches]),
    }


# --- the same rows whoever decodes them -------------------------------------------------------------


@pytest.mark.parametrize("batch_size", [7, 32, 100])
def test_workers_give_the_rows_prepare_rows_gives_in_this_process(rows, batch_size):
    expected = _flat([prepare_rows(rows[s : s + batch_size], 64) for s in range(0, len(rows), batch_size)])
    batches = _batches(rows, batch_size, workers=2)
    assert [len(b["key"]) for b in batches] == [
        min(batch_size, len(rows) - s) for s in range(0, len(rows), batch_size)
    ]
    got = _flat(batches)
    for field in ("key", "error", "caption", "references"):
        assert got[field] == expected[field], field
    np.testing.assert_array_equal(got["index"], expected["index"])
    np.testing.assert_array_equal(got["pixels"], expected["pixels"])
    assert got["pixels"].dtype == np.uint8 and isinstance(batches[0]["pixels"], np.ndarray)


def test_damaged_rows_come_back_as_error_rows_from_the_workers(rows):
    got = _flat(_batches(rows, 16, workers=2))
    errors = {k: e for k, e in zip(got["key"], got["error"], strict=True) if e is not None}
    assert set(errors) == {"000010001", "000010002", "000010039"}
    assert errors["000010001"].startswith("image of 000010001 cannot be read")
    assert not got["pixels"][got["key"].index("000010001")].any()


def test_one_pool_serves_shard_after_shard_with_the_same_processes(rows):
    first, second = rows[:40], rows[40:]
    with DecodePool(2) as pool:
        a = _flat(list(pool.batches(first, 64, 16)))
        workers = set(pool._pool._processes)
        b = _flat(list(pool.batches(second, 64, 16)))
        assert set(pool._pool._processes) == workers
    assert a["key"] + b["key"] == [r.key for r in rows]
    np.testing.assert_array_equal(
        np.concatenate([a["pixels"], b["pixels"]]), _flat([prepare_rows(rows, 64)])["pixels"]
    )


def test_without_workers_each_batch_is_prepared_here(rows):
    got = _flat(_batches(rows, 9, workers=0))
    assert got["key"] == [r.key for r in rows]


@pytest.mark.parametrize("workers", [0, 2])
def test_rows_are_taken_from_the_reader_only_a_bounded_window_ahead(rows, workers):
    taken = []

    def reader():
        for row in rows * 5:  # 400 rows, read as they are asked for
            taken.append(row.index)
            yield row

    with DecodePool(workers) as pool:
        batches = pool.batches(reader(), 64, 8)
        first = next(batches)
        ahead = len(taken)
        rest = list(batches)
    # When the first batch comes out, the reader has given the rows looked at to choose between workers and this
    # process (MAX_CHUNK + 1) and at most the decoding window (4 chunks of 4 rows for 2 workers and batches of 8),
    # never the whole shard; every row still comes out once.
    assert len(first["key"]) == 8 and ahead <= MAX_CHUNK + 1 + 4 * 4
    assert len(taken) == 400 and sum(len(b["key"]) for b in rest) == 392


# --- how many workers -----------------------------------------------------------------------------


def test_workers_decode_beside_a_gpu_and_not_on_the_cpu():
    assert default_decode_workers(torch.device("cpu")) == 0
    assert 1 <= default_decode_workers(torch.device("cuda")) <= 32


@pytest.mark.parametrize(
    "batch_size, workers, message", [(0, 2, "batch_size must be >= 1"), (8, -1, "workers must be >= 0")]
)
def test_bad_settings_are_refused_with_their_values(rows, batch_size, workers, message):
    with pytest.raises(ValueError, match=message):
        _batches(rows, batch_size, workers)


# --- the local engine ------------------------------------------------------------------------------


def test_the_local_engine_writes_the_same_scores_with_decoding_workers(tmp_path):
    write_shapes_shards(tmp_path / "in", shards=2, rows_per_shard=40, damaged=True)
    tables = {}
    for workers in (None, 2):
        out = tmp_path / f"out-{workers}"
        score_corpus(tmp_path / "in", out, ["clipscore"], model=MODEL, batch_size=16, num_workers=workers)
        tables[workers] = [pq.read_table(f).to_pylist() for f in sorted((out / "scores").glob("*.parquet"))]
    # The same rows, errors included; the model's torch threads give way to the workers (other thread counts
    # round matrix products differently): the scores are equal up to float rounding.
    scores = ("clipscore", "raw_cosine")

    def fields(t):
        return [[{k: v for k, v in r.items() if k not in scores} for r in shard] for shard in t]

    assert fields(tables[2]) == fields(tables[None])
    for column in scores:
        got = [[r[column] or 0.0 for r in shard] for shard in tables[2]]
        assert got == [pytest.approx([r[column] or 0.0 for r in shard], abs=1e-5) for shard in tables[None]]
    assert sum(len(t) for t in tables[2]) == 80
