"""The frozen declarations a plugin returns. Each validates itself on construction, so a
broken plugin is reported when it loads, not in the middle of a compilation."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ..errors import PluginError

API_VERSION = "1.0"
_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")
_TILELANG_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")


def _check_name(kind: str, name: str) -> None:
    if not isinstance(name, str) or not _NAME.match(name):
        raise PluginError(f"{kind} name {name!r} must match {_NAME.pattern}")


def _freeze(mapping) -> Mapping:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True)
class Phase:
    """A named step of a pipeline: a factory returning the TVM passes to run, in order.

    ``passes`` is called with the compile context (target, pass configs) when the phase runs.
    """

    name: str
    passes: Callable[[Any], list]
    doc: str = ""

    def __post_init__(self):
        _check_name("phase", self.name)
        if not callable(self.passes):
            raise PluginError(f"phase {self.name!r}: passes must be callable")


@dataclass(frozen=True)
class PassPipeline:
    """The ordered, named phases that take a tile program to codegen-ready IR."""

    phases: tuple[Phase, ...]

    def __post_init__(self):
        object.__setattr__(self, "phases", tuple(self.phases))
        names = [p.name for p in self.phases]
        if not names:
            raise PluginError("a pass pipeline needs at least one phase")
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise PluginError(f"pipeline phase names must be unique; repeated: {sorted(dup)}")


@dataclass(frozen=True)
class GeneratedSource:
    """What a codegen produced: source text in ``language`` plus an opaque payload (for
    example a built TVM module) that the executors of the same backend understand."""

    text: str
    language: str
    file_ext: str
    payload: Any = None
    entry: str = "main"


@dataclass(frozen=True)
class DeviceCodegen:
    """Turns lowered IR into source: ``generate(mod, ctx) -> GeneratedSource``."""

    language: str
    file_ext: str
    generate: Callable[[Any, Any], GeneratedSource]

    def __post_init__(self):
        if not callable(self.generate):
            raise PluginError(f"codegen for {self.language!r}: generate must be callable")


@dataclass(frozen=True)
class Availability:
    """Whether an executor (or backend) can run here, and why not."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


@dataclass(frozen=True)
class Executor:
    """Builds generated source into something callable, and reloads it from the cache.

    - ``available() -> Availability``
    - ``build(source, ctx, workdir) -> kernel`` writes its artifact files into ``workdir``
      (a folder the cache keeps) and returns a callable taking the kernel's arguments;
    - ``load(workdir, entry) -> kernel`` rebuilds the callable from those files;
    - ``from_source``: it compiles ``GeneratedSource.text`` (NVRTC, nvcc, a C compiler ...), so
      an edited source (the lower trace's edit-and-recompile workflow) takes effect;
    - ``fingerprint() -> str``: what else decides the binary besides the source and the
      backend's own files -- the toolchain's version (``nvrtc 13.0``, ``nvcc V13.0.48``), the
      host CPU it targets. The disk-cache key includes it, so changing it recompiles.
    """

    name: str
    available: Callable[[], Availability]
    build: Callable[[GeneratedSource, Any, Any], Callable]
    load: Callable[[Any, str], Callable] | None = None
    doc: str = ""
    from_source: bool = False
    fingerprint: Callable[[], str] | None = None

    def __post_init__(self):
        _check_name("executor", self.name)
        for attr in ("available", "build"):
            if not callable(getattr(self, attr)):
                raise PluginError(f"executor {self.name!r}: {attr} must be callable")
        if self.fingerprint is not None and not callable(self.fingerprint):
            raise PluginError(f"executor {self.name!r}: fingerprint must be callable")


VECTOR_BITS = 128  # the widest vector of a backend with 'vector_dtypes' (CUDA's float4, uint4)
# a vector dtype's name: lanes of an 8- to 32-bit integer or a 16- or 32-bit float
_VECTOR = re.compile(r"(?P<scalar>u?int(?P<bits>8|16|32)|b?float(?P<fbits>16|32))x(?P<lanes>\d+)")


