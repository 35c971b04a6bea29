"""Corpus scoring under faults and at scale: SIGKILL and resume, what a shard held freed once it is written, 2
processes.

The killed run and the two-process launch are ``python -m capeval.cli corpus ...`` in child processes; the
uninterrupted reference and the resume go through the same command (``capeval.cli.main``) in this process, on one
thread as the children are, so their outputs compare byte for byte. The peak RSS of runs on 20x more rows is
measured by ``scripts/bench_corpus.py --jsonl`` (the kernel's ``ru_maxrss`` of each run); here the bug behind a
growing peak (a scored shard's pixels or scores kept) is caught by what stays alive.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import time
import weakref
from pathlib import Path

import pytest
import torch
from test_corpus import make_corpus, read_scores

from capeval.cli import main as cli_main
from capeval.corpus.row_scoring import RowScorer

pytestmark = pytest.mark.slow

SMALL = 150
SHARDS = SMALL // 25  # six shards of 25 rows
OPTIONS = ["--chunk-size", "25", "--batch-size", "5", "--threshold", "0.3", "--no-progress"]


def _env() -> dict[str, str]:
    # One thread per process: two cores are shared, and float results depend on the thread count.
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")


def run_here(args: list[str]) -> int:
    """The CLI in this process, on one thread as the children run (``_env``); torch's threads restored after."""
    before = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OMP_NUM_THREADS", "1")
        torch.set_num_threads(1)
        try:
            return cli_main(args)
        finally:
            torch.set_num_threads(before)


def run_cli(args: list[str], log: Path, kill_when=None):
    """Run the CLI in a child, SIGKILLed as soon as ``kill_when()``; returns its exit status."""
    with open(log, "w") as out:
        child = subprocess.Popen(
            [sys.executable, "-m", "capeval.cli", *args], stdout=out, stderr=out, env=_env()
        )
        deadline = time.time() + 600
        while child.poll() is None:
            if kill_when is not None and kill_when():
                child.send_signal(signal.SIGKILL)
                child.wait()
                break
            if time.time() > deadline:
                child.kill()
                raise TimeoutError(log.read_text()[-2000:])
            time.sleep(0.005)
    return child.returncode


def score_args(corpus: Path, out: Path, model: Path) -> list[str]:
    return ["corpus", str(corpus), "--output", str(out), "--model", str(model), *OPTIONS]


@pytest.fixture(scope="module")
def small_run(tmp_path_factory, tiny_clip_dir):
    root = tmp_path_factory.mktemp("small")
    corpus = make_corpus(root, SMALL)
    assert run_here(score_args(corpus, root / "out", tiny_clip_dir)) == 0
    return corpus, root / "out"


def test_a_run_killed_mid_way_resumes_to_the_uninterrupted_output(small_run, tmp_path, tiny_clip_dir):
    corpus, reference = small_run
    out = tmp_path / "out"
    scores = out / "scores"

    def three_shards_written() -> bool:
        return scores.is_dir() and len(list(scores.glob("*.parquet"))) >= 3

    status = run_cli(score_args(corpus, out, tiny_clip_dir), tmp_path / "killed.txt", three_shards_written)
    assert status == -signal.SIGKILL
    finished = len(list(scores.glob("*.parquet")))
    assert 3 <= finished < SHARDS and not (out / "summary.json").exists()

    assert run_here(score_args(corpus, out, tiny_clip_dir)) == 0
    for path in sorted((reference / "scores").glob("*.parquet")):
        assert (scores / path.name).read_bytes() == path.read_bytes(), path.name
    assert (out / "kept.jsonl").read_bytes() == (reference / "kept.jsonl").read_bytes()
    rows = read_scores(out)
    assert [r["key"] for r in rows] == [f"row{i}" for i in range(SMALL)]  # no row lost, none twice
    summary = json.loads((out / "summary.json").read_text())
    assert summary["shards_scored_now"] == SHARDS - finished
    print(
        f"\nSIGKILL after {finished} of {SHARDS} shards; the resumed run scored the other "
        f"{summary['shards_scored_now']}; every output byte-identical to the uninterrupted run"
    )


def test_what_a_shard_held_is_freed_once_it_is_written(tmp_path, tiny_clip_dir, monkeypatch):
    """The peak RSS stays flat over 20x more rows (``scripts/bench_corpus.py --jsonl 250 5000`` measures it) because
    nothing of a written shard stays alive: its batches' pixels and scores are freed while later shards are scored.
    A shard's scores wait for its last batch and its writing (a queue of two shards, one being written, and the one
    the writer thread may not have let go of yet), no longer."""
    rows, chunk = 80, 10  # eight shards of two batches
    alive: list[tuple[int, str, weakref.ref]] = []  # (shard, what, a weak reference to it)
    shards: list[str] = []
    old_alive: list[int] = []  # at each shard's first batch: things still alive from shards 5 or more before
    kept_within_shard = []  # at a shard's second batch: whether its first batch's scores were alive
    real_score = RowScorer.score

    def score(self, batch):
        name = batch["shard"][0]
        if name not in shards:
            shards.append(name)
            gc.collect()
            old_alive.append(sum(1 for s, _, ref in alive if s < len(shards) - 5 and ref() is not None))
        else:
            kept_within_shard.append(any(s == len(shards) - 1 and ref() is not None for s, _, ref in alive))
        out = real_score(self, batch)
        alive.append((len(shards) - 1, "pixels", weakref.ref(batch["pixels"])))
        alive.append((len(shards) - 1, "scores", weakref.ref(out["clipscore"])))
        return out

    monkeypatch.setattr(RowScorer, "score", score)
    corpus = make_corpus(tmp_path, rows)
    options = ["--chunk-size", str(chunk), "--batch-size", "5", "--threshold", "0.3", "--no-progress"]
    assert (
        run_here(
            [
                "corpus",
                str(corpus),
                "--output",
                str(tmp_path / "out"),
                "--model",
                str(tiny_clip_dir),
                *options,
            ]
        )
        == 0
    )
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["rows"] == rows and summary["scored"] == rows - 2
    assert len(shards) == rows // chunk and len(kept_within_shard) == rows // chunk
    assert all(kept_within_shard)  # the weak references see what is held
    assert old_alive == [0] * (rows // chunk)


# What `python -m capeval.cli` runs, then what the command left for the interpreter's exit to end.
LAUNCHED_COMMAND = """
import sys
import torch.distributed
from capeval.cli import main
code = main(sys.argv[1:])
print(f"process group left running: {torch.distributed.is_initialized()}")
sys.exit(code)
"""


def test_two_processes_share_the_shards_and_write_the_same_output(small_run, tmp_path, tiny_clip_dir):
    corpus, reference = small_run
    out = tmp_path / "out"
    command = tmp_path / "command.py"
    command.write_text(LAUNCHED_COMMAND)
    launched = subprocess.run(
        [
            sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
            str(command), *score_args(corpus, out, tiny_clip_dir),
        ],
        env=_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert launched.returncode == 0, (launched.stdout + launched.stderr)[-12000:]
    # Each process ended the group the command started: gloo's threads left to the exit can abort a process.
    assert launched.stdout.count("process group left running: False") == 2, launched.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["processes"] == 2 and summary["shards_scored_now"] == SHARDS
    got, want = read_scores(out), read_scores(reference)
    assert [(r["key"], r["error"] is None) for r in got] == [(r["key"], r["error"] is None) for r in want]
    # The same batches in each shard, on one thread per process: equal to the one-process run.
    assert [r["clipscore"] for r in got] == [r["clipscore"] for r in want]
