"""Kernel factories whose configs misbehave, for the tuner's reliability tests (annotations
close over factory arguments, so this module must not use ``from __future__ import
annotations``)."""

import os
import signal
import sys
import time

import tilewright
import tilewright.language as T


@tilewright.jit(out_idx=[-1], target="cpu")
def copy_or_misbehave(N, block=64, mode="copy"):
    """Y = X, unless ``mode`` makes the config misbehave: while compiling (``segfault``,
    ``hang``, ``hog`` allocates 64 GiB, ``raise``, ``exit``), or while running (``wild``: a
    gather through indices far outside X, which the tests supply)."""
    if mode == "segfault":
        os.kill(os.getpid(), signal.SIGSEGV)
    if mode == "hang":
        time.sleep(600)
    if mode == "hog":
        bytearray(64 << 30)
    if mode == "raise":
        raise RuntimeError("this config raises")
    if mode == "exit":
        sys.exit(5)
    if mode == "wild":
        @T.prim_func
        def gather(X: T.Tensor((N,), "float32"), I: T.Tensor((N,), "int64"),
                   Y: T.Tensor((N,), "float32")):
            with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
                for i in T.Parallel(block):
                    if bx * block + i < N:
                        Y[bx * block + i] = X[I[bx * block + i]]

        return gather

    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
            for i in T.Parallel(block):
                if bx * block + i < N:
                    Y[bx * block + i] = X[bx * block + i]

    return main
