"""One step of one autotuning config -- its compilation, or its run, check and timing -- in a
process of its own, with a time limit and a memory limit.

Why not fork the tuning process: a forked child inherits the thread pools of TVM and torch
without their threads, and hangs the first time it runs a parallel kernel or torch op once the
parent has used them (both were measured to hang); and a forked child cannot use a CUDA
context the parent created. So each step runs in a child forked from a *clean helper*
(:mod:`.helper`): a process started once per tuning process, with the caller's ``sys.path``,
that imports torch, TVM, tilewright and the plugins, and never runs a kernel or touches a
device. Its children start in a fraction of a second, with no thread pool started and no
device context, on every backend, and each dies alone.

A step travels as a file: the caller's ``sys.path``, working directory and environment
(applied in the child, so ``TILEWRIGHT_CACHE_DIR`` or ``CUDA_VISIBLE_DEVICES`` set after the
helper started still count), then the function and its arguments written with cloudpickle,
which ships closures and functions of ``__main__`` by value as Ray does (code objects go whole,
through ``marshal``, so their file name stays and the frontend can read the kernel's source in
the child). The caller's ``__main__`` is not run again in the child, so a script needs no
``if __name__ == "__main__"`` guard. The result comes back as a pickle file.

Limits of a step:

- ``timeout``: seconds from the moment the child starts; past it, the child's process group
  (with any compiler it started) is killed: "timed out after 30 s";
- ``memory``: bytes the child may add to its data segment and private writable mappings
  (``RLIMIT_DATA`` over its size when forked). Unlike ``RLIMIT_AS`` it does not count address
  space reserved but unusable (the CUDA driver reserves terabytes), so device contexts still
  open; device memory itself is not limited. An allocation past it fails in the child:
  "exceeded the 2 GiB memory limit (MemoryError ...)".

A child killed by a signal is "killed by SIGSEGV"; one that exits on its own "exited with
status 3". An exception that escapes the step (``SystemExit`` included) is reported with its
type and message.
"""

from __future__ import annotations

import itertools
import json
import marshal
import os
import pickle
import re
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import types
from collections import ChainMap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import cloudpickle

from ..errors import ConfigError

_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9,
          "gb": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "tb": 10**12}
# what allocation failures say: Python, numpy, torch, C++, errno ENOMEM
_OUT_OF_MEMORY = re.compile(r"MemoryError|bad_alloc|Cannot allocate memory|can't allocate "
                            r"memory|Unable to allocate|out of memory", re.IGNORECASE)
_BOOT = ("import json, sys; sys.path[:] = json.loads(sys.argv[1]); "
         "from tilewright.autotuner.helper import serve; serve()")


