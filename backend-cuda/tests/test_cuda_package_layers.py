"""The package keeps its layers (docs/writing-a-backend.md): the import-linter contract of
backend-cuda/pyproject.toml holds, no module imports another of the package inside a function
(to dodge a cycle), and no private name (``_x``) crosses a module."""

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "tilewright_cuda"
CONFIG = PACKAGE.parent / "pyproject.toml"


def _modules():
    return sorted(PACKAGE.rglob("*.py"))


def _lint_imports() -> str | None:
    found = Path(sys.executable).with_name("lint-imports")
    return str(found) if found.exists() else shutil.which("lint-imports")


def test_the_import_layer_contract_holds():
    tool = _lint_imports()
    if tool is None:
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    result = subprocess.run([tool, "--config", str(CONFIG)], capture_output=True, text=True,
                            check=False, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "1 kept, 0 broken" in result.stdout


def _ours(node: ast.AST) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").startswith("tilewright_cuda")
    return any(a.name.startswith("tilewright_cuda") for a in node.names)


def test_no_function_level_imports_of_the_package():
    found = []
    for path in _modules():
        for fn in ast.walk(ast.parse(path.read_text())):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found += [f"{path.relative_to(PACKAGE)}:{n.lineno}" for n in ast.walk(fn)
                          if isinstance(n, (ast.Import, ast.ImportFrom)) and _ours(n)]
    assert not found, found


def test_no_private_name_crosses_a_module():
    found = []
    for path in _modules():
        tree = ast.parse(path.read_text())
        imported = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and _ours(node):
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        found.append(f"{path.relative_to(PACKAGE)}: imports {alias.name}")
                    imported.add(alias.asname or alias.name.split(".")[0])
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                    node.value.id in imported and node.attr.startswith("_") and \
                    not node.attr.startswith("__"):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: "
                             f"{node.value.id}.{node.attr}")
    assert not found, found
