"""``tilewright analyze script.py --arch NAME`` and ``tilewright bench script.py``.

Both run the script (as ``__main__``, with the arguments after ``--``) while recording
every kernel it compiles and the arguments of the last call of each. ``analyze`` prints the
static roofline analysis of each kernel (and draws the chart with ``--plot``); ``bench``
times each kernel again with ``do_bench`` on its last arguments (random inputs for a kernel
that was compiled but never called) and shows where the time sits against the roofline.
"""

from __future__ import annotations

import contextlib
import json
import os
import runpy
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import TilewrightError


@dataclass
class Captured:
    kernel: object
    args: tuple | None = None
    calls: int = 0
    extra: dict = field(default_factory=dict)


@contextlib.contextmanager
def capture_kernels():
    """Record every :class:`~tilewright.jit.JITKernel` created inside the block, with the
    arguments of its last call. Yields the list of :class:`Captured` records."""
    from ..jit.kernel import JITKernel

    records: list[Captured] = []
    by_id: dict[int, Captured] = {}
    original_init, original_call = JITKernel.__init__, JITKernel.__call__

    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        by_id[id(self)] = record = Captured(self)
        records.append(record)

    def call(self, *args):
        record = by_id.get(id(self))
        if record is not None:
            record.args, record.calls = args, record.calls + 1
        return original_call(self, *args)

    JITKernel.__init__, JITKernel.__call__ = init, call
    try:
        yield records
    finally:
        JITKernel.__init__, JITKernel.__call__ = original_init, original_call


@contextlib.contextmanager
def output_to_stderr():
    """Inside the block, what is written to standard output (by Python code or by native
    code on file descriptor 1) goes to standard error, so that a tool's own output on
    standard output stays machine-readable."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 1)
        os.close(saved)


def run_script(script: str, script_args: list[str],
               quiet: bool = False) -> tuple[list[Captured], str]:
    """Run ``script`` as ``__main__``; its kernels and the error that stopped it ("" if
    none). With ``quiet`` the script's standard output goes to standard error."""
    path = Path(script)
    if not path.is_file():
        raise TilewrightError(f"no such script: {script}")
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [str(path), *script_args]
    sys.path.insert(0, str(path.resolve().parent))
    error = ""
    with capture_kernels() as records, \
            output_to_stderr() if quiet else contextlib.nullcontext():
        try:
            runpy.run_path(str(path), run_name="__main__")
        except SystemExit as exc:
            if exc.code not in (None, 0):
                error = f"the script exited with status {exc.code}"
        except Exception as exc:  # noqa: BLE001 - report what was captured before it
            error = f"the script raised {type(exc).__name__}: {exc}"
        finally:
            sys.argv, sys.path[:] = saved_argv, saved_path
    return records, error


def _symbols(record: Captured) -> dict:
    """Values of a kernel's dynamic dimensions, from the arguments of its last call."""
    if record.args is None:
        return {}
    out = {}
    for name, position, dim in record.kernel.signature.symbols:
        arg = record.args[position] if position < len(record.args) else None
        if hasattr(arg, "shape"):
            out[name] = int(arg.shape[dim])
    return out


def _arch_for(kernel, arch_name):
    from ..profiler.arch import get_arch

    if arch_name:
        return get_arch(arch_name)
    return get_arch(kernel.backend.device)


def _analyse(record: Captured, arch_name):
    from ..tools.analyzer import Analyzer

    return Analyzer.analysis(record.kernel.get_tir(), _arch_for(record.kernel, arch_name),
                             symbols=_symbols(record))


def _label(record: Captured, n: int) -> str:
    return f"#{n} {record.kernel.signature.name}"


def cmd_analyze(args) -> int:
    records, error = run_script(args.script, args.script_args, quiet=args.json)
    if not records:
        raise TilewrightError(f"{args.script} compiled no kernel"
                              + (f" ({error})" if error else ""))
    results, report = [], []
    for n, record in enumerate(records):
        try:
            result = _analyse(record, args.arch)
        except TilewrightError as exc:
            report.append({"kernel": _label(record, n), "error": str(exc)})
            continue
        result.name = _label(record, n)
        results.append(result)
        report.append({"kernel": result.name, "arch": result.arch.name,
                       "total_flops": result.total_flops,
                       "total_global_bytes": result.total_global_bytes,
                       "estimated_time": result.estimated_time,
                       "expected_tflops": result.expected_tflops,
                       "expected_bandwidth_GBps": result.expected_bandwidth_GBps,
                       "bound": result.bound, "grid": list(result.grid)})
    if args.json:
        print(json.dumps({"kernels": report, "script_error": error}, indent=2))
    else:
        by_name = {r.name: r for r in results}
        for entry in report:
            if "error" in entry:
                print(f"kernel {entry['kernel']}: not analysed: {entry['error']}")
            else:
                print(by_name[entry["kernel"]].summary())
        if error:
            print(f"note: {error}")
    if args.plot and results:
        from ..tools.analyzer import plot_roofline

        groups: dict[str, list] = {}
        for result in results:
            groups.setdefault(result.arch.name, []).append(result)
        for arch, group in groups.items():
            path = Path(args.plot)
            if len(groups) > 1:
                path = path.with_name(f"{path.stem}-{arch}{path.suffix}")
            plot_roofline(group, path)
            print(f"roofline chart: {path}", file=sys.stderr)
    return 0 if results else 1


