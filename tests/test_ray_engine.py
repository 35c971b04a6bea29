"""The Ray Data engine on a local Ray started by the tests, where it is Ray's own: a worker killed mid-shard (Ray
restarts it, no row lost or doubled), a batch that kills every actor (the run ends after its retries), a driver
killed mid-run (the rerun skips finished shards), unreadable shards between readable ones, every actor call held to
the batch size, a model the actors cannot load, Ray Data's block settings, and the read, score and collect stages.
That Ray writes the rows, errors and records the local engine writes is ``tests/test_executors_agree.py``'s.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pyarrow.parquet as pq
import pytest
from PIL import Image

ray = pytest.importorskip("ray")

from capeval.corpus import ray_engine  # noqa: E402
from capeval.corpus.run import score_corpus  # noqa: E402
from capeval.corpus.shard_outputs import input_record  # noqa: E402
from capeval.corpus.shards import Shard  # noqa: E402
from capeval.shapes import shapes_clip_path  # noqa: E402
from capeval_dev.testing.shapes_shards import write_shapes_shards  # noqa: E402

pytestmark = pytest.mark.slow
MODEL = str(shapes_clip_path())
METRICS = ["clipscore", "refclipscore"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("ray")
    write_shapes_shards(root / "in", shards=4, rows_per_shard=6, damaged=True)
    local = score_corpus(
        root / "in", root / "local", METRICS, model=MODEL, batch_size=4, save_embeddings=True
    )
    return root, local


def _table(folder):
    parts = [pq.read_table(f).to_pandas() for f in sorted((folder / "scores").glob("*.parquet"))]
    return {
        name: part
        for name, part in zip(
            sorted(p.stem for p in (folder / "scores").glob("*.parquet")), parts, strict=True
        )
    }


def _assert_equal_to_local(root, out):
    local, remote = _table(root / "local"), _table(out)
    assert sorted(local) == sorted(remote)
    for name in local:
        a, b = local[name], remote[name]
        assert list(a.key) == list(b.key) and list(a["index"]) == list(b["index"])
        assert list(a.error.fillna("")) == list(b.error.fillna(""))
        for column in ("clipscore", "refclipscore", "clip_s"):
            np.testing.assert_allclose(b[column], a[column], atol=1e-5, equal_nan=True)
        if "image_embedding" in b:
            for column in ("image_embedding", "text_embedding"):
                # Error rows have none (null) on both; the others are float16 of the same float32 vectors: at
                # most one float16 step (2**-11 near 0.1) apart.
                assert [v is None for v in b[column]] == [v is None for v in a[column]]
                held = [i for i, v in enumerate(a[column]) if v is not None]
                np.testing.assert_allclose(np.stack(b[column][held]), np.stack(a[column][held]), atol=1e-3)


def _run_on_ray(folder, out, metrics, batch_size, actor_class, num_workers=1, embeddings=False):
    """``run_on_ray`` on the shards of ``folder`` with ``actor_class`` shipped to the workers by value."""
    from ray import cloudpickle  # Ray's own copy pickles the actor class

    from capeval.corpus.row_scoring import RowScorer
    from capeval.corpus.shards import list_shards

    shards = list_shards(folder)
    driver_scorer = RowScorer(metrics, {"model": MODEL})
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        return ray_engine.run_on_ray(
            shards, out, metrics, {"model": MODEL, "device": None, "dtype": "float32"},
            records={s.name: input_record(s) for s in shards}, columns={},
            batch_size=batch_size, embeddings=embeddings, score_columns=driver_scorer.columns(),
            image_size=driver_scorer.image_size, num_workers=num_workers, actor_class=actor_class,
        )  # fmt: skip
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def test_a_missing_model_or_caption_column_fails_a_ray_run_before_any_work(tmp_path):
    write_shapes_shards(tmp_path / "in", shards=2, rows_per_shard=3)
    with pytest.raises((OSError, ValueError), match="no-such-model"):
        score_corpus(
            tmp_path / "in",
            tmp_path / "out2",
            ["clipscore"],
            model=str(tmp_path / "no-such-model"),
            executor="ray",
        )
    assert not (tmp_path / "out2" / "scores").exists()
    write_shapes_shards(tmp_path / "pq", shards=1, rows_per_shard=2, kind="parquet")
    with pytest.raises(
        ValueError, match=r"has no caption column 'alt'; its columns: \['key', 'jpg', 'caption'"
    ):
        score_corpus(tmp_path / "pq", tmp_path / "out3", ["clipscore"], model=MODEL, executor="ray",
                     caption_column="alt")  # fmt: skip
    assert not (tmp_path / "out3").exists()


def test_a_model_the_actors_cannot_load_fails_the_run_at_once(local_ray, corpus, tmp_path):
    root, _ = corpus
    # The driver checks the model on its CPU; every actor is then asked for a GPU that does not exist.
    with pytest.raises(RuntimeError, match=r"a Ray actor could not load the models .*cuda:99"):
        score_corpus(
            root / "in", tmp_path / "out", ["clipscore"], model=MODEL, executor="ray", device="cuda:99"
        )
    assert not list((tmp_path / "out" / "scores").glob("*.parquet"))


class AlwaysDies:
    """An actor whose every call kills its worker, counting its deaths in the file ``deaths`` names: an input that
    takes down whatever worker scores it. It loads no model, so each restart costs a worker's start only."""

    deaths = ""  # set by the test; the class travels to the workers by value, attributes included

    def __init__(self, metrics, options, embeddings, raw_cosine=True):
        pass

    def __call__(self, batch):
        with open(self.deaths, "a") as f:
            f.write("died\n")
        os._exit(1)


