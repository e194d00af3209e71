"""The files ``tilewright-sdk new-backend`` writes. ``{{name}}``, ``{{package}}`` and
``{{dist}}`` are replaced; ``PACKAGE`` in a path becomes the package name."""

FILES = {}

FILES["pyproject.toml"] = '''[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "{{dist}}"
dynamic = ["version"]  # one source of truth: {{package}}.__version__
description = "tilewright backend '{{name}}'"
requires-python = ">=3.11,<3.12"
dependencies = ["tilewright>=0.1,<0.2"]

[project.optional-dependencies]
test = ["pytest>=8", "tilewright-sdk>=0.1,<0.2"]

# The core finds the backend through this entry point; nothing in the core names it.
[project.entry-points."tilewright.plugins"]
{{name}} = "{{package}}.plugin"

# The target kinds the backend claims: a target of these imports this plugin only.
[project.entry-points."tilewright.targets"]
{{name}} = "{{package}}.plugin"

# The hooks the plugin implements, one line each (add one when plugin.py implements another):
# collecting a hook imports only the plugins declaring it.
[project.entry-points."tilewright.hooks"]
tilewright_backends = "{{package}}.plugin"

[tool.setuptools.dynamic]
version = { attr = "{{package}}.__version__" }

[tool.setuptools.packages.find]
where = ["."]
include = ["{{package}}*"]
'''

FILES["README.md"] = '''# {{dist}}

The tilewright backend `{{name}}` (target `"{{name}}"`), created by `tilewright-sdk new-backend`.

```bash
pip install -e .                 # registers the backend through its entry point
tilewright backends              # lists '{{name}}' with its executors and capabilities
pytest tests                     # this backend's own tests (the contract checks)
pytest --pyargs tilewright_sdk.conformance --tilewright-backend {{name}} --tilewright-mode codegen
tox                              # the same, each in a fresh environment
```

## Files

| file | what it is |
|---|---|
| `pyproject.toml` | the distribution; its entry point `tilewright.plugins: {{name}}` is how the \
core finds the backend; `tilewright.targets` and `tilewright.hooks` list its target kinds and the \
hooks `plugin.py` implements, so that compiling for another backend does not import this one |
| `{{package}}/plugin.py` | the entry-point module: implements the hook `tilewright_backends` and \
returns the `BackendModule` (name, targets, pipeline, codegen, executors, capabilities) |
| `{{package}}/pipeline.py` | the `PassPipeline`: ordered, named phases of TVM passes; the engine \
runs them and reports every pass to debug tools under the phase's name |
| `{{package}}/lowering.py` | the lowering-rule table: one function per tile op, registered with \
`@register_lowering("op")`; the capabilities declare exactly the ops in this table |
| `{{package}}/codegen.py` | the `DeviceCodegen`: turns the lowered IR into source text (here, the \
printed IR) |
| `{{package}}/executor.py` | the `Executor`s: build source into something callable; each says \
whether it is available here and why not |
| `tests/conftest.py` | the one place where hardware is gated: a fixture or skip with one reason |
| `tests/test_contract.py` | the contract checks of `tilewright_sdk.conformance.contract` |
| `tox.ini` | environments: the backend's tests and its conformance run |

## Next steps

1. Add a lowering rule per tile op to `lowering.py` (start with `copy` and `fill`); each op
   in the table is declared in the capabilities automatically.
2. Generate real source in `codegen.py` and build it in `executor.py`.
3. Run the conformance suite in `codegen`, then `compile`, then `execute` mode.

`docs/writing-a-backend.md` in the tilewright repository walks through these steps to a
backend that runs kernels (section "From the scaffolder to a running kernel") and describes
the whole contract.
'''

FILES["tox.ini"] = '''\
# Each environment installs this backend (editable) into a fresh virtualenv, with torch (the
# build the scaffolding environment had; TILEWRIGHT_TORCH sets another requirement) and the
# tilewright distributions
# {{tilewright_origin}}.
[tox]
envlist = tests, conformance

[testenv]
package = editable
deps =
    pytest>=8
{{tilewright_deps}}
setenv =
    TILEWRIGHT_CACHE_DIR = {envtmpdir}/cache

[testenv:tests]
description = this backend's own tests
commands = pytest {toxinidir}/tests {posargs}

[testenv:conformance]
description = the tilewright conformance suite in codegen mode
commands = pytest -p no:cacheprovider --pyargs tilewright_sdk.conformance --tilewright-backend \
{{name}} --tilewright-mode codegen {posargs}
'''

FILES["PACKAGE/__init__.py"] = '''"""tilewright backend '{{name}}'."""

__version__ = "0.1.0"  # the distribution's version too (pyproject.toml reads it from here)
'''