def _override_hint(arch) -> str:
    """How to correct a model that a measured time beats: the variables that override it, or
    the values they already give (``details["overridden"]``), then too low."""
    names, given = arch.details.get("overrides", ()), arch.details.get("overridden", ())
    if given:
        return f"; the {', '.join(given)} value(s) from {' / '.join(names)} may be too low"
    return f"; set {' / '.join(names)} to correct it" if names else ""


def _bench_one(args, n: int, record: Captured, rows: list, notes: list, report: list) -> None:
    """Time one captured kernel, analyse it and add its table row, report entry and notes."""
    from ..autotuner.measure import random_inputs
    from ..profiler import do_bench

    label = _label(record, n)
    kernel = record.kernel
    inputs = record.args
    try:
        if inputs is None:
            inputs = random_inputs(kernel)
        ms = do_bench(lambda k=kernel, a=inputs: k(*a), warmup=args.warmup, rep=args.rep,
                      backend=args.timer)
    except TilewrightError as exc:
        notes.append(f"{label}: not timed: {exc}")
        return
    entry = {"kernel": label, "calls": record.calls, "time_ms": ms}
    try:
        result = _analyse(record, args.arch)
        flops, nbytes = result.total_flops, result.total_global_bytes
        entry.update(tflops=flops / (ms * 1e-3) / 1e12, GBps=nbytes / (ms * 1e-3) / 1e9,
                     roofline_ms=result.estimated_time * 1e3, bound=result.bound,
                     arch=result.arch.name,
                     fraction=result.estimated_time * 1e3 / ms)
    except TilewrightError as exc:
        notes.append(f"{label}: no roofline: {exc}")
    if entry.get("fraction", 0) > 1:
        notes.append(f"{label}: measured faster than the roofline of '{entry['arch']}' allows "
                     "(the model underestimates this machine" + _override_hint(result.arch)
                     + ")")
    report.append(entry)
    rows.append([label, str(record.calls), f"{ms:.4f}",
                 *(f"{entry[k]:.4g}" if k in entry else "-"
                   for k in ("tflops", "GBps", "roofline_ms")),
                 entry.get("bound", "-"),
                 f"{entry['fraction']:.1%}" if "fraction" in entry else "-"])


def cmd_bench(args) -> int:
    records, error = run_script(args.script, args.script_args, quiet=args.json)
    if not records:
        raise TilewrightError(f"{args.script} compiled no kernel"
                              + (f" ({error})" if error else ""))
    head = ["kernel", "calls", "time ms", "TFLOP/s", "GB/s", "roofline ms", "bound",
            "of roofline"]
    rows, notes, report = [], [], []
    with output_to_stderr() if args.json else contextlib.nullcontext():
        for n, record in enumerate(records):
            _bench_one(args, n, record, rows, notes, report)
    if args.json:
        print(json.dumps({"kernels": report, "notes": notes, "script_error": error}, indent=2))
        return 0 if report else 1
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(head)]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths)))
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)))
    for note in notes + ([f"note: {error}"] if error else []):
        print(note)
    return 0 if rows else 1


def _analyze_options(p) -> None:
    p.add_argument("--arch", default=None, help="architecture model name (default: the "
                   "model of each kernel's device, e.g. cpu)")
    p.add_argument("--plot", default=None, metavar="PATH", help="draw the roofline chart "
                   "(.png or .svg; needs tilewright[viz])")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _bench_options(p) -> None:
    p.add_argument("--arch", default=None, help="architecture model for the roofline columns")
    p.add_argument("--timer", default="wall", help="do_bench timer (default: wall)")
    p.add_argument("--warmup", type=float, default=25, help="warm-up budget in ms")
    p.add_argument("--rep", type=float, default=100, help="measurement budget in ms")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _with_script_args(options, command):
    """Options may follow the script's name; the script's own arguments follow ``--``."""
    import argparse

    def run(args):
        rest = list(args.script_args)
        head, tail = (rest[:rest.index("--")], rest[rest.index("--") + 1:]) if "--" in rest \
            else (rest, [])
        if head:
            parser = argparse.ArgumentParser(prog=f"tilewright {command.__name__[4:]}",
                                             add_help=False)
            options(parser)
            parser.set_defaults(**{k: v for k, v in vars(args).items()
                                   if k not in ("script", "script_args", "func")})
            parsed, unknown = parser.parse_known_args(head)
            if unknown:
                raise TilewrightError(f"unknown option(s) {' '.join(unknown)}; pass the "
                                      "script's own arguments after '--'")
            for key, value in vars(parsed).items():
                setattr(args, key, value)
        args.script_args = tail
        return command(args)

    return run


def add_commands(sub) -> None:
    """Add ``analyze`` and ``bench`` to the ``tilewright`` command's subparsers."""
    import argparse

    for name, options, command, text in (
            ("analyze", _analyze_options, cmd_analyze,
             "static roofline analysis of the kernels a script compiles"),
            ("bench", _bench_options, cmd_bench,
             "time every kernel a script compiles, with its roofline position")):
        p = sub.add_parser(name, help=text, description=f"{text}. Options may follow the "
                           "script; the script's own arguments follow '--'.")
        p.add_argument("script", help="a Python script that compiles kernels")
        options(p)
        p.add_argument("script_args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
        p.set_defaults(func=_with_script_args(options, command))