def _timeout(signum, frame):
    raise TimeoutError("the run kept retrying a batch that kills every actor")


def test_a_batch_that_kills_every_actor_ends_the_run_after_its_retries(local_ray, tmp_path):
    write_shapes_shards(tmp_path / "in", shards=1, rows_per_shard=3)  # one batch: 3 rows and the end marker
    AlwaysDies.deaths = str(tmp_path / "deaths")
    previous = signal.signal(signal.SIGALRM, _timeout)
    signal.alarm(240)  # Ray Data's default (retry without end) would hang here
    try:
        with pytest.raises(ray.exceptions.RayError):
            _run_on_ray(tmp_path / "in", tmp_path / "out", ["clipscore"], 4, AlwaysDies)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    # The first call and BATCH_RETRIES resubmissions, each to a restarted actor, then Ray's error
    assert (tmp_path / "deaths").read_text().split() == ["died"] * (1 + ray_engine.BATCH_RETRIES)
    assert not (tmp_path / "out" / "scores" / "00000.parquet").exists()


DRIVER = """
import sys
from capeval.corpus.run import score_corpus
score_corpus(sys.argv[1], sys.argv[2], ["clipscore", "refclipscore"], model=sys.argv[3], batch_size=4,
             executor="ray", num_workers=1, ray={"address": sys.argv[4]})
"""