@dataclass(frozen=True)
class Capabilities:
    """What a backend supports, as data: the core checks kernels against it."""

    tile_ops: frozenset[str]
    dtypes: frozenset[str]
    memory_scopes: frozenset[str] = frozenset()
    features: frozenset[str] = frozenset()
    # op -> the input dtypes this backend supports for it, where narrower than ``dtypes``
    # (an Ascend cube GEMM takes float16/bfloat16 operands but not every float32 layout)
    op_dtypes: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def __post_init__(self):
        for attr in ("tile_ops", "dtypes", "memory_scopes", "features"):
            object.__setattr__(self, attr, frozenset(getattr(self, attr)))
        limits = {}
        for op, dtypes in dict(self.op_dtypes).items():
            if op not in self.tile_ops:
                raise PluginError(f"capabilities: op_dtypes names op {op!r}, which tile_ops "
                                  "does not declare")
            limits[op] = frozenset(dtypes)
        object.__setattr__(self, "op_dtypes", MappingProxyType(limits))

    def supports(self, op: str, dtype: str) -> bool:
        """Whether ``op`` is declared for inputs of ``dtype``."""
        return op in self.tile_ops and dtype in self.op_dtypes.get(op, self.dtypes)

    def computes(self, dtype: str) -> bool:
        """Whether the backend computes values of ``dtype``: one of ``dtypes``, or a vector of
        one (``float32x2`` ...) where it declares the feature ``vector_dtypes`` (up to
        ``VECTOR_BITS`` in all; any width the language has with ``wide_vectors`` too)."""
        if dtype in self.dtypes:
            return True
        vector = _VECTOR.fullmatch(dtype)
        if vector is None or vector["scalar"] not in self.dtypes or \
                "vector_dtypes" not in self.features:
            return False
        bits = int(vector["bits"] or vector["fbits"]) * int(vector["lanes"])
        return "wide_vectors" in self.features or bits <= VECTOR_BITS


@dataclass(frozen=True)
class BackendModule:
    """Everything the core needs to compile for one backend."""

    name: str
    version: str
    api_version: str
    target_kinds: tuple[str, ...]
    pipelines: Mapping[str, PassPipeline]
    codegens: Mapping[str, DeviceCodegen]
    executors: tuple[Executor, ...]
    capabilities: Capabilities
    accelerator: bool = False
    device: str = "cpu"
    device_available: Callable[[], Availability] = field(default=lambda: Availability(True))
    target_options: tuple[str, ...] = ()
    description: str = ""
    # ``target_defaults(kind) -> {option: value}`` fills in the options a target string leaves
    # out (plain ``cuda`` -> ``-arch`` of this machine), so the resolved target -- and with it
    # the disk-cache key -- always names what the kernel is compiled for
    target_defaults: Callable[[str], Mapping[str, str]] | None = None

    def __post_init__(self):
        _check_name("backend", self.name)
        object.__setattr__(self, "target_kinds", tuple(self.target_kinds))
        object.__setattr__(self, "executors", tuple(self.executors))
        object.__setattr__(self, "pipelines", _freeze(self.pipelines))
        object.__setattr__(self, "codegens", _freeze(self.codegens))
        if not self.target_kinds:
            raise PluginError(f"backend {self.name!r} claims no target kinds")
        for kind in self.target_kinds:
            _check_name("target kind", kind)
            if not isinstance(self.pipelines.get(kind), PassPipeline):
                raise PluginError(f"backend {self.name!r}: no PassPipeline for target {kind!r}")
            if not isinstance(self.codegens.get(kind), DeviceCodegen):
                raise PluginError(f"backend {self.name!r}: no DeviceCodegen for target {kind!r}")
        if not self.executors or not all(isinstance(e, Executor) for e in self.executors):
            raise PluginError(f"backend {self.name!r} needs at least one Executor")
        if not isinstance(self.capabilities, Capabilities):
            raise PluginError(f"backend {self.name!r}: capabilities must be a Capabilities")
        for attr in ("device_available", "target_defaults"):
            value = getattr(self, attr)
            if not callable(value) and (value is not None or attr == "device_available"):
                raise PluginError(f"backend {self.name!r}: {attr} must be callable")
        check_api_version(self.name, self.api_version)


