"""Names of the attributes and annotations the Ascend passes attach to the IR."""

SCOPE_KEY = "ascend.scope"  # AttrStmt: the body runs on the cube ("C") or vector ("V") core
VID_TAG = "ascend.vid"  # thread tag of the vector sub-core loop of T.Kernel(n, is_npu=True)
NPU_KEY = "ascend.npu"  # annotation of the core-grid loop of a dialect kernel
ADDRESS_KEY = "ascend.address"  # T.annotate_address placements: {buffer name: byte offset}
PORTABLE_KEY = "ascend.portable"  # function attr: a kernel the portable phase converted
SCALAR_KEY = "ascend.scalar"  # loop annotation: the scalar unit runs it; the value is the reason
VERSION_KEY = "ascend.versions"  # loop annotation: {buffer: stages} of multi-buffered tiles
COUNTER_KEY = "ascend.version_counters"  # loop annotation: {buffer: the counter of its versions}
WORKSPACES_KEY = "ascend.workspaces"  # function attr: GM workspaces of the cube/vector split
PLAN_KEY = "ascend.memory_plan"  # function attr: [buffer, scope, offset, bytes] per tile
STAGING_KEY = "ascend.gemm_staging"  # function attr: [L0A tile, L0B tile] per T.gemm_v0
TREE_KEY = "ascend.tree"  # kernel annotation: the Ascend dialect tree it is written in
BUFFER_VERSIONS_KEY = "ascend.buffer_versions"  # kernel annotation: {buffer: [count, mode]}
MIXED_KEY = "ascend.mixed"  # kernel annotation of T.MixedKernel: [sids, the sid variable]
SIMD_VF_KEY = "ascend.simd_vf"  # AttrStmt: a T.SimdVF vector function; value: latency= or 0
# AttrStmt of T.SimtVF: node the thread's linear index, value the thread block
# (facts.simt.block_value / block_of)
SIMT_KEY = "ascend.simt_vf"
# function attr: {UB temporary of the vector path: what it holds, in the user's terms}
TEMPS_KEY = "ascend.temporaries"
# function attr of a block of a kernel sequence: [its place in the launch order, the number
# of T.alloc_global workspaces after the kernel's parameters]
SEQUENCE_KEY = "ascend.sequence"