def test_a_driver_killed_mid_run_loses_only_shards_in_flight(local_ray, corpus, tmp_path):
    root, _ = corpus
    out = tmp_path / "out"
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent(DRIVER))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    # A driver of its own (a user's command on a cluster): killed, its job's actors and tasks go with it.
    address = local_ray.get_runtime_context().gcs_address
    driver = subprocess.Popen([sys.executable, str(script), str(root / "in"), str(out), MODEL, address], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.time() + 180
    while time.time() < deadline and not list((out / "scores").glob("*.parquet")):
        time.sleep(0.05)
    driver.kill()
    driver.wait()
    first = {p.name: p.stat().st_mtime_ns for p in (out / "scores").glob("*.parquet")}
    assert 1 <= len(first) <= 4
    score_corpus(root / "in", out, METRICS, model=MODEL, batch_size=4, executor="ray", num_workers=1,
                 ray={"address": address})  # fmt: skip
    after = {p.name: p.stat().st_mtime_ns for p in (out / "scores").glob("*.parquet")}
    assert {n: after[n] for n in first} == first  # finished shards were skipped, not rewritten
    assert not list((out / "scores").glob(".*.tmp"))
    _assert_equal_to_local(root, out)
    keys = [k for t in _table(out).values() for k in t.key]
    assert len(keys) == len(set(keys)) == 24


def test_text_columns_travel_as_variable_width_strings_keeping_none_and_nuls():
    # A fixed-width numpy string column pads every row to the longest (64 rows x a 60 KB caption = 15 MB as
    # UTF-32) and drops trailing NULs; an object column holds each string as it is.
    column = ray_engine._text(["x" * 60_000] + ["a cat\x00\x00"] * 62 + [None])
    assert column.dtype == object and column.nbytes == 64 * column.itemsize
    assert column[1] == "a cat\x00\x00" and column[-1] is None
    assert ray_engine._received(np.array([np.nan, "a"], dtype=object)) == [None, "a"]


def test_actor_pool_takes_one_gpu_per_actor_when_the_cluster_has_gpus():
    options = {"model": "m", "device": "cuda:3"}
    pool = ray_engine._actor_pool(2, options)
    assert (pool.size, pool.gpus, pool.cpus) == (2, 1.0, 1.0)
    assert pool.options == {"model": "m", "device": "cuda"}  # each actor sees its own GPU as cuda:0
    assert options["device"] == "cuda:3"  # the caller's options are not changed
    assert ray_engine._actor_pool(4, options, gpus=2.0).size == 2
    assert ray_engine._actor_pool(4, options, size=1, cpus=3.0) == ray_engine._ActorPool(
        1, 1.0, 3.0, {"model": "m", "device": "cuda"}
    )


def test_actor_pool_leaves_cpus_to_the_reads_without_gpus_or_when_the_cpu_is_asked_for():
    for gpus, options in ((0, {"device": None}), (2, {"device": "cpu"})):
        pool = ray_engine._actor_pool(gpus, options)
        assert (pool.size, pool.gpus, pool.cpus) == (1, 0.0, ray_engine.CPU_ACTOR_CPUS)
        assert pool.options == options
    assert ray_engine._actor_pool(0, {}, size=3).size == 3


def test_ray_data_runs_with_blocks_of_a_batch_and_a_bounded_run_ahead_then_the_callers_settings_back():
    import ray

    context = ray.data.DataContext.get_current()
    before = (context.target_max_block_size, context.enable_progress_bars, context.execution_options)
    block = ray_engine.batch_bytes(64, 224)  # 64 prepared 224 px pictures: 9.2 MiB
    assert block == 64 * 224 * 224 * 3
    with ray_engine._data_context(ray, block, actors=2):
        assert context.target_max_block_size == block + block // 4
        assert context.enable_progress_bars is False
        limit = context.execution_options.resource_limits.object_store_memory
        assert limit == ray_engine.BLOCKS_IN_FLIGHT * (block + block // 4) * 2
    with ray_engine._data_context(ray, 1000, actors=1):  # tiny batches: Ray Data's floors
        assert context.target_max_block_size == ray_engine.MIN_BLOCK_BYTES
        assert context.execution_options.resource_limits.object_store_memory == ray_engine.MIN_IN_FLIGHT_BYTES
    assert (context.target_max_block_size, context.enable_progress_bars, context.execution_options) == before


def test_load_failure_keeps_the_last_line_of_rays_traceback_with_the_metrics_model_and_device():
    err = RuntimeError("Traceback (most recent call last):\n  File x\nOSError: no model at /m\n\n")
    failure = ray_engine._load_failure(err, ["clipscore"], "/m", "cuda")
    assert str(failure) == (
        "a Ray actor could not load the models of ['clipscore'] (model='/m', device='cuda'): OSError: no model "
        "at /m; the run stopped (shards already written are kept)"
    )


def test_read_stage_prepares_every_row_of_a_shard_then_its_end_marker_and_one_failure_marker_for_an_unreadable_one(
    local_ray, tmp_path
):
    from capeval.corpus.shards import list_shards

    write_shapes_shards(tmp_path / "in", shards=1, rows_per_shard=3)
    (tmp_path / "in" / "00001.tar").write_bytes(b"not a tar" * 100)
    reads = {"columns": {}, "batch_size": 2, "image_size": 32, "max_image_pixels": Image.MAX_IMAGE_PIXELS}
    rows = ray_engine._read_stage(local_ray, list_shards(tmp_path / "in"), reads).take_all()
    good = [r for r in rows if r["shard"] == "00000" and r["index"] >= 0]
    assert sorted(r["index"] for r in good) == [0, 1, 2] and {r["shard_rows"] for r in good} == {-1}
    assert all(r["pixels"].shape == (32, 32, 3) and r["failure"] is None for r in good)
    [end] = [r for r in rows if r["shard"] == "00000" and r["index"] < 0]
    assert end["shard_rows"] == 3 and end["failure"] is None and end["late_errors"] == "{}"
    [bad] = [r for r in rows if r["shard"] == "00001"]
    assert bad["index"] == -1 and bad["shard_rows"] == -1 and "00001" in bad["failure"]


def test_read_stage_sends_a_tars_repeated_key_with_the_end_marker(local_ray, tmp_path):
    import hostile_shards as H

    from capeval.corpus.shards import list_shards

    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "00000.tar").write_bytes(
        H.tar_of(*H.sample("a", seed=1), *H.sample("b", seed=2), *H.sample("a", seed=3))
    )
    reads = {"columns": {}, "batch_size": 2, "image_size": 32, "max_image_pixels": Image.MAX_IMAGE_PIXELS}
    rows = ray_engine._read_stage(local_ray, list_shards(tmp_path / "in"), reads).take_all()
    assert sorted(r["index"] for r in rows) == [-1, 0, 1, 2]
    assert all(r["error"] is None for r in rows)  # read one by one, no row knows yet
    [end] = [r for r in rows if r["index"] < 0]
    late = json.loads(end["late_errors"])
    assert sorted(late) == ["0", "2"] and late["0"].startswith(
        "key a names 2 samples of this shard (rows [0, 2]"
    )


class EchoActor:
    """Stamps each row with what the actor was built with."""

    def __init__(self, metrics, options, embeddings):
        self.tag = f"{','.join(metrics)}@{options['device']}:{embeddings}"

    def __call__(self, batch):
        return {"x": batch["x"], "tag": np.array([self.tag] * len(batch["x"]), dtype=object)}


def test_score_stage_builds_its_actors_with_the_pools_options(local_ray):
    from ray import cloudpickle  # Ray's own copy pickles the actor class

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # ship EchoActor to the workers by value
    try:
        ds = local_ray.data.from_items([{"x": 1}, {"x": 2}, {"x": 3}])
        pool = ray_engine._ActorPool(size=1, gpus=0.0, cpus=0.5, options={"model": "m", "device": "cpu"})
        constructor = {"metrics": ["clipscore", "refclipscore"], "embeddings": True}
        rows = ray_engine._score_stage(local_ray, ds, EchoActor, constructor, pool, batch_size=2).take_all()
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    assert sorted(r["x"] for r in rows) == [1, 2, 3]
    assert {r["tag"] for r in rows} == {"clipscore,refclipscore@cpu:True"}


def test_score_stage_with_gpu_actors_is_accepted_by_ray(local_ray):
    # Ray Data refuses map_batches with GPUs and no batch size; building the plan needs no GPU.
    ds = local_ray.data.from_items([{"x": 1}])
    pool = ray_engine._ActorPool(size=1, gpus=1.0, cpus=1.0, options={"model": "m", "device": "cuda"})
    constructor = {"metrics": ["clipscore"], "embeddings": False}
    assert ray_engine._score_stage(local_ray, ds, EchoActor, constructor, pool, batch_size=8) is not None


class DiesOnceAndRecordsBatchSizes(ray_engine.ScoreActor):
    """Kills its worker process on its second batch, once (the file ``marker`` names says whether it already did);
    appends the ``(shard, index)`` of every row of each batch it scores, one line a batch, to the file ``log``
    names."""

    calls = 0
    log = marker = ""  # set by the test; the class travels to the workers by value, attributes included

    def __call__(self, batch):
        self.calls += 1
        if self.calls == 2 and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os._exit(1)
        rows = [[str(s), int(i)] for s, i in zip(batch["shard"], batch["index"], strict=True)]
        with open(self.log, "a") as f:
            f.write(json.dumps(rows) + "\n")
        return super().__call__(batch)


@pytest.fixture(scope="module")
def faulty_run(tmp_path_factory, local_ray):
    """Four shards of 20 rows (``write_shapes_shards(damaged=True)``: a corrupt JPEG, an empty caption, a member cut
    short), the first not a tar and the third empty, scored locally and on Ray in batches of 3 by
    ``DiesOnceAndRecordsBatchSizes`` (which kills its worker once, mid-shard): ``(folder, {shard: why} of Ray,
    the batches the actors scored as lists of ``(shard, index)``, whether the actor died)``. The read tasks' batches of 3 come back from Ray
    joined into blocks of a shard or more, which the actors' calls cut again."""
    root = tmp_path_factory.mktemp("faulty")
    write_shapes_shards(root / "in", shards=4, rows_per_shard=20, damaged=True)
    (root / "in" / "00000.tar").write_bytes(b"not a tar" * 100)
    (root / "in" / "00002.tar").write_bytes(b"")
    score_corpus(root / "in", root / "local", METRICS, model=MODEL, batch_size=3, save_embeddings=True)
    DiesOnceAndRecordsBatchSizes.log = str(root / "batches.log")
    DiesOnceAndRecordsBatchSizes.marker = str(root / "died")
    failed = _run_on_ray(root / "in", root / "ray", METRICS, 3, DiesOnceAndRecordsBatchSizes, embeddings=True)
    batches = [
        [tuple(row) for row in json.loads(line)] for line in (root / "batches.log").read_text().splitlines()
    ]
    return root, failed, batches, (root / "died").exists()


def test_a_worker_killed_mid_shard_is_restarted_and_no_row_is_lost_or_doubled(faulty_run):
    root, failed, _, died = faulty_run
    assert died
    _assert_equal_to_local(root, root / "ray")
    keys = [k for t in _table(root / "ray").values() for k in t.key]
    assert len(keys) == len(set(keys)) == 40


def test_every_actor_call_holds_at_most_batch_size_rows(faulty_run):
    _, _, batches, _ = faulty_run
    assert max(len(batch) for batch in batches) <= 3
    # Every row, the end marker of each readable shard and the failure marker of each unreadable one went through
    # an actor call (a batch whose reply the killed worker never sent is scored again, so some may come twice).
    rows = {(f"{s:05d}", i) for s in (1, 3) for i in range(20)} | {(f"{s:05d}", -1) for s in range(4)}
    assert {row for batch in batches for row in batch} == rows


def test_unreadable_shards_between_readable_ones_are_reported_and_the_rest_scored(faulty_run):
    root, failed, _, _ = faulty_run
    assert sorted(failed) == ["00000", "00002"]
    assert "00000" in failed["00000"] and "00002" in failed["00002"]
    assert sorted(_table(root / "ray")) == ["00001", "00003"]


def _prepared_batch(folder, image_size, failure_at):
    """The read stage's batches of the two shards in ``folder`` (two rows of the first, all of the second and its
    end marker) with an unreadable shard's failure marker as part ``failure_at``, joined as Ray may hand them to one
    actor call."""
    from capeval.corpus.reader import read_shard
    from capeval.corpus.row_scoring import prepare_rows
    from capeval.corpus.shards import list_shards

    good = [read_shard(s) for s in list_shards(folder)]
    parts = [
        ray_engine._to_ray(prepare_rows(good[0][:2], image_size)),
        ray_engine._to_ray(prepare_rows(good[1], image_size)),
        ray_engine._marker("00001", image_size, rows=3, late_errors={}),
    ]
    failure = ray_engine._marker("00009", image_size, failure="shard 00009 is not a readable tar file")
    parts.insert(failure_at, failure)
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}, good[0][:2] + good[1]


