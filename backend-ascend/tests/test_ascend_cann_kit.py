"""The CANN kit (tilewright_ascend.kit.cann) as far as it runs without CANN: the bisheng command,
the source set it compiles, and a run with a stand-in bisheng that records its arguments."""

import os
import stat
from pathlib import Path

from tilewright_ascend.executor import bisheng_command
from tilewright_ascend.kit import cann, sources
from tilewright_sdk.conformance.catalogue import cases
from tilewright_sdk.conformance.known_failures import known_failure
from tilewright_sdk.conformance.runner import missing_capabilities

REPO = Path(__file__).resolve().parents[2]


def test_bisheng_command_builds_for_dav_2201(tmp_path):
    cmd = bisheng_command(tmp_path, "k.cpp", "k.so")
    assert cmd[0] == "bisheng"
    for flag in ("--npu-arch=dav-2201", "-xasc", "--cce-auto-sync=off", "-std=c++17", "-fPIC",
                 "--shared", f"-I{tmp_path}/include", f"-L{tmp_path}/lib64", "-lruntime",
                 "-lascendcl"):
        assert flag in cmd, flag
    assert cmd[cmd.index("-o") + 1] == "k.so" and "k.cpp" in cmd


def test_the_source_set_covers_the_catalogue_and_every_example():
    kernels = sources.source_set()
    names = [k.name for k in kernels]
    assert len(names) == len(set(names))
    declared = sources.BACKEND.capabilities.dtypes
    supported = [c for c in (c.narrowed(declared) for c in cases())
                 if not missing_capabilities(c, sources.BACKEND) and
                 not known_failure("ascend", c.id, executes=False)]  # no source to check
    assert {f"conformance/{c.id}" for c in supported} == \
        {n for n in names if n.startswith("conformance/")}
    assert {f"seed/{n}" for n in sources.SEED} == {n for n in names if n.startswith("seed/")}
    # torch_package.py defines no kernel: it lists other examples' kernels for a wheel
    stems = {p.stem for p in (REPO / "examples").glob("*.py")} - {"torch_package"}
    assert stems == {n.split("/")[1].split(".")[0] for n in names if n.startswith("examples/")}


def _stand_in_bisheng(folder: Path) -> Path:
    """A 'bisheng' that records its arguments and writes the library it is asked for."""
    log = folder / "bisheng.args"
    script = folder / "bisheng"
    script.write_text(f'#!/bin/sh\necho "$@" >> {log}\nwhile [ "$#" -gt 0 ]; do\n'
                      '  if [ "$1" = "-o" ]; then : > "$2"; fi; shift\ndone\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return log


def test_kit_compiles_each_source_and_writes_the_table(tmp_path, monkeypatch):
    out = tmp_path / "out"
    only = ["seed/vec_add", "conformance/copy-float32-full"]
    monkeypatch.delenv("ASCEND_HOME_PATH", raising=False)
    assert cann.main(["--out", str(out), "--only", *only, "--jobs", "1"]) == 0
    text = (out / "RESULTS.md").read_text()
    assert "| seed/vec_add | compile | skipped |" in text and "ASCEND_HOME_PATH" in text
    assert (out / "sources" / "seed__vec_add.cpp").read_text().startswith("// Ascend C")

    folder = tmp_path / "bin"
    folder.mkdir()
    log = _stand_in_bisheng(folder)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("ASCEND_HOME_PATH", str(tmp_path / "cann"))
    assert cann.main(["--out", str(out), "--only", *only, "--jobs", "1"]) == 0
    text = (out / "RESULTS.md").read_text()
    assert "| seed/vec_add | compile | ok |" in text
    assert "| conformance/copy-float32-full | compile | ok |" in text
    assert "| conformance suite | conformance | skipped |" in text  # no torch_npu here
    calls = log.read_text().splitlines()
    assert len(calls) == 2 and all("--npu-arch=dav-2201" in c for c in calls)
    assert any(c.endswith(f"-o {out}/build/seed__vec_add.so") for c in calls)
