"""The Ascend tile ops, registered once in the core's schema registry: the dialect's ops and
the vector-path ops that the ``vector`` phase lowers portable vector work to.

Every op carries ``dialect="ascend"`` and ``backends=("ascend",)``: the core refuses them on
any other backend at compile time, naming the op.
"""

from __future__ import annotations

import tvm
from tilewright.ir.schema import Attr, Operand, TileOpSchema, register_intrinsic, register_tile_op

PREFIX = "ascend."
PACK = "tw.ascend.pack"  # a list of scalar arguments (printf)
register_intrinsic(PACK, "ascend.printf", "the scalar arguments of T.printf")


def _op(name: str, operands=(), attrs=(), doc: str = "") -> TileOpSchema:
    return register_tile_op(TileOpSchema(PREFIX + name, tuple(operands), tuple(attrs), doc,
                                         dialect="ascend", backends=("ascend",)))


_ID = Operand("event_id", "read", kind="expr")
SET_FLAG = _op("set_flag", (_ID,), (Attr("src", str, ""), Attr("dst", str, "")),
               "raise the flag SRC_DST[event_id] once every earlier SRC-pipe instruction is done")
WAIT_FLAG = _op("wait_flag", (_ID,), (Attr("src", str, ""), Attr("dst", str, "")),
                "block the DST pipe until flag SRC_DST[event_id] is raised, then clear it")
PIPE_BARRIER = _op("pipe_barrier", (), (Attr("pipe", str, ""),),
                   "order the instructions of one pipe (PIPE_ALL: every pipe of the core)")
BARRIER_ALL = _op("barrier_all", (), (), "wait for everything issued so far on this core")
SET_CROSS_FLAG = _op("set_cross_flag", (_ID,), (Attr("pipe", str, ""), Attr("mode", int, 2)),
                     "cube <-> vector handoff: count up a cross-core flag after PIPE's work")
# a set_cross_flag that hands ``tile`` back to the other core (it overwrites it next): for the
# intra-core synchronisation a write of the tile on ``pipe``, so every earlier access of the tile
# is done when the flag counts up
RELEASE_CROSS_FLAG = _op("release_cross_flag", (_ID, Operand("tile", "write")),
                         (Attr("pipe", str, ""), Attr("mode", int, 2)),
                         "count up a cross-core flag once this core is done with the tile")
WAIT_CROSS_FLAG = _op("wait_cross_flag", (_ID,), (),
                      "block until the cross-core flag counts up, then count it down")
GEMM_V0 = _op("gemm_v0", (Operand("A", "read"), Operand("B", "read"), Operand("C", "readwrite"),
                          Operand("init", "read", kind="expr")),
              (Attr("transpose_A", bool, False), Attr("transpose_B", bool, False),
               Attr("kL0Size", int, 128)),
              "C (L0C) = [C +] A (L1) @ B (L1), through L0A/L0B in steps of kL0Size")
MMA = _op("mma", (Operand("A", "read"), Operand("B", "read"), Operand("C", "readwrite"),
                  Operand("init", "read", kind="expr")),
          (Attr("transpose_A", bool, False), Attr("transpose_B", bool, False)),
          "one cube MMAD: C (L0C) = [C +] op(A) (L0A) @ op(B) (L0B); a transposed operand's "
          "tile is stored K x M (A) or N x K (B) and was loaded by load_l0 with transpose")
LOAD_L0 = _op("load_l0", (Operand("src", "read"), Operand("dst", "write")),
              (Attr("transpose", bool, False),),
              "an L1 tile into L0A (ZZ) or L0B (ZN) as op(X) of the GEMM that reads it: "
              "transposed when that GEMM's transpose flag for the operand is set")
COUNTER = _op("counter", (Operand("counter", "read", kind="expr"),
                          Operand("value", "read", kind="expr")), (Attr("declare", bool, False),),
              "a scalar register of the kernel (the counter of buffer versions in 'counter' "
              "mode): declared with its first value, or assigned")
PRINTF = _op("printf", (Operand("args", "read", kind="any"),), (Attr("format", str, ""),),
             "print from the AI core (AscendC::printf)")
DUMP_TENSOR = _op("dump_tensor", (Operand("src", "read"),),
                  (Attr("desc", int, 0), Attr("dump_size", int, 0), Attr("shape", str, "")),
                  "print a tile with a header (AscendC::DumpTensor)")

