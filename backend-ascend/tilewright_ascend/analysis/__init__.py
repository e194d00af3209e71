"""Facts computed from the IR: allocations and buffer sizes, GEMM shapes, the accesses of each
statement (pipe, buffer, read or write) and live ranges. Buffers are keyed by identity."""