@pytest.mark.parametrize(
    ("failure_at", "shards"),
    [(0, ["00009", "00000", "00000", "00001", "00001", "00001", "00001"]),
     (1, ["00000", "00000", "00009", "00001", "00001", "00001", "00001"])],
)  # fmt: skip
def test_an_actor_scores_the_real_rows_of_a_batch_and_passes_the_markers_through_in_place(
    tmp_path, failure_at, shards
):
    from capeval.corpus.row_scoring import RowScorer, prepare_rows

    write_shapes_shards(tmp_path / "in", shards=2, rows_per_shard=3, damaged=True)
    actor = ray_engine.ScoreActor(METRICS, {"model": MODEL}, embeddings=True)
    batch, rows = _prepared_batch(tmp_path / "in", actor.scorer.image_size, failure_at)
    out = actor(batch)
    assert {len(v) for v in out.values()} == {7}
    assert list(out["shard"]) == shards
    at, end = shards.index("00009"), len(shards) - 1
    assert out["index"][at] == out["index"][end] == -1
    assert out["shard_rows"][at] == -1 and out["shard_rows"][end] == 3 and out["late_errors"][end] == "{}"
    assert out["key"][at] is None and out["caption"][at] is None
    assert out["error"][at] == out["failure"][at] == "shard 00009 is not a readable tar file"
    assert [f is None for f in out["failure"]] == [s != "00009" for s in shards]
    for marker in (at, end):
        assert all(np.isnan(out[c][marker]) for c in actor.scorer.columns())
        assert not out["image_embedding"][marker].any() and not out["text_embedding"][marker].any()
    # The real rows score as they do in a batch of their own (shard 1's second row is a damaged JPEG).
    scorer = RowScorer(METRICS, {"model": MODEL}, embeddings=True)
    alone = scorer.score(prepare_rows(rows, scorer.image_size))
    real = [i for i, s in enumerate(shards) if s != "00009"][:-1]
    assert list(out["key"][real]) == alone["key"] and list(out["error"][real]) == alone["error"]
    assert list(out["index"][real]) == list(alone["index"]) == [0, 1, 0, 1, 2]
    assert list(out["shard_rows"][real]) == [-1] * 5
    for column in (*scorer.columns(), "image_embedding", "text_embedding"):
        np.testing.assert_allclose(out[column][real], alone[column], atol=1e-6, equal_nan=True)
    assert alone["error"][3].startswith("image of 000010001 cannot be read")


