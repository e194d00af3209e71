"""AI-core exception dumps: the argument descriptor and the reader of dump files.

With the pass config ``ascend.exception_dump``, a kernel's arguments end with a descriptor the
runtime's exception handler searches for (8-byte steps) by its magic: ``b"TILELANG"`` read as
a little-endian u64 (0x474E414C454C4954). Layout (little endian)::

    u64 magic | u32 name length | name bytes (padded to 8) | u32 tensor count | u32 0
    per tensor: u64 size in bytes | u64 device address | u32 dtype code | u32 0

A dump file ``<dump_path>/extra-info/data-dump/<device>/<kernel>.custom.<timestamp>`` holds
the descriptor followed by each tensor's bytes, in order. :func:`parse_exception_dump` reads
the newest dump of a kernel back into numpy arrays.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
from tilewright.errors import TilewrightError

MAGIC = 0x474E414C454C4954
DTYPE_CODES = {"float32": 0, "float16": 1, "int8": 2, "int32": 3, "uint8": 4, "int16": 6,
               "uint16": 7, "uint32": 8, "int64": 9, "uint64": 10, "float64": 11, "bool": 12,
               "bfloat16": 27}
_CODE_DTYPES = {v: k for k, v in DTYPE_CODES.items()}


def _pad8(n: int) -> int:
    return -(-n // 8) * 8


def encode_descriptor(kernel_name: str, tensors: list[tuple[int, int, str]]) -> bytes:
    """The descriptor for ``tensors`` given as (size in bytes, address, dtype)."""
    name = kernel_name.encode()
    out = struct.pack("<QI", MAGIC, len(name)) + name.ljust(_pad8(len(name) + 4) - 4, b"\0")
    out += struct.pack("<II", len(tensors), 0)
    for size, address, dtype in tensors:
        if dtype not in DTYPE_CODES:
            raise TilewrightError(f"exception dump: dtype {dtype} has no dump code")
        out += struct.pack("<QQII", size, address, DTYPE_CODES[dtype], 0)
    return out


def decode_descriptor(data: bytes) -> tuple[str, list[dict], int]:
    """Find the descriptor in ``data`` (8-byte steps); (kernel name, tensors, end offset)."""
    for start in range(0, max(len(data) - 7, 0), 8):
        if struct.unpack_from("<Q", data, start)[0] != MAGIC:
            continue
        (length,) = struct.unpack_from("<I", data, start + 8)
        name = data[start + 12:start + 12 + length].decode()
        pos = start + 8 + _pad8(length + 4)
        count, _ = struct.unpack_from("<II", data, pos)
        pos += 8
        tensors = []
        for index in range(count):
            size, address, code, _ = struct.unpack_from("<QQII", data, pos)
            if code not in _CODE_DTYPES:
                raise TilewrightError(f"exception dump: tensor {index} has unknown dtype code "
                                      f"{code}")
            tensors.append({"index": index, "size": size, "address": address,
                            "dtype": _CODE_DTYPES[code]})
            pos += 24
        return name, tensors, pos
    raise TilewrightError("no tilewright argument descriptor (magic 'TILELANG') in the dump")


def parse_exception_dump(dump_path, kernel_name: str) -> list[dict]:
    """The tensors of the newest exception dump of ``kernel_name`` under ``dump_path``: one
    dict per tensor with ``type`` ("input"), ``index``, ``dtype``, ``address`` and ``data`` (a
    flat numpy array)."""
    root = Path(dump_path) / "extra-info" / "data-dump"
    files = sorted(root.glob(f"*/{kernel_name}.custom.*"),
                   key=lambda p: p.name.rsplit(".", 1)[-1])
    if not files:
        raise TilewrightError(f"no exception dump of kernel {kernel_name!r} under {root} "
                              "(set ASCEND_DUMP_PATH and ASCEND_DUMP_SCENE=aic_err_brief_dump "
                              "before ACL initialises)")
    data = files[-1].read_bytes()
    name, tensors, pos = decode_descriptor(data)
    if name != kernel_name:
        raise TilewrightError(f"dump {files[-1]} describes kernel {name!r}, not {kernel_name!r}")
    out = []
    for t in tensors:
        raw = data[pos:pos + t["size"]]
        if len(raw) != t["size"]:
            raise TilewrightError(f"dump {files[-1]} is truncated in tensor {t['index']}")
        pos += t["size"]
        np_dtype = np.float16 if t["dtype"] == "bfloat16" else np.dtype(t["dtype"])
        array = np.frombuffer(raw, dtype=np.uint16 if t["dtype"] == "bfloat16" else np_dtype)
        out.append({"type": "input", "index": t["index"], "dtype": t["dtype"],
                    "address": t["address"], "data": array.copy()})
    return out
