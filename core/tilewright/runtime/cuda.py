"""Launching cubins through the CUDA driver API (cuda-python) on torch's current stream.

Used by exported bundles and by the CUDA backend's executors alike. Nothing here needs the
compiler; a GPU is needed only when a kernel is called.
"""

from __future__ import annotations

import ctypes
import json
import re
import threading
from pathlib import Path

from .bundle import Bundle, BundleError, write_bundle
from .call import KernelCall
from .expr import ExprError
from .expr import parse as parse_expr
from .signature import KernelSignature, SignatureError

_CTYPES = {"int32": ctypes.c_int32, "int64": ctypes.c_int64, "uint32": ctypes.c_uint32,
           "uint64": ctypes.c_uint64, "float32": ctypes.c_float, "float64": ctypes.c_double,
           "bool": ctypes.c_bool, "int8": ctypes.c_int8, "int16": ctypes.c_int16,
           "handle": ctypes.c_void_p}  # a T.ptr address (KernelCall makes it a c_void_p)
_SMEM_DEFAULT_LIMIT = 48 * 1024


def _driver():
    from cuda.bindings import driver

    return driver


def _check(result, what: str):
    driver = _driver()
    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != driver.CUresult.CUDA_SUCCESS:
        _, name = driver.cuGetErrorName(err)
        raise RuntimeError(f"{what} failed: {name.decode() if isinstance(name, bytes) else name}")
    return rest[0] if len(rest) == 1 else rest


