"""The names the CUDA backend's layers agree on: annotations and attributes it puts on the IR,
the frontend annotations it reads, its pass-config keys, and the hardware's group sizes."""

# -- hardware ----------------------------------------------------------------------------------
WARP = 32
WARPGROUP = 128  # four warps: the unit of wgmma, setmaxnreg and T.ws roles
MAX_THREADS = 1024  # threads of one block (any count up to it: the last warp may be partial)
THREAD_TAG = "threadIdx.x"

# -- frontend annotations (the core's language) ------------------------------------------------
LOOP = "tw.loop"  # "parallel" (T.Parallel) or "unroll" (T.unroll) on a loop
THREADS = "tw.threads"  # T.Kernel's threads on the outermost block loop
SWIZZLE = "tw.swizzle"  # T.use_swizzle's (panel, order) on the outermost block loop
STAGES = "tw.num_stages"  # T.Pipelined's num_stages
STAGE = "tw.stage"  # T.Pipelined's stage=[...]
ORDER = "tw.order"  # T.Pipelined's order=[...]
GROUP = "tw.group"  # T.Pipelined's group=[[...], ...]: order= and stage= index these groups
PIPELINE_HINTS = (STAGES, STAGE, ORDER, GROUP)  # the pipeline transforms consume them
PERSISTENT = "tw.persistent"  # T.Persistent's panel size on its serial loop over the tiles
# T.annotate_min_blocks_per_sm's blocks on the outermost block loop
MIN_BLOCKS_PER_SM = "tw.min_blocks_per_sm"

# -- the CUDA dialect (tilewright_cuda.language) -----------------------------------------------
WS = "tw.cuda.ws"  # AttrStmt around a T.ws role's code; value: its threads "lo:hi"
CLUSTER = "tw.cuda.cluster_dims"  # annotation of the block loop and function attribute: [x, y, z]
# T.import_source: the user's CUDA sources, each once, in order of first import; annotation of
# the block loop (a list of strings) and function attribute (JSON list)
IMPORT_SOURCE = "tw.cuda.import_source"
# annotation of the block loop: T.no_set_max_nreg, the producer warpgroup the pipeline adds keeps
# the kernel's register budget (no setmaxnreg)
NO_SET_MAX_NREG = "tw.cuda.no_set_max_nreg"

# -- annotations this backend puts on loops ----------------------------------------------------
# a T.Parallel nest spread over the threads (a strided loop, or a loop over each thread's
# registers): its iterations are independent, no barrier between them
SPREAD = "tw.spread"
# a loop that writes each shared element it touches from one thread only, once, and reads only
# elements its own thread wrote or that no iteration writes: no barrier between its iterations
OWN_ELEMENTS = "tw.own_elements"
ROLE = "tw.cuda.role"  # a T.ws role's thread loop: its first thread
# a pipelined loop whose versions and barrier phases (``i % S``, ``i / S``) become counters the
# loop carries (transforms/pipeline/counters.py)
COUNTED = "tw.cuda.counted"
# TVM's CUDA printer writes ``#pragma unroll 1`` before a loop annotated so (the producer
# warpgroup's loop: ptxas would unroll it whole, 128 TMA loads for a 32-step FlashAttention)
DISABLE_UNROLL = "disable_unroll"

# -- function attributes -----------------------------------------------------------------------
SMEM_LAYOUT = "tw.cuda.smem_layout"  # swizzled shared tiles: name -> [W, B] (layout.Swizzled)
VERSIONS = "tw.cuda.smem_versions"  # pipelined tiles: name -> versions
# blocks per SM the kernel asks registers for (T.annotate_min_blocks_per_sm; without it the
# pass config cuda.blocks_per_sm's)
BLOCKS = "tw.cuda.blocks_per_sm"
TENSORMAPS = "tw.cuda.tensormaps"  # JSON: the TMA descriptors the launcher encodes
DYN_SMEM = "tw.dyn_smem_bytes"  # bytes of the dynamic shared-memory pool
# JSON on each block's function of a kernel sequence: {"index": its place in the launch order,
# "params": how many of its parameters are the kernel's (the T.alloc_global workspaces follow)}
SEQUENCE = "tw.cuda.sequence"

# -- pass configs (declared in plugin.py, read once into options.Options) ----------------------
DISABLE_TMA = "cuda.disable_tma_lower"
DISABLE_WARP_SPECIALIZED = "cuda.disable_warp_specialized"
TMA_MULTICAST = "cuda.tma_multicast"
TMA_UNSWIZZLED = "cuda.tma_unswizzled"
BLOCKS_PER_SM = "cuda.blocks_per_sm"
PROLOGUE_COPIES = "cuda.prologue_copies"
WGMMA_PINGPONG = "cuda.wgmma_pingpong"
PRODUCER_REGISTERS = "cuda.producer_registers"
DEVICE_COMPILE_FLAGS = "cuda.device_compile_flags"