def check_api_version(owner: str, version: str) -> None:
    """Refuse a contract version this core cannot serve, naming both versions."""
    try:
        major, minor = (int(x) for x in str(version).split(".")[:2])
        core_major, core_minor = (int(x) for x in API_VERSION.split("."))
    except ValueError:
        raise PluginError(f"{owner}: api_version {version!r} is not 'MAJOR.MINOR'") from None
    if major != core_major or minor > core_minor:
        raise PluginError(f"{owner} declares plugin api_version {version} but this tilewright "
                          f"core implements api_version {API_VERSION}")


@dataclass(frozen=True)
class PassConfigKey:
    """A ``pass_configs`` key a plugin (or the core) understands.

    ``tilelang`` is the name of the TileLang ``PassConfigKey`` member with the same meaning
    (``"TL_ENABLE_DUMP_IR"``) and ``tilelang_value`` that member's string
    (``"tl.enable_dump_ir"``): ``tilewright.PassConfigKey.<tilelang>`` gives ``name``, and
    ``pass_configs`` accept ``tilelang_value`` as another spelling of ``name``.
    """

    name: str
    type: type
    default: Any
    doc: str = ""
    owner: str = "core"
    tilelang: str = ""
    tilelang_value: str = ""

    def __post_init__(self):
        if bool(self.tilelang) != bool(self.tilelang_value):
            raise PluginError(f"pass config key {self.name!r}: give both tilelang (the TileLang "
                              "member name) and tilelang_value (its string), or neither")
        if self.tilelang and not _TILELANG_NAME.match(self.tilelang):
            raise PluginError(f"pass config key {self.name!r}: tilelang name "
                              f"{self.tilelang!r} must match {_TILELANG_NAME.pattern}")


@dataclass(frozen=True)
class Timer:
    """A way for ``do_bench`` to time a callable:
    ``measure(fn, n_warmup, n_repeat, flush=None) -> list of milliseconds``; ``flush`` (when
    given) is called before each timed repetition to evict caches."""

    name: str
    available: Callable[[], Availability]
    measure: Callable[..., list]
    doc: str = ""


@dataclass(frozen=True)
class ArchModel:
    """A device for the roofline analyser and the tile-shape recommender (carver).

    ``peak_tflops`` maps a compute dtype (``float16``, ``float32`` ...) to its peak; dtypes it
    lacks use the ``float32`` entry. The on-chip fields are per compute unit (SM, AI core, CPU
    core); 0 means unknown, and the carver refuses a model that lacks what it needs.
    ``mma_shape`` is the (m, n, k) granularity of the matrix instruction; ``transaction_bytes``
    the global-memory access granularity. ``block_shared_memory_bytes`` is the most one block
    (one program instance) may use, when that is below the per-unit ``shared_memory_bytes``
    (0: the same). ``details`` holds further facts for tools and reports, by convention
    ``compute_capability``, ``warp_size``, ``max_threads_per_block``, ``max_threads_per_unit``,
    ``registers_per_unit``, ``l2_bytes`` and ``mma_shapes`` (every matrix instruction shape).
    """

    name: str
    peak_tflops: Mapping[str, float]
    bandwidth_gbps: float
    description: str = ""
    compute_units: int = 0
    shared_memory_bytes: int = 0
    register_budget: int = 0
    mma_shape: tuple[int, int, int] = (16, 16, 16)
    transaction_bytes: int = 128
    unit_partitions: int = 4
    block_shared_memory_bytes: int = 0
    details: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.strip():
            raise PluginError(f"arch model name must be a non-empty string, got {self.name!r}")
        object.__setattr__(self, "peak_tflops", _freeze(self.peak_tflops))
        object.__setattr__(self, "details", _freeze(self.details))
        object.__setattr__(self, "mma_shape", tuple(self.mma_shape))
        if not self.peak_tflops or any(not v > 0 for v in self.peak_tflops.values()):
            raise PluginError(f"arch model {self.name!r}: peak_tflops needs positive entries")
        if not self.bandwidth_gbps > 0:
            raise PluginError(f"arch model {self.name!r}: bandwidth_gbps must be positive")


@dataclass(frozen=True)
class LanguageExtension:
    """A dialect module (``import <module> as T``) and the backends that lower its ops."""

    name: str
    module: str
    backends: tuple[str, ...]


@dataclass(frozen=True)
class CliTool:
    """A ``tilewright <name>`` subcommand: ``run(argv) -> exit code``."""

    name: str
    help: str
    run: Callable[[list[str]], int]
