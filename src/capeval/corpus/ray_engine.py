"""The Ray executor of ``score_corpus``: read tasks on CPUs, an actor pool holding the models.

The pipeline, streamed by Ray Data:

1. a dataset of the shards still to score (decided on the driver from the files already written);
2. read tasks (one shard each): ``reader.rows_or_why`` (the reader the local executor uses), the shard's rows
   streamed and prepared (``prepare_rows``: decode, CLIP's geometric preprocessing) ``batch_size`` at a time, then
   the shard's marker row (its row count and late errors, or why it could not be read). Blocks hold about one
   batch and the reads run a bounded number of blocks ahead (``_data_context``), so no process holds a shard;
3. ``map_batches`` over an actor pool (``ScoreActor``): each actor loads the metrics' models once (one GPU
   per actor when the cluster has GPUs, else a fraction of a CPU so the read tasks keep CPUs: an actor
   pool that takes every CPU starves the reads and hangs) and runs ``RowScorer.score`` on at most
   ``batch_size`` rows per call. Ray cuts the actors' batches across blocks: one batch may hold the end of one
   shard, markers, the start of another;
4. the driver collects the scored rows per shard (an output block may hold several) and writes a shard's file,
   atomically, as soon as its marker and all its rows have arrived. A killed driver loses only the shards in
   flight; a rerun skips the rest.

Worker loss is Ray's to cover, with limits set here rather than Ray Data's defaults (which retry forever):
a read task whose worker died is run again (``READ_TASK_RETRIES``); a dead actor is restarted
(``ACTOR_RESTARTS``) and its batches resubmitted (``BATCH_RETRIES``), so a lost node costs its batches, while
an input that kills every worker it meets ends the run with Ray's error instead of looping. An actor whose
constructor fails (the model cannot be loaded on that node) fails the run at once. The driver keeps each row
index of a shard once, so a batch delivered twice is not written twice. A shard that cannot be read, at its start
or part-way, comes back as a failure marker, none of its rows is written, and it is reported in the summary. The values are those of the local engine: the same
functions prepare and score every row.
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
import json
import pickle
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from capeval.corpus.reader import rows_or_why
from capeval.corpus.row_scoring import RowScorer, prepare_rows
from capeval.corpus.shard_outputs import changed_while_read, write_shard_output
from capeval.corpus.shards import Shard, ShardReadError
from capeval.diagnostics.extras import import_extra

MIN_BLOCK_BYTES = 1024 * 1024  # Ray Data's own floor for a block (DEFAULT_TARGET_MIN_BLOCK_SIZE)
BLOCKS_IN_FLIGHT = 8  # prepared blocks per actor the read tasks may run ahead by, in the object store
MIN_IN_FLIGHT_BYTES = 64 * 1024 * 1024
CPU_ACTOR_CPUS = 0.5  # measured here: 2 actors x 1 CPU on 2 CPUs hung the reads; 0.5 each ran
READ_TASK_RETRIES = 3  # a read task is re-run when its worker dies (a node lost); -1 would retry forever
ACTOR_RESTARTS = -1  # actors are restarted whenever their worker dies: a long run on many nodes loses some
BATCH_RETRIES = 3  # a batch whose actor died is resubmitted this often, then the run fails (a poison input)
ACTOR_INIT_DEATHS = 0  # an actor that dies while loading the models fails the run (Ray Data's default, kept)


def _import_ray():
    import_extra("ray.data", "ray", "executor='ray'")
    import ray

    return ray


def read_and_prepare(
    batch: dict[str, np.ndarray],
    columns: dict[str, Any],
    batch_size: int,
    image_size: int,
    datasets: dict,
    max_image_pixels: int | None,
):
    """Read task: one shard's rows as they are read (``reader.rows_or_why``, as the local executor reads them),
    prepared ``batch_size`` at a time (plain columns Ray can move), so a task holds one batch of the shard at once.

    After the rows comes a one-row end marker (row index -1) carrying ``shard_rows``, the shard's row count, so the
    driver knows when the shard is whole, and ``late_errors`` (``reader.ShardRows``); a shard that cannot be read,
    at its start or part-way, gives a marker whose ``failure`` says why instead. ``datasets`` holds the object
    references of the ``datasets`` datasets the shards name (each put in the object store once);
    ``max_image_pixels`` is the driver's ``PIL.Image.MAX_IMAGE_PIXELS`` (a caller may have changed it), so a
    worker refuses the images the local executor refuses, no more and no fewer.
    """
    import ray
    from PIL import Image

    Image.MAX_IMAGE_PIXELS = max_image_pixels

    for blob in batch["shard"]:
        shard = pickle.loads(blob)
        if shard.kind == "datasets":
            shard = replace(shard, dataset=ray.get(datasets[shard.dataset]))
        stream, failure = rows_or_why(shard, columns)
        if failure is not None:
            yield _marker(shard.name, image_size, failure=failure)
            continue
        count = 0
        try:
            while rows := list(itertools.islice(stream.rows, batch_size)):
                yield _to_ray(prepare_rows(rows, image_size))
                count += len(rows)
        except ShardReadError as err:  # part-way: the driver drops the rows it has of this shard
            yield _marker(shard.name, image_size, failure=str(err))
            continue
        yield _marker(shard.name, image_size, rows=count, late_errors=stream.late_errors)


def _text(values) -> np.ndarray:
    """Strings (or None) as an object column: variable-width, so one long caption costs its own length only (a
    fixed-width numpy string column pads every row to the longest and drops trailing NULs); Arrow carries it as
    a string column with nulls, and None comes back as None."""
    column = np.empty(len(values), dtype=object)
    column[:] = [None if v is None else str(v) for v in values]
    return column


_TEXT_COLUMNS = (
    "key",
    "shard",
    "caption",
    "references",
    "origin",
    "image_file",
    "error",
    "failure",
    "late_errors",
)
_MARKER_COLUMNS = ("shard_rows", "failure", "late_errors")  # what the read stage tells the driver, not rows


def _received(column) -> list[str | None]:
    """A text column as it comes back from Arrow: strings, and None where there was none (a column of nulls
    only comes back as floats, NaN for each)."""
    return [v if isinstance(v, str) else None for v in column]


def _marker(
    shard_name: str, size: int, *, failure: str | None = None, rows: int = -1, late_errors: dict | None = None
) -> dict[str, Any]:
    """A shard's one-row marker (row index -1, never scored): its end (``rows`` read, ``late_errors``), or why it
    could not be read (``failure``)."""
    late = None if failure is not None else json.dumps({str(k): v for k, v in (late_errors or {}).items()})
    return {
        "key": _text([None]),
        "shard": _text([shard_name]),
        "index": np.array([-1], dtype=np.int64),
        "caption": _text([None]),
        "references": _text([None]),
        "origin": _text([None]),
        "image_file": _text([None]),
        "error": _text([failure]),
        "pixels": np.zeros((1, size, size, 3), dtype=np.uint8),
        "shard_rows": np.array([rows], dtype=np.int64),
        "failure": _text([failure]),
        "late_errors": _text([late]),
    }


def _to_ray(prepared: dict[str, Any]) -> dict[str, Any]:
    n = len(prepared["key"])
    out = {k: _text(prepared[k]) for k in ("key", "shard", "caption", "error")}
    # Lists of references are ragged: carried as JSON text so every block has the same column types. The
    # reader has made them lists of strings (capeval.corpus.row_checks), or None.
    out["references"] = _text([None if r is None else json.dumps(r) for r in prepared["references"]])
    # Dicts and lists: as JSON text.
    out["origin"] = _text([None if o is None else json.dumps(o) for o in prepared["origin"]])
    out["image_file"] = _text([None if f is None else json.dumps(f) for f in prepared["image_file"]])
    out["index"] = prepared["index"]
    out["pixels"] = prepared["pixels"]
    out["shard_rows"] = np.full(n, -1, dtype=np.int64)
    out["failure"] = _text([None] * n)
    out["late_errors"] = _text([None] * n)
    return out


class ScoreActor:
    """Actor: the metrics' models, loaded once, scoring prepared batches (``RowScorer.score``)."""

    def __init__(
        self, metrics: Sequence[str], options: dict[str, Any], embeddings: bool, raw_cosine: bool = True
    ) -> None:
        self.scorer = RowScorer(metrics, options, embeddings=embeddings, raw_cosine=raw_cosine)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        # Ray cuts the actors' batches across shards: a shard's marker may share a batch with other shards' rows,
        # so markers are told apart per row, and every column keeps the batch's order.
        real = np.asarray(batch["index"]) >= 0
        out = self._placeholders(batch, len(real))
        if real.any():
            prepared = {
                k: list(_text(_received(batch[k]))[real])
                for k in ("key", "shard", "caption", "origin", "image_file", "error")
            }
            references = _text(_received(batch["references"]))[real]
            prepared["references"] = [None if r is None else json.loads(r) for r in references]
            prepared["index"] = batch["index"][real]
            prepared["pixels"] = batch["pixels"][real]
            for k, v in self.scorer.score(prepared).items():
                out[k][real] = v if isinstance(v, np.ndarray) else _text(v)
        out["shard_rows"] = batch["shard_rows"]
        out["failure"] = _text(_received(batch["failure"]))
        out["late_errors"] = _text(_received(batch["late_errors"]))
        return out

    def _placeholders(self, batch: dict[str, np.ndarray], n: int) -> dict[str, Any]:
        """Every output column of ``n`` rows as a failure placeholder passes through: its key, shard, index,
        caption and error as read, NaN scores, zero embeddings; the scored rows are written over them."""
        out: dict[str, Any] = {
            k: _text(_received(batch[k]))
            for k in ("key", "shard", "caption", "origin", "image_file", "error")
        }
        out["index"] = np.array(batch["index"], dtype=np.int64)
        for column in self.scorer.columns():
            out[column] = np.full(n, np.nan)
        if self.scorer.embeddings:
            dim = next(iter(self.scorer.scorers.values())).backbone.embed_dim
            out["image_embedding"] = np.zeros((n, dim), np.float16)
            out["text_embedding"] = np.zeros((n, dim), np.float16)
        return out


