"""Installing the pieces: what the core depends on, and the README's install block."""

import re
import tomllib
from importlib.metadata import version
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]


def distributions() -> dict[str, tuple[Path, bool]]:
    """Every distribution of the repository by name: its folder, whether it is a backend."""
    out = {}
    for pyproject in [ROOT / "pyproject.toml", *ROOT.glob("*/pyproject.toml"),
                      *ROOT.glob("plugins/*/pyproject.toml")]:
        project = tomllib.loads(pyproject.read_text())["project"]
        out[project["name"]] = (pyproject.parent,
                                "tilewright.plugins" in project.get("entry-points", {}))
    return out


def test_the_core_depends_on_torch_with_a_range_the_installed_build_meets():
    """torch is the kernel-call interface: installing the core alone gives a working call."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (torch,) = [Requirement(r) for r in project["dependencies"]
                if Requirement(r).name == "torch"]
    assert not any(s.operator == "==" for s in torch.specifier), "a range, not one build"
    assert torch.specifier.contains(version("torch"), prereleases=True)


def test_the_readme_installs_every_backend_and_each_has_a_readme():
    readme = (ROOT / "README.md").read_text()
    block = readme[readme.index("## Installing"):]
    block = block[block.index("```bash"):block.index("```\n", block.index("```bash") + 7)]
    installed = set(re.findall(r"pip install -e (\S+)", block)) | \
        set(re.findall(r"-e (\S+)", block))
    for name, (folder, backend) in distributions().items():
        path = "." if folder == ROOT else str(folder.relative_to(ROOT))
        assert path in installed, f"the README's install block does not install {name}"
        assert not backend or (folder / "README.md").is_file(), f"{name} has no README.md"


def test_the_core_declares_every_distribution_it_imports_at_module_level():
    """A dependency that only arrives through another one (filelock through torch) breaks
    the day that one drops it."""
    import ast
    import sys

    provided_by = {"tvm": "apache-tvm", "tvm_ffi": "apache-tvm"}  # tvm_ffi comes with tvm
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {Requirement(r).name for r in project["dependencies"]}
    for path in (ROOT / "core" / "tilewright").rglob("*.py"):
        for node in ast.parse(path.read_text()).body:
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            for name in names:
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top == "tilewright":
                    continue
                assert provided_by.get(top, top) in declared, \
                    f"{path.relative_to(ROOT)} imports {top}, not a dependency of the core"