class _Blocks:
    """What ``_collect`` reads from a Ray dataset: its output blocks, in order."""

    def __init__(self, blocks):
        self.blocks = blocks

    def iter_batches(self, batch_size, batch_format):
        return iter(self.blocks)


def _scored_block(rows):
    """An output block of the score stage: ``(shard, index)`` is a scored row, ``(shard, -1, why)`` a shard's
    failure marker, ``(shard, "end", count, late_errors)`` its end marker."""
    parsed = []
    for shard, index, *rest in rows:
        if index == "end":
            parsed.append((shard, -1, None, rest[0], json.dumps(rest[1])))
        else:
            parsed.append((shard, index, rest[0] if rest else None, -1, None))
    rows = parsed
    return {
        "key": np.array([None if i < 0 else f"{s}-{i}" for s, i, *_ in rows], dtype=object),
        "shard": np.array([s for s, *_ in rows], dtype=object),
        "index": np.array([i for _, i, *_ in rows], dtype=np.int64),
        "caption": np.array([None if i < 0 else "a caption" for _, i, *_ in rows], dtype=object),
        "clipscore": np.array([np.nan if i < 0 else 0.25 + i for _, i, *_ in rows]),
        "error": np.array([f for _, _, f, _, _ in rows], dtype=object),
        "shard_rows": np.array([n for *_, n, _ in rows], dtype=np.int64),
        "failure": np.array([f for _, _, f, _, _ in rows], dtype=object),
        "late_errors": np.array([late for *_, late in rows], dtype=object),
    }