def run_on_ray(
    shards: list[Shard],
    output: Path,
    metrics: Sequence[str],
    options: dict[str, Any],
    *,
    columns: dict[str, Any],
    batch_size: int,
    embeddings: bool,
    score_columns: Sequence[str],
    image_size: int,
    records: dict[str, dict],
    address: str | None = None,
    num_workers: int | None = None,
    worker_gpus: float | None = None,
    worker_cpus: float | None = None,
    actor_class: type = ScoreActor,
) -> dict[str, str]:
    """Score ``shards`` on Ray and write each one's output file; returns ``{shard: why}`` for unreadable ones.

    ``score_columns`` and ``image_size`` come from a ``RowScorer`` of the same metrics built on the driver
    (``score_corpus`` builds one first, so a model that cannot be loaded fails before Ray starts).

    ``records`` maps each shard to its ``shard_outputs.input_record``, taken before it is read, written in its
    output. ``actor_class`` is a ``ScoreActor`` (or a subclass: the fault-injection tests kill one mid-shard).
    """
    ray = _import_ray()
    if not shards:
        return {}
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    pool = _actor_pool(
        ray.cluster_resources().get("GPU", 0), options, size=num_workers, gpus=worker_gpus, cpus=worker_cpus
    )
    from PIL import Image

    reads = {
        "columns": columns,
        "batch_size": batch_size,
        "image_size": image_size,
        "max_image_pixels": Image.MAX_IMAGE_PIXELS,
    }
    with _data_context(ray, batch_bytes(batch_size, image_size), pool.size):
        ds = _read_stage(ray, shards, reads)
        constructor = {
            "metrics": list(metrics),
            "embeddings": embeddings,
            "raw_cosine": "raw_cosine" in score_columns,
        }
        ds = _score_stage(ray, ds, actor_class, constructor, pool, batch_size)
        try:
            by_name = {shard.name: shard for shard in shards}
            return _collect(ds, output, score_columns, embeddings, by_name, records)
        except ray.exceptions.RayActorError as err:
            if not getattr(err, "actor_init_failed", False):
                raise
            raise _load_failure(err, list(metrics), options.get("model"), pool.options.get("device")) from err


