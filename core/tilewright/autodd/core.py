"""The AutoDD search (see the package docstring)."""

from __future__ import annotations

import argparse
import ast
import builtins
import contextlib
import copy
import hashlib
import importlib
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

FREEZE = "__freeze__"
# runs a candidate with __freeze__ defined, as the script itself (__main__, argv[0])
_RUNNER = ("import builtins, contextlib, runpy, sys; builtins.__freeze__ = "
           "contextlib.nullcontext(); sys.argv = [sys.argv[1]] + sys.argv[2:]; "
           "runpy.run_path(sys.argv[0], run_name='__main__')")


# what a written result starts with when it keeps ``with __freeze__:`` blocks, so that it runs
# with plain ``python``
FREEZE_DEFINITION = (f"{FREEZE} = __import__('contextlib').nullcontext()  # AutoDD's marker of "
                     "blocks kept as written")


def runnable(source: str) -> str:
    """``source`` with ``__freeze__`` defined where it uses the marker (after a docstring and
    ``from __future__`` imports), so that the file runs with plain ``python``."""
    tree = ast.parse(source)
    if not any(isinstance(n, ast.Name) and n.id == FREEZE for n in ast.walk(tree)):
        return source
    at = 0
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__" or \
                at == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) \
                and isinstance(node.value.value, str):
            at = node.end_lineno
        else:
            break
    lines = source.splitlines(keepends=True)
    return "".join(lines[:at]) + FREEZE_DEFINITION + "\n" + "".join(lines[at:])


@dataclass
class Result:
    source: str
    lines_before: int
    lines_after: int
    candidates: int
    seconds: float


def _is_freeze(node) -> bool:
    return isinstance(node, ast.With) and any(
        isinstance(item.context_expr, ast.Name) and item.context_expr.id == FREEZE
        for item in node.items)


def _bodies(tree) -> list[tuple]:
    """Every statement list outside ``__freeze__`` blocks, as (path) tuples, in a fixed
    pre-order; a path is a sequence of (field, index) steps from the module."""
    found = []

    def walk(node, path):
        for field in ("body", "orelse", "finalbody", "handlers"):
            stmts = getattr(node, field, None)
            if not isinstance(stmts, list) or not stmts or not isinstance(stmts[0], ast.AST):
                continue
            if field != "handlers":
                found.append(path + ((field, None),))
            for i, child in enumerate(stmts):
                if isinstance(child, (ast.stmt, ast.excepthandler)) and not _is_freeze(child):
                    walk(child, path + ((field, i),))

    walk(tree, ())
    return found


def _resolve(tree, path):
    node = tree
    for field, index in path:
        node = getattr(node, field)
        if index is not None:
            node = node[index]
    return node


def _preload(tree) -> None:
    """Import the program's top-level absolute imports in this process, before forking."""
    for node in tree.body:
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module] if isinstance(node, ast.ImportFrom) and node.module and \
            not node.level else []
        for name in names:
            with contextlib.suppress(Exception):
                importlib.import_module(name)


def _run_forked(path: Path, timeout: float) -> str:
    """Run ``path`` as ``__main__`` in a forked child; its stdout and stderr together ('' on
    timeout)."""
    out_path = path.with_suffix(".out")
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 1
        try:
            fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
            sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
            builtins.__freeze__ = contextlib.nullcontext()
            sys.argv = [str(path)]
            runpy.run_path(str(path), run_name="__main__")
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
            if not isinstance(exc.code, int) and exc.code is not None:
                print(exc.code, file=sys.stderr)
        except BaseException:  # noqa: BLE001 - the traceback is the output we search
            import traceback

            traceback.print_exc()
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)
    deadline = time.monotonic() + timeout
    while True:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return ""
        time.sleep(0.005)
    try:
        return out_path.read_text(errors="replace")
    except OSError:
        return ""


