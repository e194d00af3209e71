"""IR Lower Trace: the IR before and after every pass of every compilation, plus the codegen
step, as raw ``.tir`` dumps, a terminal diff and/or a self-contained HTML report.

Switched on by ``TILEWRIGHT_LOWER_TRACE`` (``1``/``html``, ``terminal``, ``both``; read when
``tilewright`` is imported) or :func:`enable`; off by default, when nothing listens to the
engine's events and tracing costs nothing. It only listens to engine events, so it sees the
passes of whichever backend compiles. Output layout, under ``TILEWRIGHT_LOWER_TRACE_DIR``
(default ``./tmp/lower_trace_dir``)::

    <dir>/<script>/report.html               link to (or copy of) the latest run's report
    <dir>/<script>/index.html                every compilation of the latest script run: its
                                             kernel, backend, outcome and report
    <dir>/<script>/codegen.<ext>             generated source; edit it and re-run
    <dir>/<script>/codegen.<ext>.original    baseline of the edit-and-recompile workflow
    <dir>/<script>/codegen.<ext>.latest      the latest codegen output
    <dir>/<script>/.run_records/run_<time>_<pid>_<id>/
        report.html, <phase>/NN_<Pass>_before.tir / _after.tir,
        codegen/NN_codegen_before.tir / _after.<ext>, unscoped/ (passes outside the backend's
        phases, such as those TVM runs inside codegen)

Every compilation is its own session; the report is appended to after every pass, so a crash
leaves what ran.
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
import sys
import threading
import time
import uuid
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

import tvm
import tvm_ffi

from ..engine import events
from ..errors import ConfigError
from . import trace_html
from .pages import render_page

ENV_MODE = "TILEWRIGHT_LOWER_TRACE"
ENV_DIR = "TILEWRIGHT_LOWER_TRACE_DIR"
DEFAULT_DIR = "./tmp/lower_trace_dir"
MODES = ("html", "terminal", "both")
CODEGEN_LINES = 40  # lines of generated source the terminal shows
_OFF = ("", "0", "false", "no", "off")
_ON = ("1", "true", "yes", "on", "html")

# codegen-file decisions of the edit-and-recompile workflow
INIT, UNCHANGED, UPDATED = "INIT", "UNCHANGED", "UPDATED"
PATCHED, SYNCED, CONFLICT, INIT_BACKUP = "PATCHED", "SYNCED", "CONFLICT", "INIT-BACKUP"


def parse_mode(value) -> str | None:
    """``None`` (off) or one of :data:`MODES`; anything else is a ConfigError."""
    if value is None or value is False:
        return None
    if value is True:
        return "html"
    text = str(value).strip().lower()
    if text in _OFF:
        return None
    if text in _ON:
        return "html"
    if text in MODES:
        return text
    raise ConfigError(f"unknown lower trace mode {value!r}; valid modes: html (or 1/on/true/yes),"
                      f" terminal, both, or 0/off to disable")


@dataclass
class Record:
    """One step of a trace: a pass, or the codegen step."""

    phase: str
    name: str
    index: int
    before_text: str
    after_text: str
    changed: bool
    add_lines: int
    del_lines: int
    status: str  # changed | noop | failed | codegen
    error_msg: str = ""
    depth: int = 0
    parent: str = ""
    seconds: float = 0.0
    after_ext: str = "tir"
    opcodes: list = field(default_factory=list, repr=False)


def diff_stats(before: str, after: str) -> tuple[int, int, list]:
    """(insertions, deletions, opcodes) of a line diff."""
    if before == after:
        return 0, 0, []
    a, b = before.splitlines(), after.splitlines()
    opcodes = difflib.SequenceMatcher(None, a, b, autojunk=len(a) > 2000).get_opcodes()
    add = sum(j2 - j1 for tag, _, _, j1, j2 in opcodes if tag in ("insert", "replace"))
    dele = sum(i2 - i1 for tag, i1, i2, _, _ in opcodes if tag in ("delete", "replace"))
    return add, dele, [list(op) for op in opcodes]


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "pass"


def script_name() -> str:
    """The running script's name without extension (``kernel`` when there is none)."""
    argv0 = sys.argv[0] if sys.argv and sys.argv[0] not in ("", "-c", "-m") else ""
    stem = _safe(Path(argv0).stem).strip(".")  # a script named '...py' is no way out
    return stem or "kernel"


