"""One run per output folder: a second run on a folder another process holds is refused naming that process, in
Python and on the command line, without touching the first run's output; a killed run leaves no lock behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import capeval
from capeval.cli import main
from capeval.corpus.lock import FolderInUseError
from capeval.corpus.run import score_corpus
from tests.test_corpus import read_scores

# --- A folder another run holds is refused; a killed run takes its lock with it ---


HOLDER_SCRIPT = """
import os, sys, time
from pathlib import Path
import capeval.corpus.local_executor as local_executor
from capeval.corpus.run import score_corpus

corpus, out, model, started, release = sys.argv[1:6]
reading = local_executor.read_batches


def held_reading(*args, **kwargs):
    # Holds the run (and so its lock) until the test lets it go.
    Path(started).write_text(str(os.getpid()))
    deadline = time.time() + 300
    while not Path(release).exists():
        if time.time() > deadline:
            raise SystemExit("never released")
        time.sleep(0.02)
    yield from reading(*args, **kwargs)


local_executor.read_batches = held_reading
result = score_corpus(Path(corpus), out, model=model, chunk_size=6, batch_size=4)
print("rows", result.summary["rows"])
"""


class _HoldingRun:
    """Another process running ``score_corpus`` on ``out``, paused once it holds the folder (started when made;
    ``wait_until_holding`` waits for it to hold the folder)."""

    def __init__(self, tmp_path: Path, corpus: Path, out: Path, model: str) -> None:
        self.tmp_path, self.out = tmp_path, out
        script = tmp_path / "holder.py"
        script.write_text(HOLDER_SCRIPT)
        self.started, self.release = tmp_path / "started", tmp_path / "release"
        src = str(Path(capeval.__file__).resolve().parents[1])
        env = dict(
            os.environ,
            OMP_NUM_THREADS="1",
            PYTHONPATH=os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]),
        )
        self.log = open(tmp_path / "holder.log", "w")  # noqa: SIM115 - closed in wait()
        self.proc = subprocess.Popen(
            [sys.executable, str(script), str(corpus), str(out), model, str(self.started), str(self.release)],
            stdout=self.log, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip

    def wait_until_holding(self) -> None:
        deadline = time.time() + 300
        while not self.started.exists():
            assert self.proc.poll() is None, (self.tmp_path / "holder.log").read_text()[-3000:]
            assert time.time() < deadline, "the holding run never started"
            time.sleep(0.05)

    def finish(self) -> tuple[int, str]:
        self.release.touch()
        return self.wait()

    def kill(self) -> int:
        self.proc.send_signal(signal.SIGKILL)
        return self.wait()[0]

    def wait(self) -> tuple[int, str]:
        code = self.proc.wait(timeout=300)
        self.log.close()
        return code, Path(self.log.name).read_text()


@pytest.fixture(scope="module")
def holding_runs(finished_run, tmp_path_factory, tiny_clip_dir):
    """Two holding runs, each on an output folder of its own, for the two tests below (one lets its run finish, the
    other kills it): started together, so that their start-ups (a Python, torch and the model each) overlap."""
    corpus = finished_run[0]
    folders = [tmp_path_factory.mktemp("held") for _ in ("refused", "killed")]
    holders = [_HoldingRun(folder, corpus, folder / "out", str(tiny_clip_dir)) for folder in folders]
    for holder in holders:
        holder.wait_until_holding()
    yield dict(zip(("refused", "killed"), holders, strict=True))
    for holder in holders:
        if holder.proc.poll() is None:
            holder.kill()


def test_a_second_run_on_a_held_folder_is_refused_in_python_and_on_the_command_line(
    finished_run, holding_runs, capsys
):
    corpus, reference, options, _ = finished_run
    holding_run = holding_runs["refused"]
    out = holding_run.out
    pid = holding_run.started.read_text()
    with pytest.raises(
        FolderInUseError, match=f"another run holds the output folder {re.escape(str(out))} \\(process {pid} "
    ):
        score_corpus(corpus, out, **options)
    args = ["corpus", str(corpus), "--output", str(out), "--model", options["model"]]
    assert main([*args, "--chunk-size", "6", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"capeval: error: another run holds the output folder {out} (process {pid} " in err
    code, log = holding_run.finish()  # the refused runs touched nothing of the first
    assert code == 0 and "rows 23" in log, log[-3000:]
    got, want = read_scores(out), read_scores(reference)
    # Another process, other thread count: equal up to float rounding.
    assert [r["clipscore"] or 0 for r in got] == pytest.approx([r["clipscore"] or 0 for r in want], abs=1e-6)
    again = score_corpus(corpus, out, **options)  # released: the folder is free again
    assert again.summary["shards_scored_now"] == 0


def test_a_killed_run_leaves_no_lock_behind(finished_run, holding_runs):
    corpus, reference, options, _ = finished_run
    holding_run = holding_runs["killed"]
    out = holding_run.out
    assert holding_run.kill() == -signal.SIGKILL
    assert (out / "run.lock").exists()  # the file stays; the OS lock went with the process
    result = score_corpus(corpus, out, **options)
    assert result.summary["shards_scored_now"] == 4
    got, want = read_scores(out), read_scores(reference)
    assert [r["clipscore"] or 0 for r in got] == pytest.approx([r["clipscore"] or 0 for r in want], abs=1e-6)


# --- Nothing is written through a link in the output folder ---


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's own file\n")
    return victim


def test_a_run_lock_that_is_a_link_is_refused_and_its_target_untouched(finished_run, tmp_path):
    corpus, _, options, _ = finished_run
    victim = _victim(tmp_path)
    (tmp_path / "out").mkdir()
    os.symlink(victim, tmp_path / "out" / "run.lock")
    with pytest.raises(
        ValueError, match=r"run\.lock is a symbolic link \(to .*victim\.txt\): capeval writes nothing"
    ):
        score_corpus(corpus, tmp_path / "out", **options)
    assert victim.read_text() == "the user's own file\n"
    os.unlink(tmp_path / "out" / "run.lock")
    os.symlink(
        tmp_path / "nowhere", tmp_path / "out" / "run.lock"
    )  # a link to nothing is not created through
    with pytest.raises(ValueError, match="is a symbolic link"):
        score_corpus(corpus, tmp_path / "out", **options)
    assert not (tmp_path / "nowhere").exists()


def test_a_lock_file_that_is_a_fifo_is_refused_without_hanging(finished_run, tmp_path):
    corpus, _, options, _ = finished_run
    (tmp_path / "out").mkdir()
    os.mkfifo(tmp_path / "out" / "run.lock")
    with pytest.raises(ValueError, match=r"run\.lock is not a regular file"):
        score_corpus(corpus, tmp_path / "out", **options)


@pytest.mark.parametrize("entry", ["scores", "summary.json", "run.json", "kept.jsonl", "scores/x.parquet"])
def test_a_link_anywhere_in_a_run_folder_fails_the_rerun_before_any_work(finished_run, tmp_path, entry):
    import shutil

    corpus, reference, options, _ = finished_run
    out = tmp_path / "out"
    shutil.copytree(reference, out)
    victim = _victim(tmp_path)
    target = out / entry
    if target.is_dir():
        shutil.rmtree(target)
    else:
        target.unlink(missing_ok=True)
    os.symlink(tmp_path if entry == "scores" else victim, target)
    with pytest.raises(
        ValueError, match=rf"{re.escape(str(target))} is a symbolic link .*writes nothing through links"
    ):
        score_corpus(corpus, out, **options, threshold=0.0)
    assert victim.read_text() == "the user's own file\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "victim.txt"]


def test_the_writer_refuses_a_link_made_after_the_folder_was_claimed(tmp_path):
    from capeval.corpus.output_files import LinkInOutputError, write_atomically

    out = tmp_path / "out"
    victim = _victim(tmp_path)
    (out / "scores").mkdir(parents=True)
    os.symlink(victim, out / "scores" / "00000.parquet")
    with pytest.raises(LinkInOutputError, match=r"00000\.parquet is a symbolic link"):
        write_atomically(out / "scores" / "00000.parquet", lambda fh: fh.write("rows"), inside=out)
    os.unlink(out / "scores" / "00000.parquet")
    write_atomically(out / "scores" / "00000.parquet", lambda fh: fh.write("rows"), inside=out)
    os.rename(out / "scores", tmp_path / "real-scores")
    os.symlink(tmp_path / "real-scores", out / "scores")
    with pytest.raises(LinkInOutputError, match=r"scores is a symbolic link"):
        write_atomically(out / "scores" / "00001.parquet", lambda fh: fh.write("x"), inside=out)
    assert victim.read_text() == "the user's own file\n"
    assert sorted(p.name for p in (tmp_path / "real-scores").iterdir()) == ["00000.parquet"]


def test_an_output_folder_that_is_itself_a_link_is_the_users_choice(finished_run, tmp_path):
    corpus, _, options, summary = finished_run
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", tmp_path / "out")
    result = score_corpus(corpus, tmp_path / "out", **options)
    assert result.summary["rows"] == summary["rows"] and (tmp_path / "elsewhere" / "summary.json").is_file()