FILES["PACKAGE/plugin.py"] = '''"""The entry point of {{dist}}: declares the backend '{{name}}'."""

from __future__ import annotations

from tilewright.plugin import API_VERSION, BackendModule, Capabilities, hookimpl

from . import __version__
from .codegen import CODEGEN
from .executor import EXECUTORS
from .lowering import RULES
from .pipeline import PIPELINE

BACKEND = BackendModule(
    name="{{name}}",
    version=__version__,
    api_version=API_VERSION,
    target_kinds=("{{name}}",),
    pipelines={"{{name}}": PIPELINE},
    codegens={"{{name}}": CODEGEN},
    executors=EXECUTORS,
    capabilities=Capabilities(
        tile_ops=frozenset(RULES),  # exactly the ops with a lowering rule
        dtypes=frozenset({"float32", "float16", "bfloat16", "int32"}),
        memory_scopes=frozenset({"global", "shared.dyn", "local.fragment", "local"}),
        features=frozenset(),
    ),
    description="backend {{name}} (scaffolded)",
)


@hookimpl
def tilewright_backends():
    """Called once when the plugin manager loads plugins."""
    return [BACKEND]
'''

FILES["PACKAGE/pipeline.py"] = '''\
"""The pass pipeline of '{{name}}': ordered, named phases of TVM passes.

The engine calls ``Phase.passes(ctx)`` when the phase runs and applies each returned pass under
its instrumentation, so every pass is visible to debug tools under the phase's name.
"""

from __future__ import annotations

from tilewright.plugin import PassPipeline, Phase
from tilewright.transform import lower_tile_ops

from .lowering import RULES

PIPELINE = PassPipeline((
    Phase("lower_tile_ops", lambda ctx: [lower_tile_ops(RULES, "{{name}}")],
          "each tile op becomes loops, by the rules in lowering.py"),
))
'''

FILES["PACKAGE/lowering.py"] = '''\
"""Lowering rules of '{{name}}': one function per tile op, in a table keyed by op name.

A rule receives the decoded op (``call.operands``, ``call.attrs``; regions have ``buffer``,
``starts`` and ``extents``) and a ``RuleContext`` (``ctx.analyzer``, ``ctx.can_prove``) and
returns the TVM statement replacing it. Errors raised here are reported at the user's line.
"""

from __future__ import annotations

from collections.abc import Callable

RULES: dict[str, Callable] = {}


def register_lowering(name: str):
    """``@register_lowering("copy")`` adds a rule for tile op ``copy``."""

    def wrap(fn):
        RULES[name] = fn
        return fn

    return wrap


# Example (see tilewright_cpu.lowering for complete rules):
#
# @register_lowering("fill")
# def lower_fill(call, ctx):
#     dst, value = call.operands["dst"], call.operands["value"]
#     ...
'''

FILES["PACKAGE/codegen.py"] = '''"""The codegen of '{{name}}': lowered IR to source text.

Replace ``generate`` with a real code generator; ``payload`` may carry anything the executors
of this backend understand.
"""

from __future__ import annotations

from tilewright.plugin import DeviceCodegen, GeneratedSource


def generate(mod, ctx) -> GeneratedSource:
    return GeneratedSource(text=mod.script(), language="tir", file_ext="py", payload=mod,
                           entry=ctx.func_name)


CODEGEN = DeviceCodegen(language="tir", file_ext="py", generate=generate)
'''

FILES["PACKAGE/executor.py"] = '''\
"""The executors of '{{name}}': generated source to a callable kernel.

``available()`` says whether the executor can run here and, if not, why and how to fix it.
``build(source, ctx, workdir)`` writes artifacts into ``workdir`` and returns a callable taking
the kernel's arguments; ``load(workdir, entry)`` (optional) rebuilds it from the cache.
"""

from __future__ import annotations

from tilewright.errors import TilewrightError
from tilewright.plugin import Availability, Executor


def _available() -> Availability:
    return Availability(False, "the '{{name}}' backend has no executor yet: implement "
                               "build() in {{package}}/executor.py")


def _build(source, ctx, workdir):
    raise TilewrightError("the '{{name}}' backend cannot run kernels yet")


EXECUTORS = (Executor(name="none", available=_available, build=_build,
                      doc="placeholder until a real executor exists"),)
'''

FILES["tests/conftest.py"] = '''\
"""Test setup of {{dist}}: a private kernel cache per test. Gate hardware here, in one
place, with one skip reason."""

import pytest


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path / "cache"))
'''

FILES["tests/test_contract.py"] = '''\
"""The backend contract, checked with the SDK's contract checks."""

import pytest
from tilewright.plugin import get_manager

try:
    from tilewright_sdk.conformance import contract
except ImportError as exc:  # a loud error, not a skipped test that looks like a pass
    raise ImportError("the contract tests need tilewright-sdk: pip install -e '.[test]' (or "
                      "run tox)") from exc


@pytest.fixture(scope="module")
def backend():
    backends = get_manager().backends()
    assert "{{name}}" in backends, "backend '{{name}}' is not installed: pip install -e ."
    return backends["{{name}}"]


@pytest.mark.parametrize("check", [
    "check_declarations", "check_capabilities", "check_target_claims",
    "check_target_declarations", "check_hook_declarations", "check_executors",
    "check_phases_visible", "check_unsupported_message", "check_timers", "check_arch_models",
])
def test_contract(backend, check):
    getattr(contract, check)(backend)
'''