class _Texts:
    """Printed modules, reusing the text when the module is the same object or structurally
    equal to one already printed (most passes leave most modules alone)."""

    def __init__(self):
        self._last = None
        self._last_text = ""
        self._by_hash: dict = {}

    def __call__(self, mod) -> str:
        if mod is None:
            return ""
        if self._last is not None and mod.same_as(self._last):
            return self._last_text
        key = tvm_ffi.structural_hash(mod)
        text = self._by_hash.get(key)
        if text is None:
            text = self._by_hash[key] = mod.script()
        self._last, self._last_text = mod, text
        return text


@dataclass(frozen=True)
class Config:
    mode: str
    trace_dir: str
    codegen_output: str | None = None

    @property
    def html(self) -> bool:
        return self.mode in ("html", "both")

    @property
    def terminal(self) -> bool:
        return self.mode in ("terminal", "both")


_warned_io = False
_lock = threading.Lock()
_ordinal = {"n": 0}
_index: dict[Path, list[dict]] = {}  # script folder -> this process's finished sessions


def _warn_io(exc: Exception) -> None:
    global _warned_io
    if not _warned_io:
        _warned_io = True
        warnings.warn(f"lower trace: cannot write the trace ({exc}); compilation goes on "
                      "without the files", RuntimeWarning, stacklevel=3)


