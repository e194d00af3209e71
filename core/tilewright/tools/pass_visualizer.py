"""Pass Visualizer: the program's structure after every pass, as collapsible trees.

``python -m tilewright.tools.pass_visualizer script.py --set M=1024 --set block_M=128 ...
--out passes.html`` loads ``script.py`` (without running its ``__main__`` block), builds its
kernel with the ``--set`` values and lowers it for every installed backend (or ``--target``),
recording the IR after each pass through the engine's events. Each pass shows a tree: kernel
and loops with their annotations, allocations with scope and shape, buffer reads and writes,
tile ops expanded into their operands and attributes (and M / N / K for GEMMs),
synchronisation and lowered intrinsics, each kind in its own colour. Passes whose tree equals
the previous one are listed but not repeated.
"""

from __future__ import annotations

import argparse
import ast
import runpy
import sys
from pathlib import Path

from .pages import render_page

_SYNC_WORDS = ("sync", "barrier", "fence", "wait", "set_flag", "arrive")


def _region(region) -> str:
    parts = []
    for start, extent in zip(region.starts, region.extents):
        try:
            begin, size = int(start), int(extent)
            parts.append(f"{begin}:{begin + size}" if size != 1 else str(begin))
        except (TypeError, ValueError):  # symbolic start or extent
            parts.append(f"{start}:{start}+{extent}" if str(extent) != "1" else str(start))
    return f"{region.buffer.name}[{', '.join(parts)}]"


def tile_op_fields(call) -> dict:
    """The fields of a decoded tile op: operands (regions), attributes, and M/N/K of GEMMs."""
    from ..ir import Region

    fields = {}
    for name, value in call.operands.items():
        fields[name] = _region(value) if isinstance(value, Region) else str(value)
    for name, value in call.attrs.items():
        fields[name] = str(value)
    if call.name == "gemm":
        regions = [v for v in call.operands.values() if isinstance(v, Region)]
        if len(regions) >= 3:
            a, c = regions[0].extents, regions[2].extents
            fields.update(M=str(c[-2]) if len(c) > 1 else "1", N=str(c[-1]), K=str(a[-1]))
    return fields


def _node(kind, label, cls="", details=None, children=None) -> dict:
    return {"kind": kind, "label": label, "cls": cls, "details": details or {},
            "children": children or []}


def _call_class(name: str) -> str:
    if name.startswith("tw."):
        return "tileop"
    if any(w in name.lower() for w in _SYNC_WORDS):
        return "sync"
    return "intrin"


def _expr_calls(expr) -> list[str]:
    import tvm
    import tvm_ffi

    names = []

    def visit(value):
        op = value.op
        name = op.name if isinstance(op, tvm.ir.Op) else str(op)
        if name in ("tirx.call_extern", "tirx.call_llvm_pure_intrin", "tirx.call_llvm_intrin",
                    "tirx.call_pure_extern") and value.args:
            name = f"{name}:{value.args[0]}"
        names.append(name)

    tvm_ffi.structural_walk(expr, (tvm.ir.Call, visit))
    return names


def structure(stmt) -> list[dict]:
    """The tree of a statement (a list of nodes: sequences are flattened)."""
    from tvm import tirx

    from ..ir import decode

    if stmt is None:
        return []
    kind = type(stmt).__name__
    if isinstance(stmt, tirx.SeqStmt):
        return [n for s in stmt.seq for n in structure(s)]
    if isinstance(stmt, tirx.For):
        details = {"kind": str(stmt.kind).split(".")[-1], "extent": str(stmt.extent)}
        if stmt.thread_binding is not None:
            details["thread"] = str(stmt.thread_binding.thread_tag)
        details.update({f"@{k}": str(v) for k, v in stmt.annotations.items()})
        cls = "kernel" if stmt.thread_binding is not None else "loop"
        return [_node("for", f"for {stmt.loop_var}", cls, details, structure(stmt.body))]
    if kind == "AllocBuffer":
        buf = stmt.buffer
        return [_node("alloc", f"alloc {buf.name}", "alloc",
                      {"scope": buf.scope(), "shape": str([int(s) if hasattr(s, "value") else
                                                          str(s) for s in buf.shape]),
                       "dtype": str(buf.dtype)}, structure(getattr(stmt, "body", None)))]
    if isinstance(stmt, tirx.IfThenElse):
        children = [_node("then", "then", "", {}, structure(stmt.then_case))]
        if stmt.else_case is not None:
            children.append(_node("else", "else", "", {}, structure(stmt.else_case)))
        return [_node("if", f"if {stmt.condition}", "branch", {}, children)]
    if isinstance(stmt, tirx.Evaluate):
        call = decode(stmt)
        if call is not None:
            return [_node("tileop", f"T.{call.name}", "tileop", tile_op_fields(call))]
        names = _expr_calls(stmt.value)
        if names:
            return [_node("call", names[0], _call_class(names[0]),
                          {"expr": str(stmt.value)[:300]})]
        return [_node("eval", str(stmt.value)[:120], "")]
    if kind == "BufferStore":
        details = {"writes": f"{stmt.buffer.name}[{', '.join(str(i) for i in stmt.indices)}]",
                   "value": str(stmt.value)[:200]}
        calls = _expr_calls(stmt.value)
        if calls:
            details["calls"] = ", ".join(sorted(set(calls)))
        return [_node("store", f"{stmt.buffer.name}[...] =", "store", details)]
    if isinstance(stmt, tirx.AttrStmt):
        return [_node("attr", f"attr {stmt.attr_key}", "attr", {"value": str(stmt.value)},
                      structure(stmt.body))]
    body = getattr(stmt, "body", None)
    label = kind if body is not None else str(stmt).strip().splitlines()[0][:120]
    return [_node(kind.lower(), label, "", {}, structure(body))]


