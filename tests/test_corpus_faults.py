"""Corpus scoring under faults and at scale, in real processes: SIGKILL and resume, flat peak RSS, 2 processes.

Each run is ``python -m capeval.cli corpus ...`` in a child process; its peak RSS comes from the
kernel (``os.wait4``'s ``ru_maxrss``), not from sampling.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_corpus import make_corpus, read_jsonl

pytestmark = pytest.mark.slow

SMALL, FACTOR = 250, 20
PARTS = SMALL // 25 + 1  # ten full parts, then the empty part that marks the end
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


def _cache_rows(path: Path) -> int:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        return db.execute("SELECT COUNT(*) FROM embeddings").fetchone()[0]
    finally:
        db.close()


def test_a_run_killed_mid_way_resumes_to_the_uninterrupted_output(small_run, tmp_path, tiny_clip_dir):
    corpus, reference, _ = small_run
    out = tmp_path / "out"
    parts, cache = out / "parts", out / "embeddings.sqlite"
    at_third_part: list[int] = []

    def mid_part() -> bool:
        # Kill once part 3 is written and part 4 has committed at least one batch of embeddings.
        if not parts.is_dir() or len(list(parts.glob("part-*.jsonl"))) < 3:
            return False
        if not at_third_part:
            at_third_part.append(_cache_rows(cache))
        return _cache_rows(cache) > at_third_part[0]

    status, _ = run_cli(score_args(corpus, out, tiny_clip_dir), tmp_path / "killed.txt", mid_part)
    assert status == -signal.SIGKILL
    finished = len(list(parts.glob("part-*.jsonl")))
    assert 3 <= finished < PARTS and not (out / "scores.jsonl").exists()
    cached = _cache_rows(cache)  # committed batches outlive the kill

    status, _ = run_cli(score_args(corpus, out, tiny_clip_dir), tmp_path / "resumed.txt")
    assert status == 0, (tmp_path / "resumed.txt").read_text()[-3000:]
    for name in ("scores.jsonl", "kept.jsonl", "errors.jsonl"):
        assert (out / name).read_bytes() == (reference / name).read_bytes(), name
    rows = read_jsonl(out / "scores.jsonl")
    assert [r["index"] for r in rows] == list(range(SMALL))  # no row lost, none twice
    run = json.loads((out / "summary.json").read_text())["this_run"]
    assert run["parts_skipped"] == finished and run["parts"] == PARTS - finished
    # Nothing encoded twice: the resumed run encoded exactly the entries the cache lacked after the kill.
    added = _cache_rows(out / "embeddings.sqlite") - cached
    assert run["images_encoded"] + run["texts_encoded"] == added
    print(
        f"\nSIGKILL after {finished} finished parts with {cached} cache entries ({at_third_part[0]} when part 3 "
        f"was written); the resumed run skipped {run['parts_skipped']} parts, encoded {run['images_encoded']} "
        f"images and {run['texts_encoded']} captions; outputs byte-identical to the uninterrupted run"
    )


def test_peak_rss_on_20x_more_rows_stays_within_1_2x(small_run, tmp_path, tiny_clip_dir):
    _, _, small_rss = small_run
    corpus = make_corpus(tmp_path, SMALL * FACTOR)
    status, big_rss = run_cli(score_args(corpus, tmp_path / "out", tiny_clip_dir), tmp_path / "log.txt")
    assert status == 0, (tmp_path / "log.txt").read_text()[-3000:]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["rows"] == SMALL * FACTOR and summary["this_run"]["images_encoded"] == SMALL * FACTOR - 2
    print(f"\npeak RSS: {SMALL} rows {small_rss:.0f} MiB, {SMALL * FACTOR} rows {big_rss:.0f} MiB")
    assert big_rss <= 1.2 * small_rss


def test_two_processes_share_the_parts_and_write_the_same_output(small_run, tmp_path, tiny_clip_dir):
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
    assert summary["this_run"]["processes"] == 2
    got, want = read_jsonl(out / "scores.jsonl"), read_jsonl(reference / "scores.jsonl")
    assert [(r["index"], r["id"], "error" in r) for r in got] == [
        (r["index"], r["id"], "error" in r) for r in want
    ]
    # A caption repeated in parts of both processes may be encoded in another batch: equal up to rounding.
    assert [r.get("clipscore", 0.0) for r in got] == pytest.approx(
        [r.get("clipscore", 0.0) for r in want], abs=1e-6
    )
    headers = [
        json.loads(p.read_text().splitlines()[0]) for p in sorted((out / "parts").glob("part-*.jsonl"))
    ]
    assert [h["part"] for h in headers] == list(range(PARTS))
