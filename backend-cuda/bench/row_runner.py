"""The benchmark rows in worker processes, run by ``harness.py``: one process measures the rows
in the order given, so that the interpreter, torch, the CUDA context and cuBLAS start once
for a run and not once a row (about half of a row's seconds when each row had its own
process: 4-8 s a row on the H200, of which ~2 s was timing).

A worker prints ``ROW <name>`` before each row and ``RESULT <json>`` (with the row's
``name``) after it; anything else it prints is the row's log. The parent gives each row
``timeout`` seconds from its ``ROW`` line (the first row also has the worker's start). A row
that runs past it (a hang) is stopped with its worker; a row whose worker ends
before its result (a crash) is reported with the end of the worker's stderr; a row whose
result says ``fatal`` (the kernel lost the CUDA context: every later call in that process
would fail) ends its worker. In each case the rows after it go on in a fresh worker, so a
broken kernel costs its own row, as it did when every row had a process.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator

ROW = "ROW "
RESULT = "RESULT "
STDERR_LINES = 40  # of a worker's stderr kept in the log


class Lines:
    """The lines a pipe delivers, each within a deadline (a worker may print half a line,
    then hang: the half line never blocks the parent)."""

    def __init__(self, fd: int):
        self.fd, self.buffer, self.ended = fd, b"", False

    def next(self, deadline: float) -> str | None:
        """The next whole line (without its newline); "" at the end of the pipe once every
        line is read; None when ``deadline`` (``time.monotonic()``) passes first."""
        while b"\n" not in self.buffer and not self.ended:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                return None
            chunk = os.read(self.fd, 1 << 16)
            self.ended = not chunk
            self.buffer += chunk
        if b"\n" in self.buffer:
            line, self.buffer = self.buffer.split(b"\n", 1)
        else:  # the pipe ended: its last, unterminated line, then ""
            line, self.buffer = self.buffer, b""
            if not line:
                return ""
        return line.decode(errors="replace").rstrip("\r") or " "


def failed(why: str) -> dict:
    return {"status": f"FAILED: {why[:100]}"}


def run_rows(command: Callable[[list[str]], list[str]], names: list[str], timeout: float,
             log: Callable[[str], None]) -> Iterator[tuple[str, dict]]:
    """``(name, result)`` for each of ``names`` in order, measured by workers that
    ``command(remaining names)`` starts; each result gets the row's ``seconds``."""
    pending = list(names)
    while pending:
        with tempfile.TemporaryFile() as stderr:
            # in the parent's process group: a plan step's time limit stops the worker too
            proc = subprocess.Popen(command(pending), stdout=subprocess.PIPE, stderr=stderr)
            try:
                blamed, why, started = yield from _serve(proc, pending, timeout, log)
            finally:  # hung, or the caller stopped reading: the worker stops too
                if proc.poll() is None:
                    proc.kill()
            code = proc.wait()
            proc.stdout.close()
            stderr.seek(0)
            tail = stderr.read().decode(errors="replace").strip().splitlines()[-STDERR_LINES:]
        for line in tail:
            log(f"  [stderr] {line}")
        if blamed is not None:
            why = why or (tail[-1] if tail else f"exit status {code}")
            pending.remove(blamed)
            yield blamed, {**failed(why), "seconds": round(time.monotonic() - started, 1)}


def _serve(proc: subprocess.Popen, pending: list[str], timeout: float, log):
    """Read one worker until it ends: yields each row it finishes (removing it from
    ``pending``), returns ``(row to blame, why, when it started)``: the row the worker hung
    (why: the time limit) or ended on (why: None, its stderr says; a worker that ends before
    its first row blames that row), or no row when it ended between rows after finishing
    at least one (it lost its CUDA context, or it was done)."""
    lines = Lines(proc.stdout.fileno())
    current, started, progress = None, time.monotonic(), False
    while True:
        line = lines.next(started + timeout)
        if line is None:
            return current or pending[0], f"timed out after {timeout:.0f} s (a hang?)", started
        if line == "":
            blamed = current or (None if progress else pending[0])
            return blamed, None, started
        if line.startswith(ROW):
            current, started = line[len(ROW):], time.monotonic()
            log(f"{current}:")
        elif line.startswith(RESULT):
            result = json.loads(line[len(RESULT):])
            name = result.pop("name")
            result["seconds"] = round(time.monotonic() - started, 1)
            pending.remove(name)
            current, progress = None, True
            started = time.monotonic()  # the next row's ROW line is due within the timeout
            yield name, result
        elif line.strip():
            log(f"  {line}")