def _listed(names: str) -> tuple[dict[str, Shard], dict[str, dict]]:
    """Row-source shards as listed, by name, and their input records: what ``_collect`` checks before writing."""
    shards = {n: Shard(None, n, "jsonl", identity={"path": n}) for n in names}
    return shards, {n: shard.identity for n, shard in shards.items()}


def test_collect_sorts_blocks_of_several_shards_and_markers_out_by_shard(tmp_path):
    blocks = _Blocks([
        _scored_block([("a", 0), ("a", 1), ("b", -1, "b is unreadable"), ("c", 1), ("c", "end", 2, {})]),
        _scored_block([("a", 1), ("c", 0), ("a", 2), ("a", "end", 3, {})]),  # a's row 1 again: a retry
    ])  # fmt: skip
    failed = ray_engine._collect(blocks, tmp_path, ["clipscore"], False, *_listed("abc"))
    assert failed == {"b": "b is unreadable"}
    written = _table(tmp_path)
    assert sorted(written) == ["a", "c"]
    assert list(written["a"]["index"]) == [0, 1, 2] and list(written["a"].key) == ["a-0", "a-1", "a-2"]
    assert list(written["c"]["index"]) == [0, 1] and list(written["c"].clipscore) == [0.25, 1.25]
    assert set(written["a"].shard) == {"a"} and written["a"].error.isna().all()


