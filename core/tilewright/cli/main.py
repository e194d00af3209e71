"""The ``tilewright`` command.

- ``tilewright backends [--json]``: every plugin (failed and disabled ones with their error),
  the backends it provides, their targets, executors and capabilities;
- ``tilewright doctor [--json]``: what this machine can compile and run, and what is missing;
- ``tilewright cache info [--json]`` / ``tilewright cache clear``: the disk cache of kernels;
- ``tilewright analyze script.py [--arch NAME] [--plot out.png]`` / ``tilewright bench
  script.py``: roofline analysis and timing of the kernels a script compiles;
- ``tilewright package MODULE --name NAME [--target cpu ...]``: a wheel of the module's kernels
  as torch operators that runs with torch alone (:mod:`tilewright.torch_ops.package`);
- ``tilewright <tool> ...``: subcommands that plugins add through ``tilewright_cli_tools``.

Importing this module is cheap: plugins (and with them TVM) load only when a command needs
them, and torch is never imported.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from importlib import metadata

BUILTINS = ("backends", "doctor", "cache", "analyze", "bench", "package")


def _manager():
    from ..plugin import get_manager

    return get_manager()


def _check(probe) -> dict:
    """``{"ok", "reason"}`` from an availability probe (the plugin manager makes every probe
    of a plugin's declaration return an Availability, within its time limit)."""
    result = probe()
    return {"ok": bool(result), "reason": "" if result else getattr(result, "reason", "")}


def _describe_backend(backend) -> dict:
    caps = backend.capabilities
    return {
        "name": backend.name,
        "version": backend.version,
        "api_version": backend.api_version,
        "description": backend.description,
        "target_kinds": list(backend.target_kinds),
        "target_options": list(backend.target_options),
        "accelerator": backend.accelerator,
        "device": backend.device,
        "device_available": _check(backend.device_available),
        "pipelines": {k: [p.name for p in v.phases] for k, v in backend.pipelines.items()},
        "codegens": {k: v.language for k, v in backend.codegens.items()},
        "executors": [{"name": e.name, "doc": e.doc, **_check(e.available)}
                      for e in backend.executors],
        "capabilities": {attr: sorted(getattr(caps, attr))
                         for attr in ("tile_ops", "dtypes", "memory_scopes", "features")},
    }


def _plugins_report(manager) -> dict:
    manager.load()
    plugins = [{"name": r.name, "version": r.version, "distribution": r.distribution,
                "label": r.label, "status": r.status, "error": r.error,
                "backends": [_describe_backend(b) for b in r.backends] if r.status == "ok"
                else []}
               for r in manager.records.values()]
    return {"plugins": plugins, "conflicts": manager.conflicts()}


def _word(check: dict, yes: str = "available") -> str:
    return yes if check["ok"] else f"unavailable: {check['reason'] or 'no reason given'}"


def _print_backends(report: dict) -> None:
    if not report["plugins"]:
        print("no tilewright plugins installed (entry-point group 'tilewright.plugins')")
    for plugin in report["plugins"]:
        dist = f" ({plugin['distribution']})" if plugin["distribution"] else ""
        print(f"plugin {plugin['name']} {plugin['version'] or '(version unknown)'}{dist}: "
              f"{plugin['status']}")
        if plugin["error"]:
            print(f"  error: {plugin['error']}")
        for b in plugin["backends"]:
            caps = b["capabilities"]
            desc = f" - {b['description']}" if b["description"] else ""
            print(f"  backend {b['name']} {b['version']} (api {b['api_version']}){desc}")
            rows = [("targets", ", ".join(b["target_kinds"])),
                    ("target options", ", ".join(f"-{o}" for o in b["target_options"])),
                    ("device", f"{b['device']} ({_word(b['device_available'])})")]
            rows += [(f"pipeline {k}", " -> ".join(v)) for k, v in b["pipelines"].items()]
            rows += [(f"codegen {k}", v) for k, v in b["codegens"].items()]
            rows += [(f"executor {e['name']}", _word(e)) for e in b["executors"]]
            rows += [(attr.replace("_", " "), ", ".join(caps[attr]))
                     for attr in ("tile_ops", "dtypes", "memory_scopes", "features")]
            width = max(len(k) for k, _ in rows)
            for key, value in rows:
                if value:
                    print(f"    {key:<{width}}  {value}")
    for message in report["conflicts"]:
        print(f"conflict: {message}")


def cmd_backends(args) -> int:
    report = _plugins_report(_manager())
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print_backends(report)
    return 0


def _package(dist: str, module: str) -> dict:
    """Installed version of ``dist`` and whether ``module`` imports (None: not checked)."""
    try:
        version = metadata.version(dist)
    except metadata.PackageNotFoundError:
        return {"version": None, "error": "not installed"}
    if module is None:
        return {"version": version, "error": ""}
    try:
        __import__(module)
    except Exception as exc:  # noqa: BLE001
        return {"version": version, "error": f"import failed: {exc!r}"}
    return {"version": version, "error": ""}


def _doctor_report() -> dict:
    from ..jit.cache import DiskCache
    from ..plugin import API_VERSION
    from ..plugin.passconfig import known_keys
    from ..version import __version__

    tvm = _package("apache-tvm", "tvm")
    manager = _manager()
    known_keys()  # asks every plugin for its keys: a hook failing there is among the notes
    plugins = _plugins_report(manager)
    backends = []
    for plugin in plugins["plugins"]:
        for b in plugin["backends"]:
            usable = [e["name"] for e in b["executors"] if e["ok"]]
            # a backend whose tensors live on the host (an emulator) runs without its device
            runs = (b["device_available"]["ok"] or b["device"] == "cpu") and bool(usable)
            backends.append({"name": b["name"], "plugin": plugin["name"],
                             "targets": b["target_kinds"], "device": b["device"],
                             "device_available": b["device_available"],
                             "executors": b["executors"], "usable_executors": usable,
                             "can_compile": not tvm["error"], "can_run": runs})
    missing = [{"plugin": p["name"], "label": p["label"], "status": p["status"],
                "error": p["error"]} for p in plugins["plugins"] if p["status"] != "ok"]
    # plugins that loaded but one of whose hooks failed or was refused
    notes = [{"plugin": p["name"], "label": p["label"], "error": p["error"]}
             for p in plugins["plugins"] if p["status"] == "ok" and p["error"]]
    try:
        from ..engine import resolve_target

        auto = str(resolve_target("auto", manager)[0])
    except Exception as exc:  # noqa: BLE001
        auto = f"none ({type(exc).__name__}: {exc})"
    return {
        "tilewright": __version__, "api_version": API_VERSION,
        "python": {"version": platform.python_version(), "executable": sys.executable},
        "platform": platform.platform(),
        "tvm": tvm,
        # torch is large: report its installed version without importing it
        "torch": _package("torch", None),
        "backends": backends, "missing": missing, "notes": notes,
        "conflicts": plugins["conflicts"], "no_backend_hint": manager.no_backend_hint(),
        "auto_target": auto, "cache": DiskCache().info(), "logging": _log_describe(),
    }


def _log_describe() -> dict:
    from ..log import describe

    return describe()


def _print_doctor(r: dict) -> None:
    def pkg(p):
        return p["version"] + (f" ({p['error']})" if p["error"] else "") if p["version"] \
            else p["error"]

    print(f"tilewright {r['tilewright']} (plugin api {r['api_version']})")
    print(f"python     {r['python']['version']} ({r['python']['executable']})")
    print(f"platform   {r['platform']}")
    print(f"tvm        {pkg(r['tvm'])}")
    print(f"torch      {pkg(r['torch'])}")
    cache = r["cache"]
    print(f"cache      {cache['path']} ({cache['entries']} entries, {cache['bytes']} bytes)"
          + (f"\n           not used: {cache['problem']}" if cache.get("problem") else ""))
    print()
    if not r["backends"]:
        print(f"no backend is loaded: nothing can be compiled; {r['no_backend_hint']}")
    for b in r["backends"]:
        print(f"backend {b['name']} (plugin {b['plugin']}), targets {', '.join(b['targets'])}")
        print(f"  device {b['device']}: {_word(b['device_available'])}")
        for e in b["executors"]:
            print(f"  executor {e['name']}: {_word(e, 'usable')}")
        if not b["can_compile"]:
            print("  -> cannot compile: TVM does not import")
        else:
            verdict = "compile and run" if b["can_run"] else "compile only (cannot run here)"
            print(f"  -> can {verdict}")
    for message in r["conflicts"]:
        print(f"conflict: {message}")
    if r["missing"]:
        print("\nmissing (plugins not loaded):")
        for m in r["missing"]:
            print(f"  {m['label']} [{m['status']}]: {m['error']}")
    if r["notes"]:
        print("\nproblems of loaded plugins (the rest of each plugin works):")
        for m in r["notes"]:
            print(f"  {m['label']}: {m['error']}")
    print(f"\ntarget 'auto' resolves to: {r['auto_target']}")
    log = r["logging"]
    print("\nlogging")
    print(f"  {log['tilewright']['env']}={log['tilewright']['value'] or '(unset)'}: level "
          f"{log['tilewright']['level']} - {log['tilewright']['help']}")
    for name in ("TVM_LOG_LEVEL", "TVM_LOG_DEBUG"):
        print(f"  {name}={log['tvm'][name] or '(unset)'}")
    print(f"  TVM: {log['tvm']['help']}")


def cmd_doctor(args) -> int:
    report = _doctor_report()
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print_doctor(report)
    return 0


def cmd_cache(args) -> int:
    from ..jit.cache import CacheError, DiskCache

    cache = DiskCache()
    if args.cache_command == "clear":
        try:
            removed = cache.clear()
        except CacheError as exc:
            print(f"tilewright cache clear: {exc}", file=sys.stderr)
            return 1
        print(f"removed {removed} cache entr{'y' if removed == 1 else 'ies'} from {cache.root}")
        return 0
    info = cache.info()
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        print(f"path     {info['path']}\nentries  {info['entries']}\nbytes    {info['bytes']}")
        if info.get("problem"):
            print(f"problem  {info['problem']}")
    return 0


def cmd_package(args) -> int:
    from ..torch_ops.package import build_package

    wheel = build_package(args.module, args.name, version=args.version, out=args.out,
                          targets=tuple(args.target or ("cpu",)))
    print(f"built {wheel}")
    return 0


def _plugin_tools() -> dict:
    """Subcommands from ``tilewright_cli_tools``; a name taken by a builtin is skipped. When
    the plugins cannot load at all (a wrong ``TILEWRIGHT_PLUGINS``), a warning says why and
    the builtin commands remain (``backends`` and ``doctor`` then report the error)."""
    from ..errors import TilewrightError

    try:
        found = _manager().collect("tilewright_cli_tools")
    except TilewrightError as exc:
        print(f"tilewright: warning: {exc}; plugin subcommands are unavailable", file=sys.stderr)
        return {}
    tools = {}
    for tool in found:
        if tool.name in BUILTINS or tool.name in tools:
            print(f"tilewright: warning: plugin subcommand {tool.name!r} is already taken; "
                  "ignored", file=sys.stderr)
            continue
        tools[tool.name] = tool
    return tools


def build_parser(tools: dict | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tilewright", description="tilewright: tile-level "
                                     "kernel language and plugin-based compiler")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    p = sub.add_parser("backends", help="list plugins, backends, executors and capabilities")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_backends)
    p = sub.add_parser("doctor", help="what this machine can compile and run")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_doctor)
    p = sub.add_parser("cache", help="the disk cache of compiled kernels")
    csub = p.add_subparsers(dest="cache_command", metavar="ACTION", required=True)
    info = csub.add_parser("info", help="path, number of entries and bytes")
    info.add_argument("--json", action="store_true", help="machine-readable output")
    csub.add_parser("clear", help="remove every entry")
    p.set_defaults(func=cmd_cache)
    p = sub.add_parser("package", help="a wheel of a module's kernels as torch operators, "
                       "running with torch alone")
    p.add_argument("module", help="a .py file or an importable module whose TORCH_OPS table "
                   "names the operators, kernels and configurations to build")
    p.add_argument("--name", required=True, help="the package (and import) name")
    p.add_argument("--version", default="0.1.0")
    p.add_argument("--out", default=".", help="the folder to write the wheel to")
    p.add_argument("--target", action="append", help="a target to build for (repeat for "
                   "several; default cpu)")
    p.set_defaults(func=cmd_package)
    from .profile import add_commands  # analyze, bench

    add_commands(sub)
    for tool in (tools or {}).values():
        sub.add_parser(tool.name, help=f"{tool.help} (plugin)", add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    from ..errors import TilewrightError

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        # plugin subcommands need the plugins loaded; the builtins load them only if they must
        tools = {} if argv and argv[0] in BUILTINS else _plugin_tools()
        if argv and argv[0] in tools:
            tool = tools[argv[0]]
            try:
                return int(tool.run(argv[1:]) or 0)
            except SystemExit as exc:
                return exc.code if isinstance(exc.code, int) else 1
            except Exception as exc:  # noqa: BLE001 - a plugin's tool must not crash the CLI
                print(f"tilewright: error: plugin subcommand {tool.name!r} failed: "
                      f"{type(exc).__name__}: {exc}", file=sys.stderr)
                return 1
        parser = build_parser(tools)
        # argparse drops the '--' that separates a script's own arguments (analyze, bench):
        # split them off first and hand them over behind it
        tail = None
        if argv and argv[0] in ("analyze", "bench") and "--" in argv:
            split = argv.index("--")
            argv, tail = argv[:split], argv[split + 1:]
        args = parser.parse_args(argv)
        if tail is not None:
            args.script_args = [*args.script_args, "--", *tail]
        if args.command is None:
            parser.print_help()
            return 0
        return args.func(args)
    except TilewrightError as exc:
        print(f"tilewright: error: {exc}", file=sys.stderr)
        return 1
    except SystemExit as exc:  # argparse errors and --help
        return exc.code if isinstance(exc.code, int) else 1