@dataclass(frozen=True)
class Limits:
    """Per step: ``timeout`` seconds (None: none), ``memory`` bytes (None: none)."""

    timeout: float | None
    memory: int | None

    @classmethod
    def parse(cls, timeout, memory, workers: int) -> Limits:
        """From ``@autotune``'s ``timeout=`` (seconds) and ``memory_limit=`` (bytes as an
        int, a string such as ``"2 GiB"``, ``"512MiB"``, ``"1.5GB"``, or ``"auto"``: this
        machine's memory shared among ``workers`` steps and the caller, at least 1 GiB)."""
        if timeout is not None and (isinstance(timeout, bool) or
                                    not isinstance(timeout, (int, float)) or not timeout > 0):
            raise ConfigError(f"timeout must be a positive number of seconds or None, got "
                              f"{timeout!r}")
        if memory == "auto":
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
            memory = max(1 << 30, total // (workers + 1))
        return cls(None if timeout is None else float(timeout), parse_bytes(memory))


def parse_bytes(value) -> int | None:
    """Bytes from an int or a size such as ``"2 GiB"`` (KiB/MiB/GiB/TiB are powers of 1024,
    kB/MB/GB/TB of 1000); None stays None."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(value)) \
        if isinstance(value, str) else None
    if match and match.group(2).lower() in _UNITS and float(match.group(1)) > 0:
        return int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    raise ConfigError(f"memory_limit must be a positive number of bytes or a size such as "
                      f"'2 GiB' or '512 MiB', or None; got {value!r}")


def format_bytes(n: int) -> str:
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        size = _UNITS[unit.lower()]
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} bytes"


def memory_reason(error: str, limits: Limits) -> str:
    """``error`` said as "exceeded the 2 GiB memory limit (error)" when it is an allocation
    failure under a memory limit; otherwise ``error`` itself."""
    if limits.memory is None or not _OUT_OF_MEMORY.search(error or ""):
        return error
    return f"exceeded the {format_bytes(limits.memory)} memory limit ({error.splitlines()[0]})"


@dataclass
class Failed:
    """A step that returned nothing: why."""

    reason: str


# -- the caller's side ---------------------------------------------------------------------------
def _whole_code(code: types.CodeType):
    return marshal.loads, (marshal.dumps(code),)


class _Pickler(cloudpickle.Pickler):
    """cloudpickle, except that code objects keep their file name (cloudpickle replaces it
    with ``<dynamic-code>``, and the frontend reads a kernel's source through it)."""

    dispatch_table = ChainMap({types.CodeType: _whole_code}, cloudpickle.Pickler.dispatch_table)


class _Helper:
    """The clean helper process and the two pipes to it."""

    def __init__(self):
        # a session of its own: a Ctrl-C at the terminal reaches the caller, which ends the
        # children; the helper ends them too when the caller's end of the pipe closes
        self.proc = subprocess.Popen([sys.executable, "-c", _BOOT, json.dumps(sys.path)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     start_new_session=True)
        self.buffer = b""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, *words) -> None:
        try:
            self.proc.stdin.write((" ".join(map(str, words)) + "\n").encode())
            self.proc.stdin.flush()
        except OSError:  # it ended; the caller notices through alive()
            pass

    def replies(self, wait: float) -> list[list[str]]:
        """The lines the helper wrote, waiting at most ``wait`` seconds for the first."""
        fd = self.proc.stdout.fileno()
        if b"\n" not in self.buffer and select.select([fd], [], [], max(wait, 0))[0]:
            data = os.read(fd, 65536)
            if not data:
                self.proc.wait()
            self.buffer += data
        *lines, self.buffer = self.buffer.split(b"\n")
        return [line.decode().split() for line in lines if line]


_HELPER: _Helper | None = None
_LOCK = threading.Lock()
_ids = itertools.count(1)


def _helper() -> _Helper:
    global _HELPER
    if _HELPER is None or not _HELPER.alive():
        _HELPER = _Helper()
    return _HELPER


@dataclass
class _Job:
    index: int
    result: Path
    started: float = 0.0
    killed: bool = False


def _outcome(job: _Job, code: int, limits: Limits):
    if job.killed and code == -signal.SIGKILL:
        return Failed(f"timed out after {limits.timeout:g} s")
    if code < 0:
        return Failed(f"killed by {signal.Signals(-code).name}")
    if code > 0:
        return Failed(f"exited with status {code}")
    try:
        kind, value = pickle.loads(job.result.read_bytes())
    except FileNotFoundError:
        return Failed("exited without a result")
    except Exception as exc:  # noqa: BLE001 - a result this process cannot load
        return Failed(f"its result could not be read: {type(exc).__name__}: {exc}")
    if kind == "ok":
        return value
    return Failed(memory_reason(value, limits))


def _write_job(path: str, context: dict, step: tuple) -> None:
    with open(path, "wb") as f:
        pickle.dump(context, f)
        try:
            _Pickler(f).dump(step)
        except Exception as exc:
            raise ConfigError(f"cannot send {getattr(step[0], '__name__', step[0])} and its "
                              f"arguments (the kernel factory, reference, supply ...) to the "
                              f"process that runs it: {type(exc).__name__}: {exc}") from exc


def run(steps: list[tuple[Callable, tuple]], limits: Limits, workers: int = 1,
        done: Callable[[int, object], None] | None = None) -> list:
    """Run each ``fn(*args)`` of ``steps`` in its own child, ``workers`` at a time; returns
    their results in order, a :class:`Failed` for each step that returned none. ``done(i,
    result)`` is called as each finishes."""
    results: list = [None] * len(steps)
    context = {"sys_path": list(sys.path), "cwd": os.getcwd(), "env": dict(os.environ)}
    with _LOCK, tempfile.TemporaryDirectory(prefix="tilewright-tune-") as folder:
        helper, pending, running = _helper(), list(range(len(steps))), {}

        def finish(job_id: str, result) -> None:
            job = running.pop(job_id)
            results[job.index] = result
            if done is not None:
                done(job.index, result)

        try:
            while pending or running:
                while pending and len(running) < max(1, workers):
                    index = pending.pop(0)
                    job_id, path = str(next(_ids)), Path(folder) / str(index)
                    _write_job(f"{path}.job", context, steps[index])
                    running[job_id] = _Job(index, Path(f"{path}.out"))
                    helper.send("run", job_id, f"{path}.job", f"{path}.out", limits.memory or 0)
                now = time.monotonic()
                deadlines = [j.started + limits.timeout - now for j in running.values()
                             if j.started and not j.killed and limits.timeout]
                for reply in helper.replies(min([1.0, *deadlines])):
                    kind, job_id, value = reply
                    if kind == "started" and job_id in running:
                        running[job_id].started = now
                    elif kind == "exited" and job_id in running:
                        finish(job_id, _outcome(running[job_id], int(value), limits))
                for job_id, job in running.items():
                    late = job.started and limits.timeout and \
                        time.monotonic() - job.started > limits.timeout
                    if late and not job.killed:
                        job.killed = True
                        helper.send("kill", job_id)
                if not helper.alive():
                    code = helper.proc.returncode
                    for job_id in list(running):
                        finish(job_id, Failed(f"the tuning helper process ended (exit status "
                                              f"{code}) while it ran"))
                    helper = _helper()
        except BaseException:
            for job_id in running:  # an interrupted search leaves no child behind
                helper.send("kill", job_id)
            raise
    return results
