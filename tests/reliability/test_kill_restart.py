"""Processes killed at random points of their compiles never leave the cache in a state that
serves a wrong or broken kernel: 20 kills, then every kernel any of them touched compiles
(from the cache or anew) and computes the right result, without an invalid entry.

The compiling processes are forked from this one once it has compiled a kernel, so that the
kills land in compiles rather than in imports, and the test stays fast."""

from __future__ import annotations

import os
import random
import signal
import time
import warnings

import reliability_kernels as kernels
import tilewright
import torch
from tilewright.jit.cache import DiskCache

KILLS = 20
AT_ONCE = 2  # processes compiling at the same time: they also race each other for the cache


def scale_of(i: int) -> float:
    return 1.0 + i / 8


def compile_(i: int):
    return tilewright.compile(kernels.scaled(scale_of(i)), out_idx=[-1], target="cpu")


def _compile_forever(first: int, report: int) -> None:
    """The child: compile new kernels until killed, telling the parent each one it starts."""
    try:
        i = first
        while True:
            os.write(report, f"{i}\n".encode())
            compile_(i)
            i += 1
    finally:
        os._exit(0)


def test_twenty_kills_at_random_points_of_a_compile(cache_dir):
    compile_(-1)  # imports and first-compile set-up happen here, before the forks
    rng = random.Random(20261201)
    started: set[int] = set()
    kills = 0
    while kills < KILLS:
        children = []
        for _ in range(AT_ONCE):
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(read)
                _compile_forever(1000 * kills, write)
            os.close(write)
            children.append((pid, read))
            kills += 1
        time.sleep(rng.uniform(0.05, 1.5))
        for pid, read in children:
            os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
            assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
            with os.fdopen(read) as f:
                started.update(int(line) for line in f.read().split())
    assert len(started) >= KILLS
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an invalid entry would warn: none may exist
        for i in sorted(started):
            a = torch.randn(64)
            torch.testing.assert_close(compile_(i)(a), a * scale_of(i))
    cache = DiskCache()
    assert all(not e.get("corrupt") for e in cache.entries())
    cache.clear()  # what the killed processes left behind goes with a clear
    assert not list((cache_dir / "tmp").glob("build-*"))
