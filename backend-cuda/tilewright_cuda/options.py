"""The options of one CUDA compilation, read once from the target and the pass configs into a
frozen, hashable value that rules (``RuleContext.options``), transforms and codegen consult."""

from __future__ import annotations

import functools
import shlex
from dataclasses import dataclass

from tilewright.errors import ConfigError, KernelError
from tilewright.plugin.passconfig import fast_math

from . import arch as arch_mod
from . import keys


@dataclass(frozen=True)
class Options:
    """- ``arch``: the architecture compiled for (:class:`~tilewright_cuda.arch.Arch`);
    - ``tma``: portable copies in ``T.Pipelined`` loops may become TMA loads (sm_90+, unless
      ``cuda.disable_tma_lower``);
    - ``warp_specialized``: a kernel's only TMA-fed pipelined loop gets a producer warpgroup
      (sm_90a, unless ``cuda.disable_warp_specialized``);
    - ``tma_unswizzled``: a copy into a whole unswizzled (row-major) shared tile may be a TMA
      load too, one box of 16-byte multiple rows (``cuda.tma_unswizzled``, rules/tma);
    - ``multicast``: tiles pairs of blocks share are loaded once per pair
      (``cuda.tma_multicast``);
    - ``blocks_per_sm``: blocks each SM should hold at once (``cuda.blocks_per_sm``, 1-8);
    - ``prologue_copies``: lone cp.async copies right before a cp.async ``T.Pipelined`` loop
      join its prologue's first group instead of waiting on their own
      (``cuda.prologue_copies``, transforms/pipeline);
    - ``pingpong``: the two compute warpgroups of a warp-specialised loop take turns issuing
      their wgmma gemms (``cuda.wgmma_pingpong``, transforms/pipeline/tma);
    - ``producer_registers``: the setmaxnreg budget of that loop's producer warpgroup
      (``cuda.producer_registers``; 0: the compiler's own, ``pipeline.tma``), which the
      compute warpgroups' budget is what is left of;
    - ``compile_flags``: what the device compiler (NVRTC or nvcc) gets besides our own flags:
      ``--use_fast_math`` when the pass configs ask for fast math (``TL_ENABLE_FAST_MATH``,
      off by default as in TileLang), then the user's ``TL_DEVICE_COMPILE_FLAGS``."""

    arch: arch_mod.Arch
    tma: bool = True
    warp_specialized: bool = True
    multicast: bool = False
    tma_unswizzled: bool = False
    blocks_per_sm: int = 1
    pingpong: bool = False
    producer_registers: int = 0
    compile_flags: tuple[str, ...] = ()
    prologue_copies: bool = False

    def __post_init__(self):
        value = self.blocks_per_sm
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 8:
            raise KernelError(f"pass config {keys.BLOCKS_PER_SM} must be an integer from 1 to "
                              f"8, got {value!r}")
        value = self.producer_registers
        if isinstance(value, bool) or not isinstance(value, int) or \
                not (value == 0 or 24 <= value <= 256 and value % 8 == 0):
            raise KernelError(f"pass config {keys.PRODUCER_REGISTERS} must be 0 or a multiple "
                              f"of 8 from 24 to 256 (setmaxnreg's range), got {value!r}")


def of(ctx) -> Options:
    """The options of the compilation ``ctx`` (a ``CompileContext``)."""
    configs = ctx.pass_configs or {}
    return parse(ctx.target.option("arch"), configs.get(keys.DISABLE_TMA, False),
                 configs.get(keys.DISABLE_WARP_SPECIALIZED, False),
                 configs.get(keys.TMA_MULTICAST, False), configs.get(keys.BLOCKS_PER_SM, 1),
                 configs.get(keys.WGMMA_PINGPONG, False),
                 configs.get(keys.PRODUCER_REGISTERS, 0),
                 compile_flags(fast_math(configs), configs.get(keys.DEVICE_COMPILE_FLAGS)),
                 configs.get(keys.TMA_UNSWIZZLED, False),
                 configs.get(keys.PROLOGUE_COPIES, False))


# flags that choose what the cubin is for: the target's arch decides that
_ARCH_FLAGS = ("-arch", "--gpu-architecture", "-gencode", "--generate-code", "-code",
               "--gpu-code")


def compile_flags(fast: bool | None, user) -> tuple[str, ...]:
    """The device compiler's extra flags: ``--use_fast_math`` when ``fast``, then ``user``'s
    (``TL_DEVICE_COMPILE_FLAGS``: a string split as a shell would, or a list of strings). A
    flag that is not a string starting with ``-``, or one choosing the architecture, is a
    ConfigError."""
    if user is None:
        user = ()
    elif isinstance(user, str):
        user = shlex.split(user)
    elif not isinstance(user, list | tuple):
        raise ConfigError(f"pass config TL_DEVICE_COMPILE_FLAGS ({keys.DEVICE_COMPILE_FLAGS}) "
                          f"takes a string or a list of flags, got {type(user).__name__}")
    for flag in user:
        if not isinstance(flag, str) or not flag.startswith("-"):
            raise ConfigError(f"TL_DEVICE_COMPILE_FLAGS: {flag!r} is not a compiler flag "
                              "(flags start with '-')")
        if flag.split("=")[0] in _ARCH_FLAGS:
            raise ConfigError(f"TL_DEVICE_COMPILE_FLAGS: {flag!r} chooses the architecture, "
                              "which the target gives: use target='cuda -arch=sm_XX'")
    return (("--use_fast_math",) if fast else ()) + tuple(user)


@functools.lru_cache(maxsize=64, typed=True)
def parse(arch: str | None, disable_tma: bool = False, disable_ws: bool = False,
          multicast: bool = False, blocks_per_sm: int = 1, pingpong: bool = False,
          producer_registers: int = 0, flags: tuple[str, ...] = (),
          tma_unswizzled: bool = False, prologue_copies: bool = False) -> Options:
    chosen = arch_mod.resolve(arch)
    return Options(chosen, tma=chosen.sm >= 90 and not disable_tma,
                   warp_specialized=chosen.sm >= 90 and chosen.name.endswith("a") and
                   not disable_ws, multicast=bool(multicast), blocks_per_sm=blocks_per_sm,
                   pingpong=bool(pingpong), producer_registers=producer_registers,
                   compile_flags=flags, tma_unswizzled=bool(tma_unswizzled),
                   prologue_copies=bool(prologue_copies))
