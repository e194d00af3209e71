"""The clean helper process of :mod:`.isolation`: it imports torch, TVM, tilewright and the
plugins once, never runs a kernel nor touches a device, and forks one child per step.

Its protocol, one line per message: the caller writes ``run ID JOB RESULT MEMORY`` (files of
the step and of its result, the memory limit in bytes, 0 for none) and ``kill ID``; the helper
answers ``started ID PID`` and ``exited ID CODE`` (a negative code is the signal that ended the
child). Each child is the leader of its own process group, which ``kill`` ends with SIGKILL.
When the caller's end of the pipe closes, the helper kills its children and ends. What steps
print goes to stderr, never into the answers.
"""

from __future__ import annotations

import os
import pickle
import resource
import select
import signal
import sys
from pathlib import Path

from ..plugin import get_manager, set_manager
from ..plugin.guard import describe


def serve() -> None:
    """The helper's main loop (``python -c``, from :mod:`.isolation`)."""
    commands, replies = os.dup(0), os.dup(1)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    os.dup2(2, 1)
    for name in ("torch", "tilewright.jit"):
        try:
            __import__(name)
        except ImportError:
            pass
    try:
        get_manager().load()
    except Exception:  # noqa: BLE001 - each child meets the same error and reports it
        pass
    selection = os.environ.get("TILEWRIGHT_PLUGINS")
    children: dict[int, str] = {}
    buffer = b""
    while True:
        if select.select([commands], [], [], 0.05)[0]:
            data = os.read(commands, 65536)
            if not data:
                for pid in children:
                    _kill(pid)
                os._exit(0)
            buffer += data
            *lines, buffer = buffer.split(b"\n")
            for words in (line.decode().split() for line in lines):
                if words and words[0] == "run":
                    pid = _fork(commands, replies, *words[2:], selection)
                    children[pid] = words[1]
                    os.write(replies, f"started {words[1]} {pid}\n".encode())
                elif words and words[0] == "kill":
                    for pid in [p for p, j in children.items() if j == words[1]]:
                        _kill(pid)
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            code = os.waitstatus_to_exitcode(status)
            os.write(replies, f"exited {children.pop(pid)} {code}\n".encode())


def _fork(commands: int, replies: int, job: str, result: str, memory: str,
          selection: str | None) -> int:
    pid = os.fork()
    if pid == 0:  # the child never returns into the helper's loop
        code = 70
        try:
            os.close(commands)
            os.close(replies)
            _child(job, result, int(memory), selection)
            code = 0
        finally:
            os._exit(code)
    try:
        os.setpgid(pid, pid)  # the child does it too; whichever runs first wins
    except OSError:
        pass
    return pid


def _kill(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def _child(job: str, result: str, memory: int, selection: str | None) -> None:
    """A forked child: load the step, run it under the memory limit, write its result."""
    try:
        os.setpgid(0, 0)
        with open(job, "rb") as f:
            context = pickle.load(f)
            sys.path[:] = context["sys_path"]
            os.chdir(context["cwd"])
            os.environ.clear()
            os.environ.update(context["env"])
            if os.environ.get("TILEWRIGHT_PLUGINS") != selection:
                set_manager(None)  # the caller selects other plugins than the helper loaded
            fn, args = pickle.load(f)
        limit = resource.getrlimit(resource.RLIMIT_DATA)
        if memory:
            resource.setrlimit(resource.RLIMIT_DATA, (_data_size() + memory, limit[1]))
        try:
            value = ("ok", fn(*args))
        finally:
            resource.setrlimit(resource.RLIMIT_DATA, limit)
    except BaseException as exc:  # noqa: BLE001 - every way a step ends is reported
        value = ("error", describe(exc))
    try:
        data = pickle.dumps(value)
    except Exception as exc:  # noqa: BLE001
        data = pickle.dumps(("error", f"the result cannot be pickled: {exc}"))
    Path(result + ".tmp").write_bytes(data)
    os.replace(result + ".tmp", result)


def _data_size() -> int:
    """This process's data size (``VmData``) in bytes: what ``RLIMIT_DATA`` counts."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmData:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