def batch_bytes(batch_size: int, image_size: int) -> int:
    """The size of one prepared batch's pixels (``prepare_rows``: uint8, 3 channels), the bulk of a batch."""
    return batch_size * image_size * image_size * 3


@contextlib.contextmanager
def _data_context(ray, block_bytes: int, actors: int) -> Iterator[None]:
    """Ray Data's settings for this run, the caller's restored after it: no progress bars, a failed actor load ends
    the run, and blocks of about one prepared batch.

    Ray Data joins what a task yields into blocks of up to ``target_max_block_size`` (128 MiB) before handing them
    on, so a read task held up to 128 MiB of its shard's prepared rows, twice while the block was built, and an
    actor a block as large: memory that grew with the shard up to that size (measured with
    ``scripts/bench_corpus.py``). A block of one batch (and a quarter, for the columns beside the pixels) keeps what
    each holds to a batch, whatever the shard's size.
    """
    context = ray.data.DataContext.get_current()
    settings = {
        "enable_progress_bars": False,
        "max_consecutive_actor_init_deaths": ACTOR_INIT_DEATHS,
        "target_max_block_size": max(MIN_BLOCK_BYTES, block_bytes + block_bytes // 4),
    }
    block = settings["target_max_block_size"]
    options = context.execution_options
    limits = options.resource_limits
    in_flight = min(
        limits.object_store_memory or float("inf"),
        max(MIN_IN_FLIGHT_BYTES, BLOCKS_IN_FLIGHT * block * actors),
    )
    before = {name: getattr(context, name) for name in settings}
    for name, value in settings.items():
        setattr(context, name, value)
    options.resource_limits = limits.copy(object_store_memory=in_flight)
    try:
        yield
    finally:
        options.resource_limits = limits
        for name, value in before.items():
            setattr(context, name, value)


@dataclass(frozen=True)
class _ActorPool:
    """The scoring actors: how many, each one's resources, and the metric options they load the models with.

    Attributes:
        size: actors in the pool.
        gpus: GPUs per actor (0: none).
        cpus: CPUs per actor.
        options: the metric options; ``device`` is ``"cuda"`` when the actors hold a GPU (Ray shows each actor
            only the GPU it was given, as ``cuda:0``, whatever index the user named).
    """

    size: int
    gpus: float
    cpus: float
    options: dict[str, Any]


def _actor_pool(
    cluster_gpus: float,
    options: dict[str, Any],
    *,
    size: int | None = None,
    gpus: float | None = None,
    cpus: float | None = None,
) -> _ActorPool:
    """The actor pool for a cluster with ``cluster_gpus`` GPUs; ``None`` picks the default of each setting.

    Defaults: one GPU per actor when the cluster has GPUs and ``options`` do not ask for the CPU, else none; one
    CPU per GPU actor, ``CPU_ACTOR_CPUS`` per CPU actor (so the read tasks keep CPUs); one actor per GPU, else one.
    """
    if gpus is None:
        gpus = 1.0 if cluster_gpus and options.get("device") != "cpu" else 0.0
    if cpus is None:
        cpus = 1.0 if gpus else CPU_ACTOR_CPUS
    if size is None:
        size = max(1, int(cluster_gpus // gpus)) if gpus else 1
    actor_options = {**options, "device": "cuda"} if gpus else dict(options)
    return _ActorPool(size=size, gpus=gpus, cpus=cpus, options=actor_options)


def _read_stage(ray, shards: list[Shard], reads: dict[str, Any]):
    """The dataset of the shards' prepared rows: one read task per shard (``read_and_prepare`` with ``reads``,
    its keyword arguments), re-run ``READ_TASK_RETRIES`` times when its worker dies. A ``datasets`` dataset is put
    in the object store once, not copied into every task."""
    refs: dict[str, Any] = {}
    items = []
    for shard in shards:
        if shard.kind == "datasets":
            key = str(id(shard.dataset))
            if key not in refs:
                refs[key] = ray.put(shard.dataset)
            shard = replace(shard, dataset=key)
        items.append({"shard": pickle.dumps(shard)})
    ds = ray.data.from_items(items, override_num_blocks=len(items))
    with warnings.catch_warnings():  # the deprecation of these keywords: see _retry_limits
        warnings.filterwarnings("ignore", message="`ray_remote_args` is deprecated")
        return ds.map_batches(
            read_and_prepare,
            fn_kwargs={**reads, "datasets": refs},
            batch_size=1,
            num_cpus=1,
            **_retry_limits(ds, max_retries=READ_TASK_RETRIES),
        )


def _score_stage(ray, ds, actor_class: type, constructor: dict[str, Any], pool: _ActorPool, batch_size: int):
    """``ds`` scored by a pool of ``actor_class`` actors, each built with ``constructor`` (``metrics``,
    ``embeddings``) and the pool's options, called with at most ``batch_size`` rows at a time; a dead actor is
    restarted and its batch resubmitted ``BATCH_RETRIES`` times."""
    with warnings.catch_warnings():  # the deprecation of these keywords: see _retry_limits
        warnings.filterwarnings("ignore", message="`ray_remote_args` is deprecated")
        return ds.map_batches(
            actor_class,
            fn_constructor_kwargs={**constructor, "options": pool.options},
            # Ray joins the read tasks' batches into blocks; None would hand an actor a whole block (thousands
            # of rows in one forward pass). A size re-cuts them across blocks; Ray refuses None with GPUs.
            batch_size=batch_size,
            compute=ray.data.ActorPoolStrategy(size=pool.size),
            num_gpus=pool.gpus or None,
            num_cpus=pool.cpus,
            **_retry_limits(ds, max_restarts=ACTOR_RESTARTS, max_task_retries=BATCH_RETRIES),
        )


def _load_failure(err: Exception, metrics: list[str], model: str | None, device: str | None) -> RuntimeError:
    """The error that ends a run whose actors could not load the models: Ray's message is the worker's whole
    traceback, so only its last line (the error that stopped the load) is kept, with the metrics, model and
    device."""
    why = next((line for line in reversed(str(err).splitlines()) if line.strip()), str(err)).strip()
    return RuntimeError(
        f"a Ray actor could not load the models of {metrics} (model={model!r}, "
        f"device={device!r}): {why}; the run stopped (shards already written are kept)"
    )


def _retry_limits(ds, **limits: int) -> dict[str, int]:
    """The retry limits as ``map_batches`` keywords, where this Ray still takes them.

    Ray Data passes extra ``map_batches`` keywords to ``ray.remote`` and deprecates that for Ray 2.64, with no
    named replacement for these limits yet; a Ray that refuses them gets none, and Ray Data's defaults apply
    (``-1``: retry and restart without end).
    """
    parameters = inspect.signature(ds.map_batches).parameters.values()
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return {}
    return limits


def _collect(
    ds,
    output: Path,
    score_columns: Sequence[str],
    embeddings: bool,
    shards: dict[str, Shard],
    records: dict[str, dict],
) -> dict[str, str]:
    """Gather scored rows per shard on the driver; write each shard once its end marker and all its rows arrived.

    A block Ray returns may hold rows of several shards, markers among them (the score stage cuts its batches
    across shards, and Ray joins its outputs into blocks), and a shard's rows may arrive after its marker (actors
    finish out of order), so rows are sorted out by their shard.
    """
    in_flight = _ShardsInFlight(output, score_columns, embeddings, shards, records)
    for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
        batch.update({k: _text(_received(batch[k])) for k in _TEXT_COLUMNS if k in batch})
        names = np.array([str(s) for s in batch["shard"]], dtype=object)
        marker = np.asarray(batch["index"]) < 0
        for p in np.flatnonzero(marker):
            in_flight.marked(
                names[p], batch["failure"][p], int(batch["shard_rows"][p]), batch["late_errors"][p]
            )
        for name in dict.fromkeys(names[~marker]):
            mine = ~marker & (names == name)
            in_flight.add(name, {k: v[mine] for k, v in batch.items() if k not in _MARKER_COLUMNS})
    return in_flight.finish()


class _ShardsInFlight:
    """The driver's rows of the shards not yet written, each written as soon as it is whole."""

    def __init__(
        self,
        output: Path,
        score_columns,
        embeddings: bool,
        shards: dict[str, Shard],
        records: dict[str, dict],
    ) -> None:
        self.output, self.score_columns, self.embeddings = output, score_columns, embeddings
        self.shards = shards  # by name: each checked unchanged before its rows are written
        self.records = records
        self.parts: dict[str, list[dict[str, Any]]] = {}
        self.seen: dict[str, set[int]] = {}
        self.ends: dict[str, tuple[int, dict[int, str]]] = {}
        self.failed: dict[str, str] = {}
        self.written: set[str] = set()

    def marked(self, name: str, failure: str | None, rows: int, late: str | None) -> None:
        if name in self.written:  # a retried read task's marker, after the shard was written from the first
            return
        if failure is not None:  # unreadable, at its start or part-way: nothing of it is written
            self.failed[name] = failure
            self.parts.pop(name, None)
        elif name not in self.failed:
            self.ends[name] = (rows, {int(k): v for k, v in json.loads(late or "{}").items()})
            self._write_if_whole(name)

    def add(self, name: str, rows: dict[str, np.ndarray]) -> None:
        if name in self.failed or name in self.written:
            return
        # A retried task may deliver a batch twice: each row index is kept once.
        known = self.seen.setdefault(name, set())
        fresh = np.array([int(i) not in known for i in rows["index"]], dtype=bool)
        if fresh.any():
            known.update(int(i) for i in rows["index"][fresh])
            self.parts.setdefault(name, []).append({k: v[fresh] for k, v in rows.items()})
            self._write_if_whole(name)

    def _write_if_whole(self, name: str) -> None:
        if (
            name in self.written
            or name not in self.ends
            or len(self.seen.get(name, ())) != self.ends[name][0]
        ):
            return
        parts = self.parts.pop(name)
        changed = changed_while_read(self.shards[name], self.records[name])
        if changed:
            self.failed[name] = changed
            return
        rows = {column: np.concatenate([p[column] for p in parts]) for column in parts[0]}
        write_shard_output(
            self.output,
            name,
            rows,
            self.score_columns,
            self.embeddings,
            self.records[name],
            late_errors=self.ends[name][1],
        )
        self.written.add(name)

    def finish(self) -> dict[str, str]:
        """``{shard: why}`` of the shards that could not be read.

        Raises:
            RuntimeError: a shard whose rows did not all arrive (rerunning resumes it).
        """
        missing = {
            name: ("end not received" if name not in self.ends else self.ends[name][0] - len(self.seen[name]))
            for name in self.parts
        }
        if missing:
            raise RuntimeError(f"Ray returned incomplete shards (rows missing: {missing}); rerun to resume")
        return self.failed