def test_collect_writes_a_shard_whose_rows_arrive_after_its_end_marker_with_its_late_errors(tmp_path):
    late = {"0": "key k names 2 samples of this shard (rows [0, 2])", "2": "key k names 2 samples ..."}
    blocks = _Blocks([_scored_block([("a", "end", 3, late), ("a", 1)]), _scored_block([("a", 2), ("a", 0)])])
    failed = ray_engine._collect(blocks, tmp_path, ["clipscore"], False, *_listed("a"))
    assert failed == {}
    table = _table(tmp_path)["a"]
    assert list(table["index"]) == [0, 1, 2]
    assert [e if isinstance(e, str) else None for e in table.error] == [late["0"], None, late["2"]]
    assert table.clipscore.isna().tolist() == [True, False, True]  # a late error's row has no score


def test_collect_drops_every_row_of_a_shard_that_failed_part_way(tmp_path):
    blocks = _Blocks([
        _scored_block([("a", 0), ("a", 1), ("b", 0)]),
        _scored_block([("a", -1, "shard a cannot be read: connection reset"), ("a", 2), ("b", "end", 1, {})]),
    ])  # fmt: skip
    failed = ray_engine._collect(blocks, tmp_path, ["clipscore"], False, *_listed("ab"))
    assert failed == {"a": "shard a cannot be read: connection reset"}
    assert sorted(_table(tmp_path)) == ["b"]


def test_collect_refuses_a_shard_rewritten_while_it_was_read_and_writes_none_of_its_rows(tmp_path):
    from capeval.corpus.shards import list_shards

    write_shapes_shards(tmp_path / "in", shards=1, rows_per_shard=3)
    write_shapes_shards(tmp_path / "other", shards=1, rows_per_shard=4, seed=5)
    [shard] = list_shards(tmp_path / "in")
    records = {shard.name: input_record(shard)}  # taken before the read
    # A download finishing over the shard while it was read: its rows may mix two versions.
    shutil.copy(tmp_path / "other" / "00000.tar", tmp_path / "in" / "00000.tar")
    blocks = _Blocks([_scored_block([("00000", 0), ("00000", 1), ("00000", 2), ("00000", "end", 3, {})])])
    failed = ray_engine._collect(blocks, tmp_path / "out", ["clipscore"], False, {shard.name: shard}, records)
    why = failed["00000"]
    assert (
        why.startswith(f"shard {tmp_path / 'in' / '00000.tar'} changed while it was read (")
        and "content" in why
    )
    assert not (tmp_path / "out" / "scores" / "00000.parquet").exists()


def test_collect_refuses_a_shard_whose_rows_did_not_all_arrive(tmp_path):
    blocks = _Blocks([_scored_block([("a", 0), ("b", 0), ("a", 2), ("a", "end", 3, {}), ("b", "end", 1, {}),
                                     ("c", 0)])])  # fmt: skip
    with pytest.raises(
        RuntimeError, match=r"incomplete shards \(rows missing: \{'a': 1, 'c': 'end not received'\}\)"
    ):
        ray_engine._collect(blocks, tmp_path, ["clipscore"], False, *_listed("abc"))
    assert sorted(_table(tmp_path)) == ["b"]
