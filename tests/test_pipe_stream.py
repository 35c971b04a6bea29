"""A pipe: command's output as a stream: read to its end, a failed command is an error naming its status and
standard error; closed early, the command is stopped and its status not held against it."""

from __future__ import annotations

import os
import signal
import time

import pytest

from capeval.corpus import pipe_stream
from capeval.corpus.pipe_stream import PipeFailed, PipeStream


def test_the_output_of_a_command_is_read_and_a_clean_exit_is_no_error():
    with PipeStream("printf 'abc'; printf 'def'") as stream:
        assert stream.read() == b"abcdef"


def test_a_command_failing_after_its_output_raises_with_its_status_and_standard_error():
    stream = PipeStream("printf 'partial'; echo 'curl: (18) transfer closed' >&2; exit 18")
    assert stream.read() == b"partial"
    with pytest.raises(
        PipeFailed, match=r"exited with status 18; its standard error ends: curl: \(18\) transfer closed"
    ):
        stream.close()


def test_a_command_that_fails_silently_says_so():
    stream = PipeStream("exit 2")
    assert stream.read() == b""
    with pytest.raises(PipeFailed, match="exited with status 2; it wrote nothing on standard error"):
        stream.close()


def test_closing_before_the_end_stops_the_command_and_what_it_started(monkeypatch):
    signals, send = [], os.killpg

    def killpg(pgid, sig):
        signals.append((pgid, sig))
        send(pgid, sig)

    monkeypatch.setattr(pipe_stream.os, "killpg", killpg)
    stream = PipeStream("yes | cat")  # endless: only stopping it ends it
    assert stream.read(4) == b"y\ny\n"
    pid = stream._proc.pid
    stream.close()  # no error: the reader wanted no more
    # One SIGTERM to the session ended it: no SIGKILL after the grace period, and the shell is waited for.
    assert signals == [(pid, signal.SIGTERM)]
    assert stream._proc.returncode is not None
    monkeypatch.undo()
    assert _session_ends(pid, within_s=5)


def _session_ends(pid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pid, 0)  # signal 0: only asks whether a process of the session is left
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_a_stream_cannot_seek():
    with PipeStream("true") as stream:
        assert not stream.seekable()