# T.tile.* vector ops, registered from data tables: name -> Ascend C instruction
BINARY = {"add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "max": "Max", "min": "Min"}
UNARY = {"exp": "Exp", "ln": "Ln", "abs": "Abs", "sqrt": "Sqrt", "relu": "Relu",
         "reciprocal": "Reciprocal", "copy": "Copy"}
SCALAR = {"adds": "Adds", "muls": "Muls", "maxs": "Maxs", "mins": "Mins"}

for _name in BINARY:
    _op(f"tile.{_name}", (Operand("dst", "write"), Operand("src0", "read"),
                          Operand("src1", "read")), (), f"vector {_name} of two UB tiles")
for _name in UNARY:
    _op(f"tile.{_name}", (Operand("dst", "write"), Operand("src", "read")), (),
        f"vector {_name} of a UB tile")
for _name in SCALAR:
    _op(f"tile.{_name}", (Operand("dst", "write"), Operand("src", "read"),
                          Operand("scalar", "read", kind="expr")), (),
        f"vector {_name} of a UB tile and a scalar")
FILL = _op("tile.fill", (Operand("dst", "write"), Operand("value", "read", kind="expr")), (),
           "set every element of a UB tile (Duplicate)")
CAST = _op("tile.cast", (Operand("dst", "write"), Operand("src", "read")),
           (Attr("round", str, "CAST_NONE"),), "convert a UB tile to another dtype")

# T.dual_copy of the mainline dialect: one copy split over the two vector sub-cores along
# ``axis`` of the full tile (the GM, L0C or L1 side); the portable phase lowers it (split.py)
DUAL_COPY = _op("dual_copy", (Operand("src", "read"), Operand("dst", "write")),
                (Attr("axis", int, 0),),
                "copy between a full tile and the half of it each vector sub-core holds")
PORTABLE_PHASE_OPS = (DUAL_COPY.name,)
# its L0C -> UB path on the 950: the cube's Fixpipe writes the halves of the L0C tile into the
# UBs of the two vector sub-cores at once (dual destination, split along ``axis``: 0 M, 1 N)
DUAL_FIXPIPE = _op("dual_fixpipe", (Operand("src", "read"), Operand("dst", "write")),
                   (Attr("axis", int, 0),),
                   "L0C tile -> its halves in the UB of each vector sub-core (Fixpipe)")

# T.simd register instructions of T.SimdVF (facts.registers.REGISTER_OPS names each one's
# vendor function): registers are numbered within their T.SimdVF (-1: none), masks are the
# element width in bits of their lanes (0: none) and the mask register of a count (``mask``:
# -1, every lane); a load reads, a store writes its UB lanes
_REG_ATTRS = (Attr("op", str, ""), Attr("dst", int, -1), Attr("src0", int, -1),
              Attr("src1", int, -1), Attr("dtype", str, ""), Attr("bits", int, 0),
              Attr("mask", int, -1))
REG_LOAD = _op("tile.reg_load", (Operand("ub", "read"),), _REG_ATTRS,
               "load a register from UB lanes (Reg::LoadAlign)")
REG_STORE = _op("tile.reg_store", (Operand("ub", "write"),), _REG_ATTRS,
                "store a register's lanes to UB (Reg::StoreAlign)")
REG_OP = _op("tile.reg", (Operand("scalar", "read", kind="expr"),), _REG_ATTRS,
             "a register instruction: dst = op(src0[, src1 | scalar]) under a mask")
REGISTER_INSTRUCTIONS = (REG_LOAD.name, REG_STORE.name, REG_OP.name)

# the core's tile ops that are statements of scalar code (an element's assertion or print):
# the scalar unit runs them inside the loops it takes over from the vector unit
SCALAR_STATEMENTS = frozenset({"device_assert", "print_value"})
VECTOR_OPS = tuple(f"{PREFIX}tile.{n}" for n in (*BINARY, *UNARY, *SCALAR, "fill", "cast"))
SYNC_OPS = tuple(PREFIX + n for n in ("set_flag", "wait_flag", "pipe_barrier", "barrier_all",
                                      "set_cross_flag", "wait_cross_flag",
                                      "release_cross_flag"))
DIALECT_OPS = (*SYNC_OPS, PREFIX + "gemm_v0", PREFIX + "mma", LOAD_L0.name, COUNTER.name,
               DUAL_FIXPIPE.name,
               PREFIX + "printf",
               PREFIX + "dump_tensor", *VECTOR_OPS)


def pack(args) -> tvm.ir.Call:
    return tvm.ir.Call(tvm.ir.Op.get(PACK), list(args))


# -- the vector path of portable kernels (lowered by the ``vector`` phase) --------------------
_D, _S = Operand("dst", "write"), Operand("src", "read")
VBIN = _op("tile.vbin", (_D, Operand("src0", "read"), Operand("src1", "read")),
           (Attr("op", str, ""),), "dst = src0 op src1 on UB tiles (Add Sub Mul Div Max Min)")
VSCA = _op("tile.vsca", (_D, _S, Operand("scalar", "read", kind="expr")), (Attr("op", str, ""),),
           "dst = src op scalar (add mul max min sub rsub div rdiv) on a UB tile")
VUN = _op("tile.vun", (_D, _S), (Attr("op", str, ""),),
          "dst = op(src) on UB tiles (exp ln abs sqrt rsqrt reciprocal copy neg cast; floor "
          "ceil round trunc: a float32 Cast to an integral value)")
VDUP = _op("tile.vdup", (_D, Operand("value", "read", kind="expr")), (),
           "every element of a UB tile = value (Duplicate)")
VBRC = _op("tile.vbrc", (_D, _S, Operand("vec", "read")),
           (Attr("op", str, ""), Attr("axis", str, "")),
           "dst[r, :] = src[r, :] op vec[r] (axis 'row': one scalar per row, read on S), "
           "src[r, :] op vec[0] (axis 'one': one scalar, read on S) or src[r, :] op vec[:] "
           "(axis 'col')")
VREDUCE = _op("tile.vreduce", (Operand("dst", "readwrite"), _S, Operand("work", "write")),
              (Attr("kind", str, ""), Attr("dim", int, 1), Attr("clear", bool, True)),
              "reduce a UB tile along rows (one reduction per repeat) or columns (vector ops)")
# selects (facts.instructions.COMPARE_MODES): ``slot`` 0 for one instruction over contiguous
# ranges, else each row's mask bits start ``slot`` bytes after the previous row's
_M = Operand("mask", "read")
VCMP = _op("tile.vcmp", (Operand("dst", "write"), Operand("src0", "read"), Operand("src1", "read")),
           (Attr("op", str, ""), Attr("slot", int, 0)),
           "dst (uint8 bit mask) = src0 op src1 on UB tiles (Compare; op a CMPMODE)")
VCMPS = _op("tile.vcmps", (Operand("dst", "write"), _S, Operand("scalar", "read", kind="expr")),
            (Attr("op", str, ""), Attr("slot", int, 0)),
            "dst (uint8 bit mask) = src op scalar on a UB tile (Compares)")
VSEL = _op("tile.vsel", (_D, _M, Operand("src0", "read"), Operand("src1", "read")),
           (Attr("slot", int, 0),),
           "dst = mask ? src0 : src1 on UB tiles (Select, VSEL_TENSOR_TENSOR_MODE)")
VSELS = _op("tile.vsels", (_D, _M, _S, Operand("scalar", "read", kind="expr")),
            (Attr("slot", int, 0),),
            "dst = mask ? src : scalar on UB tiles (Select, VSEL_TENSOR_SCALAR_MODE)")
# a select's condition joined by and/or/not: bitwise logic on Compare's uint8 bit masks, on
# their uint16 lanes (And and Or with ``op`` "and"/"or", Not; A2 has them for 16-bit types)
VMASK = _op("tile.vmask", (Operand("dst", "write"), Operand("src0", "read"),
                           Operand("src1", "read")), (Attr("op", str, ""),),
            "dst = src0 op src1 on uint8 bit masks (And, Or on uint16 lanes)")
VMASKNOT = _op("tile.vmasknot", (Operand("dst", "write"), _S), (),
               "dst = ~src on a uint8 bit mask (Not on uint16 lanes)")
# an index tile: CreateVecIndex (数据填充/CreateVecIndex.md, count form; the vendor declares it
# __in_pipe__(S) __out_pipe__(V): dav_c220 writes the first 32-byte block with SetValue on the
# scalar unit, waits S_V on the id TPipe's FetchEventID gives, then fills the rest with Adds
# on V, impl/basic_api/dav_c220/kernel_operator_vec_createvecindex_impl.h)
VIDX = _op("tile.vidx", (_D, Operand("first", "read", kind="expr")), (),
           "dst[k] = first + k on a UB tile (CreateVecIndex: S then V)")
# the ops whose instruction uses A2's Select scratch (facts.arch.Arch.select_scratch)
SCRATCH_OPS = (VSEL.name, VSELS.name)
VECTOR_PATH_OPS = (VBIN, VSCA, VUN, VDUP, VBRC, VREDUCE, VCMP, VCMPS, VSEL, VSELS, VMASK,
                   VMASKNOT, VIDX)