def module_structure(mod) -> list[dict]:
    nodes = []
    for gv, func in mod.functions.items():
        body = getattr(func, "body", None)
        params = ", ".join(str(p) for p in getattr(func, "params", []))
        nodes.append(_node("func", f"func {gv.name_hint}({params})", "func", {},
                           structure(body) if body is not None else []))
    return nodes


class Recorder:
    """Engine-event listener: the structure after every (leaf) pass of one compilation."""

    def __init__(self):
        self.steps: list[dict] = []
        self.depth = 0
        self.children: list[int] = []

    def __call__(self, event) -> None:
        if event.kind == "session_start":
            self.steps.append({"phase": "input", "name": "tile program",
                               "tree": [_node("func", "tile program", "func", {},
                                              structure(event.data["func"].body))]})
        elif event.kind == "pass_start":
            if self.children:
                self.children[-1] += 1
            self.children.append(0)
        elif event.kind == "pass_end" and self.children:
            if self.children.pop():
                return
            phase = event.data.get("phase") or "unscoped"
            self.steps.append({"phase": "unscoped" if phase == "codegen" else phase,
                               "name": event.data["name"],
                               "tree": module_structure(event.data["mod"])})


def record(func, target: str) -> list[dict]:
    """The per-pass structure trees of lowering ``func`` for ``target``."""
    from ..engine import events, finish, lower

    recorder = Recorder()
    events.subscribe(recorder)
    try:
        finish(lower(func, target))
    finally:
        events.unsubscribe(recorder)
    return recorder.steps


# -- HTML ---------------------------------------------------------------------------------------
def render(results: dict, title: str) -> str:
    """``results``: target -> steps (or an error string)."""
    return render_page("pass_visualizer.html.j2", results=results, title=title)


# -- command line -------------------------------------------------------------------------------
def _parse_sets(items) -> dict:
    values = {}
    for item in items or ():
        if "=" not in item:
            raise SystemExit(f"pass_visualizer: --set needs KEY=VALUE, got {item!r}")
        key, value = item.split("=", 1)
        try:
            values[key.strip()] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            values[key.strip()] = value
    return values


def build_func(namespace: dict, values: dict, kernel: str | None = None):
    """The tile-level PrimFunc of a script's kernel, built with ``values``."""
    from tvm import tirx

    from ..jit import JITFunction

    candidates = [(k, v) for k, v in namespace.items() if not k.startswith("_") and
                  (isinstance(v, (JITFunction, tirx.PrimFunc)))]
    if kernel is not None:
        candidates = [(k, v) for k, v in namespace.items() if k == kernel]
        if not candidates:
            raise SystemExit(f"pass_visualizer: the script defines no {kernel!r}")
    if not candidates:
        raise SystemExit("pass_visualizer: the script defines no @tilewright.jit kernel or "
                         "PrimFunc; name a kernel factory with --kernel")
    name, obj = candidates[0]
    if isinstance(obj, tirx.PrimFunc):
        return name, obj
    if isinstance(obj, JITFunction) and not obj.factory:
        from ..language.kernel import _ParamSlot, trace_eager

        params = obj._signature.parameters
        static = {k: v for k, v in values.items() if k in params}
        consts = {k: v for k, v in values.items() if k not in params}
        for pname, param in params.items():
            if pname not in static:
                static[pname] = param.default if param.default is not param.empty else \
                    _ParamSlot(pname)
        return name, trace_eager(obj.fn, static, consts)[0]
    fn = obj.fn if isinstance(obj, JITFunction) else obj
    return name, fn(**values)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tilewright.tools.pass_visualizer",
                                     description="Per-pass structure trees of a kernel, as HTML.")
    parser.add_argument("script")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a value for the kernel's arguments or T.const symbols")
    parser.add_argument("--kernel", default=None, help="the kernel's name in the script")
    parser.add_argument("--target", action="append", default=None,
                        help="targets to lower for (default: every installed backend)")
    parser.add_argument("--out", default="passes.html")
    ns = parser.parse_args(argv)
    script = Path(ns.script)
    if not script.is_file():
        print(f"pass_visualizer: no such script: {script}", file=sys.stderr)
        return 2
    sys.path.insert(0, str(script.resolve().parent))
    namespace = runpy.run_path(str(script), run_name="__tilewright_pass_visualizer__")
    name, func = build_func(namespace, _parse_sets(ns.set), ns.kernel)
    if ns.target:
        targets = ns.target
    else:
        from ..plugin import get_manager

        targets = [kind for b in get_manager().backends().values() for kind in b.target_kinds]
    results = {}
    for target in targets:
        try:
            results[target] = record(func, target)
        except Exception as exc:  # noqa: BLE001 - one backend failing still shows the others
            results[target] = f"{type(exc).__name__}: {exc}"
    Path(ns.out).write_text(render(results, f"pass visualizer: {name} ({script.name})"))
    for target, steps in results.items():
        state = f"{len(steps)} steps" if not isinstance(steps, str) else f"failed: {steps}"
        print(f"pass_visualizer: {target}: {state}")
    print(f"pass_visualizer: wrote {ns.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
