"""A shell command's standard output read as a shard: WebDataset's ``pipe:CMD`` locations.

The command runs through ``/bin/sh`` in a session of its own (so stopping it stops what it started, ``curl`` or
``aws s3 cp``), with no standard input; its standard error goes to a temporary file whose end is quoted when it
fails. Closing the stream after its end waits for the command and raises ``PipeFailed`` when it exited with a
status other than 0 (a download cut short, a missing object: the bytes read so far may look like a shorter tar).
Closing it before its end (the reader stopped: a refused header) ends the command, and its status is not checked.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import tempfile

STDERR_TAIL_BYTES = 2000  # of the command's standard error, quoted in PipeFailed
_STOP_WAIT_S = 5


class PipeFailed(OSError):
    """The command of a ``pipe:`` location exited with a status other than 0; the message names it."""


class PipeStream(io.RawIOBase):
    """The standard output of ``command``, started at once; read it forward, then close it.

    Raises:
        OSError: the shell cannot be started.
    """

    def __init__(self, command: str) -> None:
        super().__init__()
        self.command = command
        self._stderr = tempfile.TemporaryFile()
        self._proc = subprocess.Popen(
            command,
            shell=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            start_new_session=True,
        )
        self._at_end = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        count = self._proc.stdout.readinto(buffer)
        if not count:
            self._at_end = True
        return count

    def close(self) -> None:
        if self.closed:
            return
        try:
            self._proc.stdout.close()
            if self._at_end:
                status = self._proc.wait()
                if status != 0:
                    raise PipeFailed(f"pipe:{self.command} exited with status {status}{self._stderr_tail()}")
            else:
                self._stop()
        finally:
            self._stderr.close()
            super().close()

    def _stop(self) -> None:
        """End the command's session (the shell may be gone and what it started still writing): the reader needs
        no more of its output."""
        try:
            os.killpg(self._proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass  # every process of the session has ended already
        try:
            self._proc.wait(timeout=_STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait()

    def _stderr_tail(self) -> str:
        self._stderr.seek(0, os.SEEK_END)
        size = self._stderr.tell()
        self._stderr.seek(max(0, size - STDERR_TAIL_BYTES))
        text = self._stderr.read().decode("utf-8", "replace").strip()
        return f"; its standard error ends: {text}" if text else "; it wrote nothing on standard error"