class DeltaDebugger:
    """Shrinks ``source`` while ``message`` appears in the output of running it."""

    def __init__(self, source: str, message: str, timeout: float = 60.0,
                 python: str = sys.executable, filename: str = "candidate.py",
                 max_seconds: float | None = None, verbose: bool = False, fork: bool = True):
        self.tree = ast.parse(source)
        # forking a process that already imported the program's modules (TVM, torch ...)
        # saves seconds per candidate; elsewhere each candidate is a fresh interpreter
        self.fork = fork and hasattr(os, "fork") and python == sys.executable
        if self.fork:
            _preload(self.tree)
        self.message = message
        self.timeout = timeout
        self.python = python
        self.filename = filename
        self.max_seconds = max_seconds
        self.verbose = verbose
        self.cache: dict[str, bool] = {}
        self.runs = 0
        self._tmp = tempfile.TemporaryDirectory(prefix="tw-autodd-")
        self._start = time.monotonic()

    # -- running candidates -------------------------------------------------------------
    def reproduces(self, source: str) -> bool:
        key = hashlib.sha256(source.encode()).hexdigest()
        if key not in self.cache:
            self.cache[key] = self._run(source)
        return self.cache[key]

    def _run(self, source: str) -> bool:
        self.runs += 1
        path = Path(self._tmp.name) / self.filename
        path.write_text(source)
        if self.fork:
            return self.message in _run_forked(path, self.timeout)
        try:
            proc = subprocess.run([self.python, "-c", _RUNNER, str(path)], check=False,
                                  capture_output=True, text=True, timeout=self.timeout,
                                  cwd=self._tmp.name,
                                  env={**os.environ, "PYTHONHASHSEED": "0"})
        except subprocess.TimeoutExpired:
            return False
        return self.message in proc.stdout or self.message in proc.stderr

    def _out_of_time(self) -> bool:
        return self.max_seconds is not None and \
            time.monotonic() - self._start > self.max_seconds

    # -- the search ---------------------------------------------------------------------
    def _try(self, tree) -> bool:
        try:
            source = ast.unparse(ast.fix_missing_locations(tree))
            compile(source, self.filename, "exec")
        except (SyntaxError, ValueError):
            return False
        ok = self.reproduces(source)
        if ok:
            self.tree = tree
            if self.verbose:
                print(f"autodd: {len(source.splitlines())} lines", file=sys.stderr)
        return ok

    def _shrink_list(self, path) -> bool:
        """ddmin over one statement list: remove chunks, halving their size."""
        progress = False
        stmts = _resolve(self.tree, path[:-1])
        field = path[-1][0]
        n = len(getattr(stmts, field))
        chunk = max(1, n // 2)
        while chunk >= 1 and not self._out_of_time():
            start = 0
            while start < len(getattr(_resolve(self.tree, path[:-1]), field)):
                current = getattr(_resolve(self.tree, path[:-1]), field)
                keep = [s for i, s in enumerate(current) if not start <= i < start + chunk
                        or _is_freeze(s)]
                if len(keep) == len(current):
                    start += chunk
                    continue
                candidate = copy.deepcopy(self.tree)
                owner = _resolve(candidate, path[:-1])
                new = [copy.deepcopy(s) for s in keep]
                if not new and field in ("body",):
                    new = [ast.Pass()]
                setattr(owner, field, new)
                if self._try(candidate):
                    progress = True  # same start: the next statements moved up
                else:
                    start += chunk
            chunk //= 2
        return progress

    def _unwrap(self) -> bool:
        """Replace compound statements (if, for, while, with, try) by their bodies."""
        progress = False
        for path in _bodies(self.tree):
            if self._out_of_time():
                break
            try:
                owner = _resolve(self.tree, path[:-1])
            except (IndexError, AttributeError):
                continue
            field = path[-1][0]
            stmts = getattr(owner, field, [])
            for i, stmt in enumerate(list(stmts)):
                if not isinstance(stmt, (ast.If, ast.For, ast.While, ast.With, ast.Try)) or \
                        _is_freeze(stmt):
                    continue
                candidate = copy.deepcopy(self.tree)
                c_owner = _resolve(candidate, path[:-1])
                c_stmts = getattr(c_owner, field)
                if i >= len(c_stmts):
                    break
                body = copy.deepcopy(c_stmts[i].body)
                setattr(c_owner, field, c_stmts[:i] + body + c_stmts[i + 1:])
                if self._try(candidate):
                    return True
        return progress

    def run(self) -> Result:
        original = ast.unparse(self.tree)
        start = time.monotonic()
        if not self.reproduces(original):
            raise ValueError(f"the program does not print {self.message!r} (stdout or stderr)"
                             f" when run; nothing to minimise")
        progress = True
        while progress and not self._out_of_time():
            progress = False
            for path in _bodies(self.tree):
                try:
                    _resolve(self.tree, path[:-1])
                except (IndexError, AttributeError):
                    continue
                if self._shrink_list(path):
                    progress = True
                    break  # paths moved: recompute them
            if not progress:
                progress = self._unwrap()
        source = ast.unparse(self.tree) + "\n"
        return Result(source, len(original.splitlines()), len(source.splitlines()),
                      self.runs, time.monotonic() - start)


def minimize(path, message: str, timeout: float = 60.0, max_seconds: float | None = None,
             verbose: bool = False, fork: bool = True) -> Result:
    """Minimise the program in ``path``; see :class:`DeltaDebugger`."""
    path = Path(path)
    return DeltaDebugger(path.read_text(), message, timeout, filename=path.name,
                         max_seconds=max_seconds, verbose=verbose, fork=fork).run()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tilewright.autodd",
                                     description="Shrink a failing program while its error "
                                                 "message still appears.")
    parser.add_argument("file", help="the failing Python program")
    parser.add_argument("--err-msg", required=True,
                        help="text that must appear in stdout or stderr of every kept version")
    parser.add_argument("-o", "--output", default=None,
                        help="where to write the result (default: <file>.min.py)")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds one candidate may run (default 60)")
    parser.add_argument("--max-time", type=float, default=None,
                        help="stop searching after this many seconds, keeping the best so far")
    parser.add_argument("--no-fork", action="store_true",
                        help="run every candidate in a fresh interpreter (slower; use when the "
                             "program's imports do not survive fork)")
    parser.add_argument("-v", "--verbose", action="store_true")
    ns = parser.parse_args(argv)
    path = Path(ns.file)
    if not path.is_file():
        print(f"autodd: no such file: {path}", file=sys.stderr)
        return 2
    try:
        result = minimize(path, ns.err_msg, ns.timeout, ns.max_time, ns.verbose,
                          fork=not ns.no_fork)
    except SyntaxError as exc:
        print(f"autodd: {path} is not valid Python: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"autodd: {exc}", file=sys.stderr)
        return 1
    out = Path(ns.output) if ns.output else path.with_suffix(".min.py")
    out.write_text(runnable(result.source))
    print(f"autodd: {result.lines_before} -> {result.lines_after} lines, {result.candidates} "
          f"candidates, {result.seconds:.1f} s -> {out}")
    return 0
