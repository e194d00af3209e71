"""The package keeps its layers: the import-linter contract of ``pyproject.toml`` holds, no
private name crosses a module, and no module imports another of the package inside a
function (a function-level import would hide a cycle from the contract)."""

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "tilewright_ascend"
PYPROJECT = PACKAGE.parent / "pyproject.toml"


def _modules():
    return sorted(PACKAGE.rglob("*.py"))


def _ours(node: ast.ImportFrom) -> bool:
    return node.level > 0 or (node.module or "").startswith("tilewright")


def test_no_private_name_crosses_a_module():
    found = []
    for path in _modules():
        tree = ast.parse(path.read_text())
        modules = set()  # names bound to modules of ours: `from . import copy`
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and _ours(node):
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        found.append(f"{path.name}: imports {alias.name}")
                    if node.module is None or node.level > 0:
                        modules.add(alias.asname or alias.name)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                    node.value.id in modules and node.attr.startswith("_") and \
                    not node.attr.startswith("__"):
                found.append(f"{path.name}:{node.lineno}: uses {node.value.id}.{node.attr}")
    assert not found, found


def test_no_function_level_import_of_the_package():
    found = []
    for path in _modules():
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom) and _ours(node) or \
                        isinstance(node, ast.Import) and any(
                            a.name.startswith("tilewright") for a in node.names):
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert not found, found


def test_import_layer_contract():
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if lint is None:
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    proc = subprocess.run([lint, "--no-cache", str(PYPROJECT)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:]
