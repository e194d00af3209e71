"""The AutoDD search (see the package docstring)."""

from __future__ import annotations

import argparse
import ast
import copy
import hashlib
import os
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


class DeltaDebugger:
    """Shrinks ``source`` while ``message`` appears in the output of running it."""

    def __init__(self, source: str, message: str, timeout: float = 60.0,
                 python: str = sys.executable, filename: str = "candidate.py",
                 max_seconds: float | None = None, verbose: bool = False):
        self.tree = ast.parse(source)
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
        try:
            proc = subprocess.run([self.python, "-c", _RUNNER, str(path)], capture_output=True,
                                  text=True, timeout=self.timeout, cwd=self._tmp.name,
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
             verbose: bool = False) -> Result:
    """Minimise the program in ``path``; see :class:`DeltaDebugger`."""
    path = Path(path)
    return DeltaDebugger(path.read_text(), message, timeout, filename=path.name,
                         max_seconds=max_seconds, verbose=verbose).run()


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
    parser.add_argument("-v", "--verbose", action="store_true")
    ns = parser.parse_args(argv)
    path = Path(ns.file)
    if not path.is_file():
        print(f"autodd: no such file: {path}", file=sys.stderr)
        return 2
    try:
        result = minimize(path, ns.err_msg, ns.timeout, ns.max_time, ns.verbose)
    except SyntaxError as exc:
        print(f"autodd: {path} is not valid Python: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"autodd: {exc}", file=sys.stderr)
        return 1
    out = Path(ns.output) if ns.output else path.with_suffix(".min.py")
    out.write_text(result.source)
    print(f"autodd: {result.lines_before} -> {result.lines_after} lines, {result.candidates} "
          f"candidates, {result.seconds:.1f} s -> {out}")
    return 0
