"""Facts computed from the IR: threads, roles and accesses (``ir``), shared-memory effects
(``accesses``), which gemm instruction fits (``gemm_fit``) and which layout each buffer can
take (``layouts``)."""