class Printer:
    """Terminal output of a trace."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stdout
        self.color = getattr(self.stream, "isatty", lambda: False)() and \
            not os.environ.get("NO_COLOR")

    def _c(self, code: str, text: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.color else text

    def record(self, rec: Record) -> None:
        mark = {"changed": "*", "noop": "o", "failed": "x", "codegen": "#"}[rec.status]
        head = f"[lower_trace] {mark} {rec.index:02d} {rec.phase}/{rec.name}" \
               f"  +{rec.add_lines} -{rec.del_lines}"
        print(self._c("1", head), file=self.stream)
        if rec.status == "failed":
            print(self._c("31", f"[FAILED] {rec.name}: {rec.error_msg}"), file=self.stream)
            print("IR before the failing pass:", file=self.stream)
            print(rec.before_text, file=self.stream)
            return
        if rec.status == "codegen":
            lines = rec.after_text.splitlines()
            print("\n".join(lines[:CODEGEN_LINES]), file=self.stream)
            if len(lines) > CODEGEN_LINES:
                print(f"... ({len(lines) - CODEGEN_LINES} more lines of generated source)",
                      file=self.stream)
            return
        if not rec.changed:
            return
        diff = difflib.unified_diff(rec.before_text.splitlines(), rec.after_text.splitlines(),
                                    "before", "after", lineterm="", n=2)
        for line in diff:
            if line.startswith("+") and not line.startswith("+++"):
                line = self._c("32", line)
            elif line.startswith("-") and not line.startswith("---"):
                line = self._c("31", line)
            elif line.startswith("@@"):
                line = self._c("36", line)
            print(line, file=self.stream)


class HtmlWriter:
    """Appends records to a self-contained report (see :mod:`.trace_html`)."""

    def __init__(self, path: Path, title: str, meta: dict):
        self.path = path
        self.texts: dict[str, int] = {}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(trace_html.header(title, meta), encoding="utf-8")

    def _text_id(self, text: str, new: dict) -> int:
        tid = self.texts.get(text)
        if tid is None:
            tid = self.texts[text] = len(self.texts)
            new[tid] = text
        return tid

    def add(self, rec: Record) -> None:
        new: dict = {}
        data = {k: v for k, v in asdict(rec).items() if k not in ("before_text", "after_text")}
        data["before"] = self._text_id(rec.before_text, new)
        data["after"] = self._text_id(rec.after_text, new)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(trace_html.record_block(data, new))

    def close(self, summary: dict) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(trace_html.end_block(summary))


class TraceSession:
    """The trace of one compilation."""

    def __init__(self, config: Config, session: int, info: dict):
        self.config = config
        self.session = session
        self.info = info
        self.records: list[Record] = []
        self.stack: list[dict] = []
        self.texts = _Texts()
        self.printer = Printer() if config.terminal else None
        self.run_dir: Path | None = None
        self.html: HtmlWriter | None = None
        self.io_ok = True
        self.patched: str | None = None
        self.codegen_status = ""
        with _lock:
            _ordinal["n"] += 1
            self.ordinal = _ordinal["n"]
        self.script_dir = Path(config.trace_dir) / script_name()

    # -- files ------------------------------------------------------------------------
    def _io(self, fn, *args):
        if not self.io_ok:
            return None
        try:
            return fn(*args)
        except OSError as exc:
            self.io_ok = False
            _warn_io(exc)
            return None

    def _ensure_run_dir(self) -> Path:
        if self.run_dir is None:
            stamp = time.strftime("%Y%m%d_%H%M%S") + f"_{int(time.time() * 1e6) % 1000000:06d}"
            run = self.script_dir / ".run_records" / \
                f"run_{stamp}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
            run.mkdir(parents=True, exist_ok=True)
            self.run_dir = run
            if self.config.html:
                meta = {k: str(v) for k, v in self.info.items() if k in ("target", "backend",
                                                                            "name")}
                meta["script"] = script_name()
                self.html = HtmlWriter(run / "report.html",
                                       f"lower trace: {meta.get('name', '')}", meta)
                self._link()
        return self.run_dir

    def _link(self) -> None:
        link = self.script_dir / "report.html"
        target = self.run_dir / "report.html"
        tmp = self.script_dir / f".report.{os.getpid()}.tmp"
        try:
            if tmp.is_symlink() or tmp.exists():
                tmp.unlink()
            os.symlink(os.path.relpath(target, self.script_dir), tmp)
            os.replace(tmp, link)
            self.link_is_copy = False
        except (OSError, NotImplementedError):
            shutil.copyfile(target, link)
            self.link_is_copy = True

    def _save(self, rec: Record) -> None:
        run = self._ensure_run_dir()
        folder = run / _safe(rec.phase)
        folder.mkdir(exist_ok=True)
        stem = f"{rec.index:02d}_{_safe(rec.name)}"
        (folder / f"{stem}_before.tir").write_text(rec.before_text)
        if rec.status != "failed":
            (folder / f"{stem}_after.{rec.after_ext}").write_text(rec.after_text)
        else:
            (folder / f"{stem}_error.txt").write_text(rec.error_msg)
        if self.html is not None:
            self.html.add(rec)

    def _add(self, rec: Record) -> None:
        self.records.append(rec)
        self._io(self._save, rec)
        if self.printer is not None:
            self.printer.record(rec)

    # -- events -----------------------------------------------------------------------
    @staticmethod
    def _phase(phase: str) -> str:
        # passes TVM runs inside a backend's codegen belong to no phase of its pipeline
        return "unscoped" if phase in ("", "codegen") else phase

    def pass_start(self, data: dict) -> None:
        if self.stack:
            self.stack[-1]["children"] += 1
        self.stack.append({"name": data["name"], "phase": self._phase(data.get("phase", "")),
                           "before": self.texts(data.get("mod")), "start": time.perf_counter(),
                           "children": 0})

    def pass_end(self, data: dict) -> None:
        if not self.stack:
            return
        frame = self.stack.pop()
        if frame["children"]:
            return  # a pass wrapping others (Sequential): its inner passes are the records
        after = self.texts(data.get("mod"))
        add, dele, ops = diff_stats(frame["before"], after)
        self._add(Record(frame["phase"], frame["name"], len(self.records), frame["before"],
                         after, add + dele > 0 or frame["before"] != after, add, dele,
                         "changed" if frame["before"] != after else "noop",
                         depth=len(self.stack),
                         parent=self.stack[-1]["name"] if self.stack else "",
                         seconds=time.perf_counter() - frame["start"], opcodes=ops))

    def codegen(self, event) -> None:
        data = event.data
        before = self.texts(data.get("mod"))
        text, ext = data["text"], data.get("file_ext", "txt")
        self.patched = self._io(self._codegen_files, text, ext)
        shown = self.patched if self.patched is not None else text
        self._add(Record("codegen", "codegen", len(self.records), before, shown, True,
                         len(shown.splitlines()), len(before.splitlines()), "codegen",
                         after_ext=ext))
        if self.patched is not None:
            event.data["patched_text"] = self.patched

    def build(self, data: dict) -> None:
        if self.patched is None or data.get("from_source"):
            return
        others = data.get("source_executors") or []
        would = (f"execution_backend={others[0]!r} compiles it" if others else
                 f"backend '{self.info.get('backend')}' has no executor that compiles source")
        print(f"[lower_trace] NOTE: executor '{data.get('executor')}' builds from the compiled "
              f"module, not from source text: your edit of {self._codegen_path(None)} is in the "
              f"trace but was not compiled; {would}.", file=sys.stderr)

    def fail(self, data: dict) -> None:
        exc = data.get("error")
        msg = f"{type(exc).__name__}: {exc}" if exc is not None else "failed"
        if self.stack:
            frame = self.stack[-1]
            self.stack.clear()
            self._add(Record(frame["phase"], frame["name"], len(self.records), frame["before"],
                             "", True, 0, 0, "failed", error_msg=msg))
        elif data.get("phase") == "codegen":
            self._add(Record("codegen", "codegen", len(self.records), "", "", True, 0, 0,
                             "failed", error_msg=msg))
        self.finish(ok=False)

    def finish(self, ok: bool = True) -> None:
        if self.html is not None:
            summary = {"ok": ok, "records": len(self.records), "codegen": self.codegen_status}
            self._io(self.html.close, summary)
            if getattr(self, "link_is_copy", False):
                self._io(shutil.copyfile, self.html.path, self.script_dir / "report.html")
            entry = {"n": self.ordinal, "kernel": str(self.info.get("name", "")),
                     "backend": str(self.info.get("backend", "")),
                     "target": str(self.info.get("target", "")), "ok": ok,
                     "passes": len(self.records), "codegen": self.codegen_status,
                     "codegen_file": os.path.relpath(self._codegen_path(None), self.script_dir)
                     if self.codegen_status else "",
                     "report": os.path.relpath(self.html.path, self.script_dir)}
            with _lock:
                entries = _index.setdefault(self.script_dir, [])
                entries.append(entry)
                self._io(write_index, self.script_dir, sorted(entries, key=lambda e: e["n"]))
            print(f"[lower_trace] report: {self.html.path} (every kernel: "
                  f"{self.script_dir / 'index.html'})", file=sys.stderr)

    # -- edit and recompile -----------------------------------------------------------
    def _codegen_path(self, ext: str | None) -> Path:
        if self.config.codegen_output:
            path = Path(self.config.codegen_output)
        else:
            suffix = "" if self.ordinal == 1 else f"_{self.ordinal}"
            path = self.script_dir / f"codegen{suffix}.{ext or self.info.get('_ext', 'txt')}"
        return path

    def _codegen_files(self, text: str, ext: str) -> str | None:
        """Write the three codegen files; returns the edited source when it must be used."""
        self.info["_ext"] = ext
        working = self._codegen_path(ext)
        working.parent.mkdir(parents=True, exist_ok=True)
        original = working.with_name(working.name + ".original")
        latest = working.with_name(working.name + ".latest")
        with _lock:
            status, use = self._decide(working, original, text)
            latest.write_text(text)
        self.codegen_status = status
        if status in (PATCHED, SYNCED, CONFLICT, INIT_BACKUP):
            detail = {
                PATCHED: f"PATCHED from {working}: compiling your edited source",
                SYNCED: f"SYNCED: the new codegen output equals your edit of {working}",
                CONFLICT: f"CONFLICT: both the codegen output and {working} changed; your edit "
                          f"is in {working.name}.bak, the old baseline in "
                          f"{original.name}.bak (diff them to recover it)",
                INIT_BACKUP: f"INIT-BACKUP: an existing {working} was saved to "
                             f"{working.name}.bak before tracing took it over",
            }[status]
            print(f"[lower_trace] {detail}", file=sys.stderr)
        return use

    @staticmethod
    def _decide(working: Path, original: Path, new: str) -> tuple[str, str | None]:
        def reset():
            working.write_text(new)
            original.write_text(new)

        if not working.exists():
            reset()
            return INIT, None
        edit = working.read_text()
        if not original.exists():
            if edit != new:
                shutil.copyfile(working, working.with_name(working.name + ".bak"))
                reset()
                return INIT_BACKUP, None
            original.write_text(new)
            return INIT, None
        base = original.read_text()
        if edit == base:
            if base == new:
                return UNCHANGED, None
            reset()
            return UPDATED, None
        if base == new:
            return PATCHED, edit
        if edit == new:
            original.write_text(new)
            return SYNCED, None
        shutil.copyfile(working, working.with_name(working.name + ".bak"))
        shutil.copyfile(original, original.with_name(original.name + ".bak"))
        reset()
        return CONFLICT, None


class _Tracer:
    """The engine-event listener: one :class:`TraceSession` per compilation."""

    def __init__(self, config: Config):
        self.config = config
        self.sessions: dict[int, TraceSession] = {}
        self.finished: list[TraceSession] = []

    def __call__(self, event) -> None:
        try:
            self._dispatch(event)
        except Exception as exc:  # noqa: BLE001 - a tracing bug must not fail compilation
            warnings.warn(f"lower trace: {type(exc).__name__}: {exc}", RuntimeWarning,
                          stacklevel=2)

    def _dispatch(self, event) -> None:
        kind, sid = event.kind, event.session
        if kind == "session_start":
            self.sessions[sid] = TraceSession(self.config, sid, dict(event.data))
            return
        session = self.sessions.get(sid)
        if session is None:
            return
        if kind == "pass_start":
            session.pass_start(event.data)
        elif kind == "pass_end":
            session.pass_end(event.data)
        elif kind == "codegen":
            session.codegen(event)
        elif kind == "build":
            session.build(event.data)
        elif kind == "session_end":
            del self.sessions[sid]
            if event.data.get("ok", True):
                session.finish(True)
            else:
                session.fail(event.data)
            self.finished = (self.finished + [session])[-16:]


_active: _Tracer | None = None


def enable(mode=None, trace_dir=None, codegen_output=None) -> Config:
    """Trace every later compilation of this process. Arguments left out come from
    ``TILEWRIGHT_LOWER_TRACE`` / ``TILEWRIGHT_LOWER_TRACE_DIR`` (mode ``html`` when that is
    unset too). Calling it again replaces the settings; compilations already running keep
    theirs."""
    global _active
    if mode is None:
        mode = parse_mode(os.environ.get(ENV_MODE)) or "html"
    else:
        mode = parse_mode(mode)
        if mode is None:
            disable()
            return None
    config = Config(mode, str(trace_dir or os.environ.get(ENV_DIR) or DEFAULT_DIR),
                    str(codegen_output) if codegen_output else None)
    disable()
    with _lock:
        _ordinal["n"] = 0  # codegen.<ext> is the first kernel compiled after enable()
    _active = _Tracer(config)
    events.subscribe(_active)
    return config


def disable() -> None:
    """Stop tracing later compilations."""
    global _active
    if _active is not None:
        events.unsubscribe(_active)
        _active = None


def is_enabled() -> bool:
    return _active is not None


def last_sessions() -> list[TraceSession]:
    """The most recent finished traces of this process (newest last)."""
    return list(_active.finished) if _active is not None else []


def enable_from_env() -> None:
    """Called when ``tilewright`` is imported."""
    mode = parse_mode(os.environ.get(ENV_MODE))
    if mode is not None:
        enable(mode)


# -- the one-shot API ----------------------------------------------------------------------
def _named(passes) -> list:
    if not isinstance(passes, (list, tuple)):
        passes = [passes]
    named = []
    for item in passes:
        if isinstance(item, tuple) and len(item) == 2:
            named.append((str(item[0]), item[1]))
        elif callable(item):
            info = getattr(item, "info", None)
            name = getattr(info, "name", None) or getattr(item, "__name__", type(item).__name__)
            named.append((str(name), item))
        else:
            raise ConfigError(f"lower_trace: {item!r} is not a pass or a (name, pass) pair")
    return named


def lower_trace(func, passes, mode: str = "terminal", html_path=None) -> list[dict]:
    """Run ``passes`` (a pass, a list of passes, or of ``(name, pass)`` pairs) on ``func`` (a
    PrimFunc or IRModule) and report each step. Returns one dict per step with ``name``,
    ``before_script``, ``after_script``, ``diff_lines``, ``insertions``, ``deletions``,
    ``changed``. A failing pass is recorded with its input IR, shown, then re-raised."""
    mode = parse_mode(mode)
    if mode is None:
        raise ConfigError("lower_trace: mode must be html, terminal or both")
    mod = func if isinstance(func, tvm.IRModule) else tvm.IRModule({"main": func})
    printer = Printer() if mode in ("terminal", "both") else None
    writer = None
    if mode in ("html", "both"):
        path = Path(html_path) if html_path else \
            Path(os.environ.get(ENV_DIR) or DEFAULT_DIR) / script_name() / "lower_trace.html"
        try:
            writer = HtmlWriter(path, "lower_trace", {"script": script_name()})
        except OSError as exc:
            _warn_io(exc)
    texts = _Texts()
    results, ok = [], True
    try:
        for index, (name, p) in enumerate(_named(passes)):
            before = texts(mod)
            start = time.perf_counter()
            try:
                mod = p(mod)
            except Exception as exc:
                ok = False
                rec = Record("lower_trace", name, index, before, "", True, 0, 0, "failed",
                             error_msg=f"{type(exc).__name__}: {exc}")
                results.append({"name": name, "before_script": before, "after_script": None,
                                "diff_lines": [], "insertions": 0, "deletions": 0,
                                "changed": False, "error": rec.error_msg})
                _emit(rec, printer, writer)
                raise
            after = texts(mod)
            add, dele, ops = diff_stats(before, after)
            rec = Record("lower_trace", name, index, before, after, before != after, add, dele,
                         "changed" if before != after else "noop",
                         seconds=time.perf_counter() - start, opcodes=ops)
            results.append({
                "name": name, "before_script": before, "after_script": after,
                "diff_lines": list(difflib.unified_diff(before.splitlines(),
                                                        after.splitlines(), "before", "after",
                                                        lineterm="")),
                "insertions": add, "deletions": dele, "changed": before != after,
            })
            _emit(rec, printer, writer)
    finally:
        if writer is not None:  # best effort: a report that cannot be written is not the error
            try:
                writer.close({"ok": ok, "records": len(results)})
            except OSError as exc:
                _warn_io(exc)
    return results


def _emit(rec: Record, printer, writer) -> None:
    if printer is not None:
        printer.record(rec)
    if writer is not None:
        try:
            writer.add(rec)
        except OSError as exc:
            _warn_io(exc)


__all__ = ["DEFAULT_DIR", "ENV_DIR", "ENV_MODE", "MODES", "Record", "TraceSession", "disable",
           "enable", "is_enabled", "last_sessions", "lower_trace", "parse_mode"]


def write_index(script_dir: Path, entries: list[dict]) -> Path:
    """``<script>/index.html``: one row per compilation (kernel, backend, target, outcome,
    passes traced, its codegen file and what tracing did with it) linking to its report."""
    page = render_page("lower_trace_index.html.j2", entries=entries,
                       title=f"lower trace: {script_dir.name}")
    path = script_dir / "index.html"
    path.write_text(page)
    return path
