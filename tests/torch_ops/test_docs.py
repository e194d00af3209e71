"""docs/torch.md runs as written: its Python blocks, in order, then the README's Quickstart
block, as one script in a fresh interpreter (a file: kernels are read from their source),
with the page's shell commands in between (``tilewright ...`` through ``python -m
tilewright``; ``pip install`` of a wheel by unpacking it onto the path, as pip lays it out).
Blocks after a ``<!-- needs: cuda -->`` or ``<!-- needs: npu -->`` line need that device and
are left out.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "torch.md"
BLOCK = re.compile(r"(<!-- needs: (\w+) -->\n)?```(\w+)\n(.*?)```", re.S)
DRIVER = '''import importlib, shlex, subprocess, sys, zipfile
from pathlib import Path

SITE = Path("site").resolve()
SITE.mkdir()
sys.path.insert(0, str(SITE))


def shell(line):
    words = shlex.split(line.split("#")[0])
    if words[:2] == ["pip", "install"]:
        with zipfile.ZipFile(words[2]) as wheel:
            wheel.extractall(SITE)
        importlib.invalidate_caches()
    elif words[0] == "tilewright":
        subprocess.run([sys.executable, "-m", "tilewright", *words[1:]], check=True)
    else:
        raise SystemExit(f"docs/torch.md: no way to run {line!r} here")

'''


def steps(text: str):
    """(kind, line, code) of each block that runs on the CPU: python or bash."""
    for match in BLOCK.finditer(text):
        needs, lang, code = match[2], match[3], match[4]
        if needs is None and lang in ("python", "bash"):
            yield lang, text.count("\n", 0, match.start(4)) + 1, code


def readme_quickstart() -> str:
    """The Python block of the README's Quickstart: one kernel called through torch.ops."""
    readme = (REPO / "README.md").read_text()
    quick = readme[readme.index("## Quickstart"):readme.index("## A kernel")]
    code = [m[4] for m in BLOCK.finditer(quick) if m[3] == "python"]
    assert len(code) == 1 and "torch.ops." in code[0]
    return code[0]


def test_every_cpu_example_of_docs_torch_md_and_the_quickstart_runs(tmp_path):
    text = DOC.read_text()
    driver = [DRIVER]
    for lang, line, code in steps(text):
        if lang == "bash":
            driver += [f"shell({cmd!r})" for cmd in code.splitlines() if cmd.strip()]
        elif "TORCH_OPS = {" in code:
            continue  # a table shown from examples/torch_package.py, which the CLI builds
        else:
            driver += [f"# docs/torch.md, line {line}", code]
    driver += ["# README.md, Quickstart", readme_quickstart()]
    (tmp_path / "examples").symlink_to(REPO / "examples")
    (tmp_path / "drive.py").write_text("\n".join(driver) + "\n")
    proc = subprocess.run([sys.executable, "drive.py"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    # the printed schemas and errors are the ones the page shows
    for shown in ("(Tensor X, Tensor W, float eps) -> Tensor",
                  "(Tensor(a!) Q, Tensor Cos, Tensor Sin) -> ()",
                  "(Tensor X, Tensor W, int block_N=64) -> Tensor",
                  "torch op docs::rope is already registered by tilewright",
                  "torch op tw_examples::matmul: k = 5000 is outside the range [1, 4096]",
                  "torch op docs::rmsnorm has no cpu kernel for X: float32(16, 128)",
                  "output 'C' of kernel main has shape (n,), which depends on the value of n"):
        assert shown in proc.stdout, proc.stdout
