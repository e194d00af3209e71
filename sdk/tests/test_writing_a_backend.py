"""docs/writing-a-backend.md's walk-through runs as written: from ``tilewright-sdk
new-backend`` to a backend that executes a copy and an element-wise kernel against torch.

The section's blocks are applied in order in a temporary folder. A Python block starts with a
comment naming its file: ``# PATH`` writes the block to PATH, ``# PATH: NAME`` replaces the
one line of PATH that starts with ``NAME=`` by the block's line. A bash block's commands run
one by one: ``tilewright-sdk`` and ``python`` / ``pytest`` with this interpreter, and ``pip
install -e DIR`` as a real install of DIR's distribution (its entry point) into a private
site folder, with DIR itself ahead of it on the path as an editable install puts it -- the
shared virtual environment is left as it was.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "writing-a-backend.md"
SECTION = ("## From the scaffolder to a running kernel", "## The hooks")
BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.S)
HEADER = re.compile(r"# (?P<path>[\w./-]+\.py)(: (?P<name>\w+))?\n")
BIN = Path(sys.executable).parent


def walkthrough() -> list[tuple[str, str]]:
    """(language, code) of each block of the walk-through, in order."""
    text = DOC.read_text()
    section = text[text.index(SECTION[0]):text.index(SECTION[1])]
    return [(m[1], m[2]) for m in BLOCK.finditer(section)]


def apply_file(code: str, cwd: Path) -> None:
    header = HEADER.match(code)
    assert header, f"a Python block of the walk-through names no file:\n{code}"
    path, body = cwd / header["path"], code[header.end():]
    if header["name"] is None:
        path.write_text(body)
        return
    lines = path.read_text().splitlines(keepends=True)
    hits = [n for n, line in enumerate(lines) if line.strip().startswith(header["name"] + "=")]
    assert len(hits) == 1, f"{path} has {len(hits)} lines starting with {header['name']}="
    lines[hits[0]] = body
    path.write_text("".join(lines))


def run_command(line: str, cwd: Path, env: dict) -> str:
    words = shlex.split(line.split("#")[0])
    if words[:3] == ["pip", "install", "-e"]:
        folder = (cwd / words[3]).resolve()
        command = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                   "--no-build-isolation", "--target", str(cwd / "site"), str(folder)]
        env["PYTHONPATH"] = os.pathsep.join([str(folder), str(cwd / "site")])
    elif words[0] == "tilewright-sdk":
        command = [str(BIN / "tilewright-sdk"), *words[1:]]
    elif words[0] in ("python", "pytest"):
        command = [sys.executable, *(["-m", "pytest"] if words[0] == "pytest" else []),
                   *words[1:]]
    else:
        raise AssertionError(f"docs/writing-a-backend.md: no way to run {line!r} here")
    proc = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, f"$ {line}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc.stdout


def test_the_walkthrough_reaches_kernels_that_match_torch(tmp_path):
    env = {**os.environ, "TILEWRIGHT_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("PYTHONPATH", None)
    work = tmp_path / "work"
    work.mkdir()
    outputs, files = [], 0
    for lang, code in walkthrough():
        if lang == "bash":
            outputs += [run_command(line, work, env) for line in code.splitlines()
                        if line.split("#")[0].strip()]
        else:
            assert lang == "python", f"a {lang} block in the walk-through"
            apply_file(code, work)
            files += 1
    assert files == 6
    out = "".join(outputs)
    assert "myaccel: copy and axpy_exp match torch" in out
    # the contract checks passed (the command's exit status) and every copy case of the
    # conformance suite was executed and compared with torch: none failed or was unsupported
    assert re.search(r"copy +pass 2/2 +pass 2/2 +pass 2/2", out), out[-3000:]
    assert re.search(r"\b18 passed of 18\b", out), out[-3000:]