def _ensure_context(device_index: int):
    """Make torch's (primary) context of ``device_index`` current on this thread."""
    import torch

    torch.cuda.init()
    driver = _driver()
    ctx = _check(driver.cuCtxGetCurrent(), "cuCtxGetCurrent")
    if ctx is None or int(ctx) == 0:
        device = _check(driver.cuDeviceGet(device_index), "cuDeviceGet")
        ctx = _check(driver.cuDevicePrimaryCtxRetain(device), "cuDevicePrimaryCtxRetain")
        _check(driver.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")


_TMA_DTYPES = {"float16": "FLOAT16", "bfloat16": "BFLOAT16", "float32": "FLOAT32",
               "float64": "FLOAT64", "int32": "INT32", "int64": "INT64", "uint8": "UINT8",
               "int8": "UINT8", "float8_e4m3fn": "UINT8", "float8_e5m2": "UINT8",
               "float8_e8m0fnu": "UINT8",
               "uint16": "UINT16", "int16": "UINT16", "uint32": "UINT32",
               "uint64": "UINT64"}
_TMA_SWIZZLE = {0: "NONE", 32: "32B", 64: "64B", 128: "128B"}
_MAX_TENSOR_MAPS = 256  # descriptors kept per kernel (128 bytes each), for tensors seen again


def tensor_map_layout(p: dict, tensor) -> tuple[list, list]:
    """(dims, byte strides) of ``tensor``, innermost first, as TMA wants them; a layout TMA
    cannot address is an error naming the tensor. With ``fold`` (``c``) in ``p``, the map is
    of a view: the innermost dimension of ``n`` elements is two, ``[c, n / c]``, with strides
    of one element and of ``c`` elements."""
    item, fold = tensor.element_size(), p.get("fold")
    rank = p["rank"] - 1 if fold else p["rank"]
    if tensor.dim() != rank:
        raise RuntimeError(f"TMA descriptor of {p['tensor']!r}: expected a {rank}-D "
                           f"tensor, got {tensor.dim()}-D")
    dims = [int(d) for d in reversed(tensor.shape)]
    strides = [int(s) * item for s in reversed(tensor.stride())]
    if tensor.dim() and tensor.stride()[-1] != 1:
        raise RuntimeError(f"TMA needs {p['tensor']!r} contiguous in its last dimension")
    if fold:
        if dims[0] % fold:
            raise RuntimeError(f"TMA descriptor of {p['tensor']!r}: the kernel reads its rows "
                               f"of {dims[0]} elements as parts of {fold}, which needs a "
                               f"multiple of {fold}")
        dims = [fold, dims[0] // fold, *dims[1:]]
        strides = [item, fold * item, *strides[1:]]
    if tensor.data_ptr() % 16 or any(s % 16 for s in strides[1:]):
        raise RuntimeError(f"TMA needs {p['tensor']!r} 16-byte aligned with row strides a "
                           f"multiple of 16 bytes; got strides {strides[1:]} bytes")
    return dims, strides


def encode_tensor_map(p: dict, tensor):
    """``cuTensorMapEncodeTiled`` for one TMA parameter of a launch description."""
    driver = _driver()
    dims, strides = tensor_map_layout(p, tensor)
    enum = driver.CUtensorMapDataType
    return _check(driver.cuTensorMapEncodeTiled(
        getattr(enum, f"CU_TENSOR_MAP_DATA_TYPE_{_TMA_DTYPES[p['dtype']]}"), p["rank"],
        tensor.data_ptr(), [driver.cuuint64_t(d) for d in dims],
        [driver.cuuint64_t(s) for s in strides[1:]],
        [driver.cuuint32_t(b) for b in p["box"]], [driver.cuuint32_t(1)] * p["rank"],
        driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        getattr(driver.CUtensorMapSwizzle,
                f"CU_TENSOR_MAP_SWIZZLE_{_TMA_SWIZZLE[p['swizzle']]}"),
        driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
        f"cuTensorMapEncodeTiled({p['tensor']})")


class CubinFunction:
    """The ``__global__`` functions of a cubin plus how to launch them.

    ``launch`` (from the backend's codegen) holds ``entry``, ``params`` (tensor / scalar /
    symbol, in device-parameter order), ``symbols`` (where each symbol of the grid is read:
    ``[kernel parameter, dimension]`` for a tensor's extent, ``[kernel parameter, dimension,
    1]`` for its stride, ``[kernel parameter]`` for an integer scalar argument; see
    :func:`symbol_values`), ``grid`` (three Python expressions
    over the symbols), ``block`` and ``dynamic_smem_bytes``. A kernel sequence (several
    ``with T.Kernel`` blocks) has ``symbols``, ``kernels`` (one such description per block,
    launched in order) and ``workspaces`` (``name``, ``dtype`` and ``bytes``, an expression
    over the symbols: a buffer allocated for the call, passed to the blocks that name it as a
    ``workspace`` parameter). Called with every kernel parameter (inputs and outputs) in
    kernel order. The module is loaded on first call, so building needs no GPU. A kernel
    description with ``cooperative`` (a kernel that synchronises its whole grid) is launched
    with ``cuLaunchCooperativeKernel`` after checking that its grid fits on the GPU at once;
    one with ``pdl`` (a kernel that waits for the kernels before it with ``T.pdl_sync``) with
    ``cuLaunchKernelEx`` and programmatic stream serialisation, so that it may start before
    the previous kernel on the stream has finished.
    """

    def __init__(self, cubin: bytes, launch: dict, source: str = ""):
        self.launch = check_launch(launch)
        self.cubin, self.source = cubin, source
        self.kernels = kernels_of(launch)
        self._functions: dict[int, object] = {}
        self._lock = threading.Lock()
        self._grids = [[parse_expr(g, launch["symbols"]) for g in k["grid"]]
                       for k in self.kernels]
        self._workspaces = [parse_expr(w["bytes"], launch["symbols"])
                            for w in launch.get("workspaces", ())]
        self._maps: dict = {}

    def _function(self, device_index: int):
        """(module, [function of each kernel]) on the device, loaded once."""
        found = self._functions.get(device_index)
        if found is not None:
            return found
        with self._lock:
            driver = _driver()
            _ensure_context(device_index)
            module = _check(driver.cuModuleLoadData(self.cubin), "cuModuleLoadData")
            fns = []
            for kernel in self.kernels:
                fn = _check(driver.cuModuleGetFunction(module, kernel["entry"].encode()),
                            f"cuModuleGetFunction({kernel['entry']})")
                smem = int(kernel["dynamic_smem_bytes"])
                if smem > _SMEM_DEFAULT_LIMIT:
                    attr = driver.CUfunction_attribute.\
                        CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
                    _check(driver.cuFuncSetAttribute(fn, attr, smem),
                           f"setting {smem} bytes of dynamic shared memory")
                fns.append(fn)
            self._functions[device_index] = (module, fns)
            return self._functions[device_index]

    def symbols(self, args) -> dict:
        return symbol_values(self.launch["symbols"], args)

    def __call__(self, *args):
        import torch

        device = next((a.device for a in args if isinstance(a, torch.Tensor)), None)
        if device is None and torch.cuda.is_available() and any(
                p.get("dtype") == "handle" for k in self.kernels for p in k["params"]):
            device = torch.device("cuda", torch.cuda.current_device())  # addresses only
        if device is None or device.type != "cuda":
            raise RuntimeError("CUDA kernels take CUDA tensors; got none on a CUDA device")
        _, fns = self._function(device.index or 0)
        symbols = self.symbols(args)
        # freed when the call returns: the caching allocator reuses the memory only for work
        # queued after the launches on this stream
        spaces = [torch.empty(max(1, size(symbols)), dtype=torch.uint8, device=device)
                  for size in self._workspaces]
        stream = _driver().CUstream(torch.cuda.current_stream(device).cuda_stream)
        for index, (kernel, fn, grid) in enumerate(zip(self.kernels, fns, self._grids)):
            grid = [g(symbols) for g in grid]
            if min(grid) > 0:  # else an empty problem: nothing to launch
                if kernel.get("cooperative"):
                    self._check_resident(kernel, fn, grid, device)
                self._launch(index, kernel, fn, grid, args, symbols, spaces, stream)

    def _check_resident(self, kernel: dict, fn, grid, device) -> None:
        """Refuses a cooperative launch whose grid does not fit on the GPU at once."""
        import torch

        driver = _driver()
        threads = kernel["block"][0] * kernel["block"][1] * kernel["block"][2]
        per_sm = _check(driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(
            fn, threads, int(kernel["dynamic_smem_bytes"])), "cuOccupancyMaxActiveBlocks")
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        problem = cooperative_grid_error(kernel, grid, int(per_sm), sms)
        if problem is not None:
            raise RuntimeError(problem)

    def _launch(self, index: int, kernel: dict, fn, grid, args, symbols, spaces, stream):
        cluster = kernel.get("cluster_dims")
        if cluster and any(g % c for g, c in zip(grid, cluster)):
            raise RuntimeError(f"{kernel['entry']}: grid {grid} is not a multiple of its "
                               f"thread-block cluster {cluster}")
        values, types = [], []
        for p in kernel["params"]:
            if p["kind"] == "tensor":
                values.append(args[p["param"]].data_ptr())
                types.append(ctypes.c_void_p)
            elif p["kind"] == "workspace":
                values.append(spaces[p["workspace"]].data_ptr())
                types.append(ctypes.c_void_p)
            elif p["kind"] == "scalar":  # a T.ptr address: an int, a c_void_p or a tensor
                value = args[p["param"]]
                values.append(value.value if isinstance(value, ctypes.c_void_p) else
                              value.data_ptr() if hasattr(value, "data_ptr") else value)
                types.append(_CTYPES[p["dtype"]])
            elif p["kind"] == "tensormap":  # a TMA descriptor, passed by value
                values.append(self._tensor_map(index, p, args[p["param"]]))
                types.append(None)
            else:
                values.append(symbols[p["name"]])
                types.append(_CTYPES[p["dtype"]])
        driver = _driver()
        bx, by, bz = kernel["block"]
        if kernel.get("cooperative"):
            _check(driver.cuLaunchCooperativeKernel(
                fn, *grid, bx, by, bz, int(kernel["dynamic_smem_bytes"]), stream,
                (tuple(values), tuple(types))), f"launching {kernel['entry']} cooperatively")
            return
        if kernel.get("pdl"):
            _check(driver.cuLaunchKernelEx(_pdl_config(grid, kernel, stream), fn,
                                           (tuple(values), tuple(types)), 0),
                   f"launching {kernel['entry']} (programmatic dependent launch)")
            return
        _check(driver.cuLaunchKernel(fn, *grid, bx, by, bz, int(kernel["dynamic_smem_bytes"]),
                                     stream, (tuple(values), tuple(types)), 0),
               f"launching {kernel['entry']}")

    def _tensor_map(self, index: int, p: dict, tensor):
        """The ``CUtensorMap`` of a TMA parameter of kernel ``index`` for ``tensor`` (cached
        per address, shape and strides): box, swizzle and dtype from the launch description."""
        key = (index, p["name"], tensor.data_ptr(), tuple(tensor.shape), tuple(tensor.stride()))
        cached = self._maps.get(key)
        if cached is None:
            if len(self._maps) >= _MAX_TENSOR_MAPS:  # the oldest first: dicts keep order
                self._maps.pop(next(iter(self._maps)))
            cached = self._maps[key] = encode_tensor_map(p, tensor)
        return cached

    # -- bundles --------------------------------------------------------------------------
    def export(self, path, signature: dict, extra: dict | None = None) -> Path:
        """Write a bundle: ``kernel.cubin``, ``launch.json``, ``signature.json``, the CUDA
        source for reference, ``extra`` files (role -> (name, bytes)), and ``manifest.json``
        with the size and sha256 of each."""
        files = {"binary": ("kernel.cubin", self.cubin),
                 "launch": ("launch.json", json.dumps(self.launch, indent=1).encode()),
                 "signature": ("signature.json", json.dumps(signature, indent=1).encode()),
                 "source": ("kernel.cu", self.source.encode()), **(extra or {})}
        return write_bundle(path, "cubin", files, arch=self.launch.get("arch"),
                            entry=",".join(k["entry"] for k in self.kernels))


def _pdl_config(grid, kernel: dict, stream):
    """The ``CUlaunchConfig`` of a programmatic dependent launch of ``kernel`` on ``grid``."""
    driver = _driver()
    attr = driver.CUlaunchAttribute()
    attr.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    attr.value.programmaticStreamSerializationAllowed = 1
    config = driver.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = grid
    config.blockDimX, config.blockDimY, config.blockDimZ = kernel["block"]
    config.sharedMemBytes = int(kernel["dynamic_smem_bytes"])
    config.hStream = stream
    config.attrs = [attr]
    config.numAttrs = 1
    return config


def cooperative_grid_error(kernel: dict, grid, per_sm: int, sms: int) -> str | None:
    """Why a cooperative launch of ``kernel`` on ``grid`` cannot run (every block must be
    resident at once: at most ``per_sm`` blocks on each of ``sms`` multiprocessors), None when
    it can."""
    blocks = grid[0] * grid[1] * grid[2]
    limit = per_sm * sms
    if blocks <= limit:
        return None
    threads = kernel["block"][0] * kernel["block"][1] * kernel["block"][2]
    return (f"{kernel['entry']} synchronises its whole grid (T.sync_grid), so every block must "
            f"be resident at once (a cooperative launch); grid {list(grid)} is {blocks} blocks, "
            f"but this GPU holds at most {limit} ({per_sm} per multiprocessor x {sms} "
            f"multiprocessors, with {threads} threads and {kernel['dynamic_smem_bytes']} bytes "
            f"of dynamic shared memory per block): launch at most {limit} blocks and loop over "
            "the work inside the kernel (T.Persistent)")


_ENTRY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,1023}$")
_PARAM_KINDS = ("tensor", "scalar", "tensormap", "symbol", "workspace")


def _int(value, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def symbol_values(sources: dict, args) -> dict:
    """Each launch symbol's value for a call on ``args`` (every kernel parameter in order):
    ``[param, dim]`` is the extent of a tensor argument, ``[param, dim, 1]`` its stride (in
    elements: a ``T.StridedTensor``'s), ``[param]`` an integer scalar argument itself (a grid
    such as ``T.ceildiv(max_seqlen, 128)`` over a scalar)."""
    return {name: int(args[src[0]].shape[src[1]]) if len(src) == 2 else
            int(args[src[0]].stride(src[1])) if len(src) == 3 else int(args[src[0]])
            for name, src in sources.items()}


def kernels_of(launch: dict) -> list[dict]:
    """The descriptions of the kernels ``launch`` runs, in launch order."""
    return launch["kernels"] if "kernels" in launch else [launch]


_MAX_KERNELS = 64


def check_launch(launch) -> dict:
    """``launch`` if it is a well-formed launch description; a ValueError naming the field
    otherwise. Nothing in it is executed: grids and sizes are parsed by
    :mod:`tilewright.runtime.expr`."""
    def expect(ok, what):
        if not ok:
            raise ValueError(f"malformed launch description: {what}")

    def expression(text, what):
        try:
            parse_expr(text, symbols)
        except ExprError as exc:
            raise ValueError(f"malformed launch description: {what}: {exc}") from None

    expect(isinstance(launch, dict), "not an object")
    symbols = launch.get("symbols")
    expect(isinstance(symbols, dict) and all(
        isinstance(k, str) and k.isidentifier() and isinstance(v, list) and
        len(v) in (1, 2, 3) and all(_int(x, 0, 1 << 16) for x in v) and
        (len(v) < 3 or v[2] == 1) for k, v in symbols.items()), "symbols")
    spaces = launch.get("workspaces", [])
    expect(isinstance(spaces, list) and len(spaces) <= 1024, "workspaces")
    for w in spaces:
        expect(isinstance(w, dict) and isinstance(w.get("name"), str) and
               isinstance(w.get("dtype"), str) and isinstance(w.get("bytes"), str),
               f"workspace {w!r}")
        expression(w["bytes"], f"workspace {w['name']}")
    if "kernels" in launch:
        expect(isinstance(launch["kernels"], list) and
               1 <= len(launch["kernels"]) <= _MAX_KERNELS, "kernels")
    for kernel in kernels_of(launch):
        expect(isinstance(kernel, dict), f"kernel {kernel!r}")
        _check_kernel(kernel, symbols, len(spaces), expect, expression)
    return launch


def _check_kernel(kernel: dict, symbols: dict, spaces: int, expect, expression) -> None:
    """One kernel's entry, grid, block, shared memory, cluster and parameters."""
    expect(isinstance(kernel.get("entry"), str) and _ENTRY.match(kernel["entry"]),
           f"entry {kernel.get('entry')!r}")
    grid = kernel.get("grid")
    expect(isinstance(grid, list) and len(grid) == 3, "grid")
    for g in grid:
        expression(g, "grid")
    block = kernel.get("block")
    expect(isinstance(block, list) and len(block) == 3 and all(_int(b, 1, 1024) for b in block)
           and block[0] * block[1] * block[2] <= 1024, f"block {block!r}")
    expect(_int(kernel.get("dynamic_smem_bytes"), 0, 1 << 20), "dynamic_smem_bytes")
    cluster = kernel.get("cluster_dims")
    expect(cluster is None or isinstance(cluster, list) and len(cluster) == 3 and
           all(_int(c, 1, 16) for c in cluster), f"cluster_dims {cluster!r}")
    cooperative = kernel.get("cooperative", False)
    expect(isinstance(cooperative, bool) and not (cooperative and cluster),
           f"cooperative {cooperative!r} (a bool; cooperative launches have no clusters)")
    pdl = kernel.get("pdl", False)
    expect(isinstance(pdl, bool) and not (pdl and cooperative),
           f"pdl {pdl!r} (a bool; a cooperative launch is not a dependent one)")
    params = kernel.get("params")
    expect(isinstance(params, list) and len(params) <= 1024, "params")
    for p in params:
        expect(isinstance(p, dict) and p.get("kind") in _PARAM_KINDS, f"param {p!r}")
        kind = p["kind"]
        if kind in ("tensor", "scalar", "tensormap"):
            expect(_int(p.get("param"), 0, 1 << 16), f"param index in {p!r}")
        if kind == "workspace":
            expect(_int(p.get("workspace"), 0, spaces - 1), f"workspace index in {p!r}")
        if kind in ("scalar", "symbol"):
            expect(p.get("dtype") in _CTYPES, f"dtype in {p!r}")
        if kind == "symbol":
            expect(p.get("name") in symbols, f"symbol in {p!r}")
        if kind == "tensormap":
            expect(_int(p.get("rank"), 1, 5) and p.get("dtype") in _TMA_DTYPES and
                   p.get("swizzle") in _TMA_SWIZZLE and isinstance(p.get("box"), list) and
                   len(p["box"]) == p["rank"] and all(_int(b, 1, 256) for b in p["box"]) and
                   isinstance(p.get("name"), str) and isinstance(p.get("tensor"), str) and
                   ("fold" not in p or (_int(p["fold"], 1, 256) and p["rank"] >= 2)),
                   f"tensor map {p!r}")


class BundleKernel(KernelCall):
    """An exported kernel: inputs in, outputs allocated from the signature and returned, with
    the argument checks of the compiled kernel."""

    def __init__(self, function: CubinFunction, signature: KernelSignature):
        super().__init__(signature, function, "cuda", "cuda")
        self.function = function
        self.name = signature.name

    @staticmethod
    def from_bundle(bundle: Bundle) -> BundleKernel:
        try:
            signature = KernelSignature.from_json(bundle.json("signature"))
            launch = check_launch(bundle.json("launch"))
        except (SignatureError, ValueError) as exc:
            raise BundleError(bundle.path, "fields", str(exc)) from None
        limit = len(signature.params)
        for p in (p for kernel in kernels_of(launch) for p in kernel["params"]):
            if "param" in p and p["param"] >= limit:
                raise BundleError(bundle.path, "fields", f"launch parameter {p!r} names "
                                                         f"parameter {p['param']} of {limit}")
        for name, (param, *dim) in launch["symbols"].items():
            kind = "tensor" if dim else "scalar"
            if param >= limit or signature.params[param].kind != kind or \
                    dim and dim[0] >= len(signature.params[param].shape):
                where = f"{'stride' if dim[1:] else 'dimension'} {dim[0]}" if dim \
                    else "as a scalar"
                raise BundleError(bundle.path, "fields", f"symbol {name!r} is read from "
                                                         f"parameter {param}, {where}")
        return BundleKernel(CubinFunction(bundle.files["binary"], launch,
                                          bundle.text("source")), signature)
