"""2:4 structured sparsity on torch tensors, for ``T.gemm_sp``: compress a dense operand into
its kept values and metadata, expand them back, and make random operands of that pattern.

The layout is the one :mod:`tilewright.sparse` describes (TileLang's ordered metadata). The
functions run on any torch device.
"""

from __future__ import annotations

import torch

from .. import sparse as sp


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _group(dtype: torch.dtype) -> sp.SparseGroup:
    name = _dtype_name(dtype)
    if name not in sp.SPARSE_GROUPS:
        raise ValueError(f"2:4 sparsity takes {', '.join(sp.SPARSE_GROUPS)}, not {name}")
    return sp.SPARSE_GROUPS[name]


def _meta_name(dense_dtype: torch.dtype, meta_dtype: torch.dtype | None) -> str:
    if meta_dtype is None:
        return sp.default_meta_dtype(_dtype_name(dense_dtype))
    name = _dtype_name(meta_dtype)
    if name not in sp.META_BITS:
        raise ValueError(f"the metadata dtype must be one of {', '.join(sp.META_BITS)}, "
                         f"not {name}")
    return name


def _gatherable(x: torch.Tensor) -> torch.Tensor:
    """``x`` itself, or float8 as int8 bits (torch gathers no float8); a float8 zero is
    the zero byte or the negative zero 0x80, which stays nonzero, as in the hardware."""
    return x.view(torch.int8) if x.is_floating_point() and x.element_size() == 1 else x


def compress(dense: torch.Tensor, meta_dtype: torch.dtype | None = None,
             transposed: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``(values, meta)`` of a 2-D ``dense`` operand ``[M, K]`` with at most 2 nonzeros in every
    4 consecutive elements along K (1 in 2 for float32): ``values`` ``[M, K / 2]`` holds them
    in their order (padded with zeros where a group has fewer), ``meta`` ``[M, K / e_factor]``
    where they were. ``meta_dtype`` defaults to int16 (int32 for 8-bit integers).
    ``transposed`` reads ``dense`` as ``[K, M]`` and returns ``[K / 2, M]`` values and
    ``[K / e_factor, M]`` metadata (``transpose_A`` and ``transpose_E`` of ``T.gemm_sp``)."""
    if dense.dim() != 2:
        raise ValueError(f"compress takes a 2-D tensor, got shape {tuple(dense.shape)}")
    if transposed:
        values, meta = compress(dense.t(), meta_dtype)
        return values.t().contiguous(), meta.t().contiguous()
    g, name = _group(dense.dtype), _dtype_name(dense.dtype)
    meta_name = _meta_name(dense.dtype, meta_dtype)
    rows, k = dense.shape
    factor = sp.e_factor(name, meta_name)
    if k % factor:
        raise ValueError(f"K = {k} must be a multiple of {factor} for {meta_name} metadata of "
                         f"{name} (one metadata element describes {factor} columns)")
    groups = _gatherable(dense).reshape(rows, k // g.group, g.group)
    nonzero = groups != 0
    counts = nonzero.sum(-1)
    if bool((counts > g.kept).any()):
        row, col = (counts > g.kept).nonzero()[0].tolist()
        raise ValueError(f"row {row}, columns {col * g.group}..{col * g.group + g.group - 1}: "
                         f"{int(counts[row, col])} nonzeros where at most {g.kept} of "
                         f"{g.group} may be")
    # the nonzero positions first, then the zero ones, each in order; the first ``kept``
    # of them, ascending
    position = torch.arange(g.group, device=dense.device)
    order = torch.argsort((~nonzero).to(torch.int64) * g.group + position, dim=-1)
    chosen = order[..., :g.kept].sort(dim=-1).values
    values = groups.gather(-1, chosen).reshape(rows, k // g.group * g.kept).view(dense.dtype)
    slots = (chosen.unsqueeze(-1) * g.slot_width +
             torch.arange(g.slot_width, device=dense.device)).flatten(-2)
    field = (slots << (sp.SLOT_BITS * torch.arange(slots.shape[-1], device=dense.device))).sum(-1)
    fields = sp.fields_per_meta(meta_name)
    packed = field.reshape(rows, -1, fields) << (
        sp.FIELD_BITS * torch.arange(fields, device=dense.device))
    meta = packed.sum(-1)
    bits = sp.META_BITS[meta_name]
    if not meta_name.startswith("u"):  # two's complement: the top field may set the sign bit
        meta = torch.where(meta >= 1 << (bits - 1), meta - (1 << bits), meta)
    return values.contiguous(), meta.to(getattr(torch, meta_name))


def decompress(values: torch.Tensor, meta: torch.Tensor, transposed: bool = False
               ) -> torch.Tensor:
    """The dense operand ``[M, K]`` that ``values`` and ``meta`` describe (``[K, M]`` from
    transposed ones); the inverse of :func:`compress`."""
    if transposed:
        return decompress(values.t(), meta.t()).t().contiguous()
    name, meta_name = _dtype_name(values.dtype), _meta_name(values.dtype, meta.dtype)
    g = _group(values.dtype)
    rows, stored = values.shape
    kk = torch.arange(stored, device=values.device)
    words = meta.to(torch.int64)[:, sp.meta_column(kk, name, meta_name)]
    columns = sp.dense_column(words, kk, name, meta_name)
    src = _gatherable(values)
    dense = torch.zeros(rows, stored * g.group // g.kept, dtype=src.dtype, device=values.device)
    return dense.scatter_(1, columns, src).view(values.dtype)


def randn_semi_sparse(M: int, K: int, dtype: torch.dtype = torch.float16,  # noqa: N803
                      device: torch.device | str = "cpu", transposed: bool = False,
                      generator: torch.Generator | None = None) -> torch.Tensor:
    """A random normal ``[M, K]`` tensor (``[K, M]`` when ``transposed``) of which the largest
    ``group - kept`` of every ``group`` consecutive elements along K are zeroed: 2:4 sparse
    (1:2 for float32)."""
    g = _group(dtype)
    where = generator.device if generator is not None else device
    x = torch.randn(M, K // g.group, g.group, generator=generator, device=where).to(device)
    drop = x.topk(g.group - g.kept, dim=-1).indices
    x = x.scatter(-1, drop, 0).reshape(M, K).to(dtype)
    return x.t().contiguous() if transposed else x


__all__ = ["compress", "decompress", "randn_semi_sparse"]
