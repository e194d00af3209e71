"""What a catalogue row is (:class:`Kernel`), what one test of it is (:class:`Case`), and the
input generators the rows share."""

# No `from __future__ import annotations`: T.prim_func evaluates the parameter annotations,
# which name the factory's local sizes.
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field, replace

FLOATS = ("float32", "float16", "bfloat16")
SIGNED = ("int8", "int16", "int32", "int64")
UNSIGNED = ("uint8", "uint16", "uint32", "uint64")
INTEGERS = SIGNED + UNSIGNED
FLOAT8 = ("float8_e4m3fn", "float8_e5m2")
# every dtype of the language, in the order the reports list them
ALL_DTYPES = ("bool", *INTEGERS, "float16", "bfloat16", "float32", "float64", *FLOAT8,
              "float8_e8m0fnu", "float4_e2m1fn")
# the dtypes torch converts to and from (float4_e2m1fn_x2 tensors it only holds)
TORCH_CASTS = tuple(d for d in ALL_DTYPES if d != "float4_e2m1fn")


@dataclass(frozen=True)
class Kernel:
    """One row of the catalogue: a kernel and everything needed to check it.

    - ``names``: the public names of ``tilewright.language`` the kernel exercises (the
      coverage test checks every computing export appears in some row);
    - ``ops``: the tile ops it uses (capabilities decide which backends support it);
    - ``make(dtype, **dims) -> PrimFunc``; ``dims`` come from a ``shapes`` variant;
    - ``inputs(torch, gen, dtype, **dims) -> list`` of the arguments the kernel is called with;
    - ``reference(*inputs) -> list`` of expected outputs (float64 copies of float inputs);
    - ``out_idx``: the parameters the kernel allocates and returns (eager kernels declare
      theirs with ``T.empty``: give ``()``); ``inplace``: positions of arguments the kernel
      writes (checked after the call, e.g. atomics' accumulators);
    - ``reduction(**dims)``: the longest reduction behind an output element, for tolerances;
    - ``dtype_dims``: dims that list dtypes (a cast's targets); the runner keeps those the
      backend declares, so a backend lacking one dtype still runs the others;
    - ``ref_args``: dims (or ``"dtype"``) the reference also takes, as keywords;
    - ``accumulate_in_dtype``: reductions accumulate in the case's dtype (the tolerance uses
      its unit roundoff for the sum, not float32's);
    - ``exact``: outputs must equal the reference exactly (NaN matches NaN), as conversions
      must;
    - ``approximate``: the relative error (and, for outputs near zero, the absolute error) an
      output may have where that is more than its dtype's tolerance: the bound of an
      approximate function's contract (TileLang's fast math); 0: none.
    """

    name: str
    names: tuple[str, ...]
    ops: tuple[str, ...]
    make: Callable
    inputs: Callable
    reference: Callable
    shapes: dict
    out_idx: tuple[int, ...] = (-1,)
    inplace: tuple[int, ...] = ()
    reduction: Callable = lambda **dims: 1
    features: tuple[str, ...] = ()
    dtypes: tuple[str, ...] = FLOATS
    dtype_dims: tuple[str, ...] = ()
    ref_args: tuple[str, ...] = ()
    accumulate_in_dtype: bool = False
    exact: bool = False
    approximate: float = 0.0
    doc: str = ""


@dataclass(frozen=True)
class Case:
    """A kernel at one dtype and one shape variant: one conformance test."""

    kernel: Kernel
    dtype: str
    variant: str
    dims: dict = field(hash=False, compare=False)

    @property
    def id(self) -> str:
        return f"{self.kernel.name}-{self.dtype}-{self.variant}"

    @property
    def features(self) -> tuple[str, ...]:
        extra = {"partial": ("partial_tiles",), "dynamic": ("dynamic_shapes",)}
        return tuple(sorted({*self.kernel.features, *extra.get(self.variant, ())}))

    def reference(self, inputs: list, **dims) -> list:
        """The expected outputs for ``inputs`` (float64 copies of the float ones)."""
        from tilewright.testing import float64_reference

        values = {"dtype": self.dtype, **self.dims, **dims}
        return float64_reference(self.kernel.reference, *inputs,
                                 **{k: values[k] for k in self.kernel.ref_args})

    def narrowed(self, declared) -> "Case":
        """This case with its dtype-list dims cut to the ``declared`` dtypes."""
        if not self.kernel.dtype_dims:
            return self
        dims = dict(self.dims)
        for key in self.kernel.dtype_dims:
            dims[key] = tuple(d for d in dims[key] if d in declared)
        return replace(self, dims=dims)


def eager(fn, **consts):
    """The PrimFunc of an eager-style kernel ``fn`` (tensors declared in its body) with its
    ``T.const`` symbols bound to ``consts``."""
    from tilewright.language.kernel import trace_eager

    params = inspect.signature(fn).parameters
    return trace_eager(fn, dict.fromkeys(params), consts)[0]


def rand(torch, gen, shape, dtype, low=None, high=None):
    """A random tensor of ``dtype``: standard normal for floats (``low``/``high`` give a
    uniform range instead), uniform integers in ``[low, high]`` for integers and bool."""
    shape = tuple(shape)
    if dtype == "bool":
        return torch.randint(0, 2, shape, generator=gen).bool()
    if dtype.startswith(("int", "uint")):
        lo = -9 if low is None else low
        hi = 9 if high is None else high
        if dtype.startswith("uint"):
            lo = max(lo, 0)
        return torch.randint(lo, hi + 1, shape, generator=gen).to(getattr(torch, dtype))
    if low is None:
        values = torch.randn(*shape, generator=gen)
    else:
        values = torch.rand(*shape, generator=gen) * (high - low) + low
    return values.to(getattr(torch, dtype))


def two_d(torch, gen, dtype, M, N, **_):
    return [rand(torch, gen, (M, N), dtype)]
