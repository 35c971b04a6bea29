"""Corpus scoring under faults and at scale, in real processes: SIGKILL and resume, flat peak RSS, 2 processes.

Each run is ``python -m capeval.cli corpus ...`` in a child process; its peak RSS comes from the
kernel (``os.wait4``'s ``ru_maxrss``), not from sampling.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_corpus import make_corpus, read_scores

pytestmark = pytest.mark.slow

SMALL, FACTOR = 250, 20
SHARDS = SMALL // 25  # ten shards of 25 rows
OPTIONS = ["--chunk-size", "25", "--batch-size", "5", "--threshold", "0.3", "--no-progress"]


def _env() -> dict[str, str]:
    # One thread per process: two cores are shared, and float results depend on the thread count.
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")


def run_cli(args: list[str], log: Path, kill_when=None):
    """Run the CLI in a child, SIGKILLed as soon as ``kill_when()``; returns (exit status, peak RSS in MiB)."""
    with open(log, "w") as out:
        child = subprocess.Popen(
            [sys.executable, "-m", "capeval.cli", *args], stdout=out, stderr=out, env=_env()
        )
        deadline = time.time() + 600
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            if kill_when is not None and kill_when():
                os.kill(child.pid, signal.SIGKILL)
                _, status, usage = os.wait4(child.pid, 0)
                break
            if time.time() > deadline:
                child.kill()
                raise TimeoutError(log.read_text()[-2000:])
            time.sleep(0.005)
        child.returncode = os.waitstatus_to_exitcode(status)
    return child.returncode, usage.ru_maxrss / 1024


def score_args(corpus: Path, out: Path, model: Path) -> list[str]:
    return ["corpus", str(corpus), "--output", str(out), "--model", str(model), *OPTIONS]


@pytest.fixture(scope="module")
def small_run(tmp_path_factory, tiny_clip_dir):
    root = tmp_path_factory.mktemp("small")
    corpus = make_corpus(root, SMALL)
    status, rss = run_cli(score_args(corpus, root / "out", tiny_clip_dir), root / "log.txt")
    assert status == 0, (root / "log.txt").read_text()[-3000:]
    return corpus, root / "out", rss


def test_a_run_killed_mid_way_resumes_to_the_uninterrupted_output(small_run, tmp_path, tiny_clip_dir):
    corpus, reference, _ = small_run
    out = tmp_path / "out"
    scores = out / "scores"

    def three_shards_written() -> bool:
        return scores.is_dir() and len(list(scores.glob("*.parquet"))) >= 3

    status, _ = run_cli(score_args(corpus, out, tiny_clip_dir), tmp_path / "killed.txt", three_shards_written)
    assert status == -signal.SIGKILL
    finished = len(list(scores.glob("*.parquet")))
    assert 3 <= finished < SHARDS and not (out / "summary.json").exists()

    status, _ = run_cli(score_args(corpus, out, tiny_clip_dir), tmp_path / "resumed.txt")
    assert status == 0, (tmp_path / "resumed.txt").read_text()[-3000:]
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


def test_peak_rss_on_20x_more_rows_stays_within_1_2x(small_run, tmp_path, tiny_clip_dir):
    _, _, small_rss = small_run
    corpus = make_corpus(tmp_path, SMALL * FACTOR)
    status, big_rss = run_cli(score_args(corpus, tmp_path / "out", tiny_clip_dir), tmp_path / "log.txt")
    assert status == 0, (tmp_path / "log.txt").read_text()[-3000:]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["rows"] == SMALL * FACTOR and summary["scored"] == SMALL * FACTOR - 2
    print(f"\npeak RSS: {SMALL} rows {small_rss:.0f} MiB, {SMALL * FACTOR} rows {big_rss:.0f} MiB")
    assert big_rss <= 1.2 * small_rss


def test_two_processes_share_the_shards_and_write_the_same_output(small_run, tmp_path, tiny_clip_dir):
    corpus, reference, _ = small_run
    out = tmp_path / "out"
    launched = subprocess.run(
        [
            sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
            "--module", "capeval.cli", *score_args(corpus, out, tiny_clip_dir),
        ],
        env=_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert launched.returncode == 0, (launched.stdout + launched.stderr)[-12000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["processes"] == 2 and summary["shards_scored_now"] == SHARDS
    got, want = read_scores(out), read_scores(reference)
    assert [(r["key"], r["error"] is None) for r in got] == [(r["key"], r["error"] is None) for r in want]
    # The same batches in each shard, on one thread per process: equal to the one-process run.
    assert [r["clipscore"] for r in got] == [r["clipscore"] for r in want]
