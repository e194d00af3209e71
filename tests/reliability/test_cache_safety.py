"""The disk cache never loses what it did not create and never serves what it should not;
when it cannot be used, kernels still compile (uncached, with one warning)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import types
import warnings
from pathlib import Path

import pytest
import reliability_kernels as kernels
import tilewright
import tilewright.language as T
import torch
from tilewright.jit import cache as cache_mod
from tilewright.jit.cache import MARKER, CacheError, DiskCache
from tilewright.runtime import call as call_mod


def compile_(scale=2.0, **kw):
    return tilewright.compile(kernels.scaled(scale), out_idx=[-1], target="cpu", **kw)


def check(kernel, scale=2.0):
    a = torch.randn(64)
    torch.testing.assert_close(kernel(a), a * scale)


def entry_dirs(root: Path) -> list[Path]:
    return sorted(p for p in (root / "kernels").glob("*/*") if p.is_dir())


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(call_mod, "_WARNED", set())


# -- clear removes only what tilewright created --------------------------------------------
def test_clear_refuses_a_folder_it_did_not_create(tmp_path, monkeypatch):
    home = tmp_path / "home"
    for sub in ("tmp", "kernels", "locks", "autotuner"):
        (home / sub).mkdir(parents=True)
        (home / sub / "mine.txt").write_text("user data")
    (home / "notes.txt").write_text("user data")
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(home))
    with pytest.raises(CacheError, match="not a tilewright cache"):
        DiskCache().clear()
    result = subprocess.run([sys.executable, "-m", "tilewright", "cache", "clear"],
                            capture_output=True, text=True, env=dict(os.environ))
    assert result.returncode == 1 and "not a tilewright cache" in result.stderr
    assert sorted(p.name for p in home.rglob("*.txt")) == ["mine.txt"] * 4 + ["notes.txt"]


def test_a_foreign_folder_is_never_written_and_compiles_still_work(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("user data")
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(home))
    with pytest.warns(RuntimeWarning, match="without the disk cache.*not a tilewright cache"):
        kernel = compile_()
    check(kernel)
    assert sorted(p.name for p in home.iterdir()) == ["notes.txt"]


def test_clear_keeps_what_it_does_not_recognise_in_its_own_cache(cache_dir):
    check(compile_())
    (cache_dir / "kernels" / "mine.txt").write_text("user data")
    (cache_dir / "tmp").mkdir(exist_ok=True)
    (cache_dir / "tmp" / "important").write_text("user data")
    assert DiskCache().clear() == 1
    assert (cache_dir / MARKER).exists()
    assert (cache_dir / "kernels" / "mine.txt").exists()
    assert (cache_dir / "tmp" / "important").exists()
    assert entry_dirs(cache_dir) == []


def test_a_cache_of_an_older_tilewright_is_adopted(cache_dir):
    check(compile_())
    (cache_dir / MARKER).unlink()
    assert DiskCache().clear() == 1
    assert (cache_dir / MARKER).exists()


# -- entries are served only when they are what was asked for ------------------------------
def test_entry_without_meta_is_rebuilt(cache_dir):
    check(compile_())
    (entry,) = entry_dirs(cache_dir)
    (entry / "meta.json").unlink()
    with pytest.warns(RuntimeWarning, match="invalid.*meta.json is missing"):
        check(compile_())


@pytest.mark.parametrize("damage", ["truncate", "foreign", "wrong shape", "other key"])
def test_damaged_entries_are_rebuilt_never_loaded(cache_dir, damage):
    check(compile_(2.0))
    check(compile_(3.0), 3.0)
    first, second = sorted(entry_dirs(cache_dir), key=lambda p: p.stat().st_mtime_ns)
    if damage == "truncate":
        so = first / "kernel.so"
        so.write_bytes(so.read_bytes()[:100])
        words = "kernel.so does not match its checksum"
    elif damage == "foreign":
        shutil.copy(second / "kernel.so", first / "kernel.so")
        words = "kernel.so does not match its checksum"
    elif damage == "wrong shape":
        (first / "meta.json").write_text(json.dumps(["not", "an", "object"]))
        words = "meta.json is not an object"
    else:  # the other kernel's entry, moved under this kernel's key
        shutil.rmtree(first)
        shutil.copytree(second, first)
        words = "stored under another key"
    with pytest.warns(RuntimeWarning, match=words):
        check(compile_(2.0), 2.0)


def test_the_key_covers_the_host_cpu(cache_dir):
    from tilewright.plugin import get_manager
    from tilewright_cpu import hostcpu

    check(compile_())
    shared = next(e for e in get_manager().backends()["cpu"].executors
                  if e.name == "llvm-shared")
    other_cpu = hostcpu.host_fingerprint() + ",+amx-tile"
    object.__setattr__(shared, "fingerprint", lambda: other_cpu)  # a frozen declaration
    try:
        check(compile_())
    finally:
        object.__setattr__(shared, "fingerprint", hostcpu.host_fingerprint)
    assert len(entry_dirs(cache_dir)) == 2


def test_the_key_covers_tvm_plugins_and_package_contents():
    from tilewright.jit import kernel as kernel_mod

    func = kernels.scaled(2.0)
    from tilewright.engine import pick_executor, resolve_target

    target, backend = resolve_target("cpu")
    executor = pick_executor(backend)
    parts = {}
    real = kernel_mod.make_key
    kernel_mod.make_key = lambda p: parts.update(p) or real(p)
    try:
        kernel_mod.cache_key(func, target, backend, executor, {}, [1])
    finally:
        kernel_mod.make_key = real
    assert parts["tvm"] and parts["toolchain"].startswith("llvm ")
    assert {name for name, _, _ in parts["plugins"]} >= {"cpu"}
    assert all(len(code) >= 16 for code in parts["code"])


# -- when the cache cannot be used, compiles still succeed ---------------------------------
def test_a_file_where_the_folder_should_be(tmp_path, monkeypatch):
    path = tmp_path / "cache"
    path.write_text("not a folder")
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(path))
    with pytest.warns(RuntimeWarning, match="is not a folder"):
        check(compile_())
    assert path.read_text() == "not a folder"


def test_a_cache_writable_by_others_is_refused(cache_dir):
    check(compile_())
    os.chmod(cache_dir, 0o777)
    with pytest.warns(RuntimeWarning, match="writable by every user"):
        check(compile_(4.0), 4.0)
    assert "writable by every user" in DiskCache().info()["problem"]


@pytest.mark.parametrize("code", [errno.EROFS, errno.ENOSPC, errno.EACCES])
def test_a_read_only_or_full_cache(cache_dir, monkeypatch, code):
    # root ignores permission bits, so the failing writes are simulated at the one place the
    # cache creates its build folder and commits
    def fail(*args, **kwargs):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(cache_mod, "tempfile", types.SimpleNamespace(
        mkdtemp=fail, mkstemp=tempfile.mkstemp))
    with pytest.warns(RuntimeWarning, match=os.strerror(code)):
        check(compile_())
    assert entry_dirs(cache_dir) == []


def test_a_cache_on_another_filesystem(monkeypatch, tmp_path):
    shm = Path("/dev/shm")
    if not shm.is_dir():
        pytest.skip("no /dev/shm on this machine")
    root = Path(tempfile.mkdtemp(dir=shm, prefix="tw-cache-"))
    try:
        monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(root))
        monkeypatch.setenv("TMPDIR", str(tmp_path))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            check(compile_())
        assert len(entry_dirs(root)) == 1
    finally:
        shutil.rmtree(root, ignore_errors=True)


CLEAR_DURING_COMPILE = '''
import os, sys, time, torch, tilewright
sys.path.insert(0, sys.argv[1])
from reliability_kernels import scaled
from tilewright_cpu import executor
built = executor.SHARED.build
def slow(source, ctx, workdir):
    open(os.path.join(sys.argv[2], "building"), "w").close()
    while not os.path.exists(os.path.join(sys.argv[2], "cleared")):
        time.sleep(0.01)
    return built(source, ctx, workdir)
object.__setattr__(executor.SHARED, "build", slow)
kernel = tilewright.compile(scaled(5.0), out_idx=[-1], target="cpu")
a = torch.randn(64)
print("ok" if torch.allclose(kernel(a), a * 5.0) else "WRONG")
'''


def test_clear_during_another_process_compile(cache_dir, tmp_path):
    check(compile_())  # an entry to clear
    flags = tmp_path / "flags"
    flags.mkdir()
    script = tmp_path / "child.py"
    script.write_text(CLEAR_DURING_COMPILE)
    proc = subprocess.Popen([sys.executable, str(script), str(kernels.FOLDER), str(flags)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        import time

        deadline = time.time() + 120
        while not (flags / "building").exists():
            assert proc.poll() is None and time.time() < deadline, proc.stderr.read()
            time.sleep(0.05)
        assert DiskCache().clear() == 1  # the finished entry; not the compile in progress
        (flags / "cleared").touch()
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert out.strip() == "ok"
    assert len(entry_dirs(cache_dir)) == 1  # the child's kernel, committed after the clear


# -- the in-process memo ----------------------------------------------------------------------
FACTOR = 2.0


@tilewright.jit(out_idx=[-1], target="cpu")
def times_factor(N):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), C: T.Tensor((N,), "float32")):
        with T.Kernel(1) as bx:
            for i in T.Parallel(N):
                C[i] = A[i] * FACTOR
    return main


def test_the_memo_notices_a_changed_global():
    global FACTOR
    a = torch.randn(16)
    torch.testing.assert_close(times_factor(16)(a), a * 2.0)
    FACTOR = 3.0
    try:
        torch.testing.assert_close(times_factor(16)(a), a * 3.0)
    finally:
        FACTOR = 2.0
    torch.testing.assert_close(times_factor(16)(a), a * 2.0)


@tilewright.jit(target="cpu")
def eager_times_factor(A, scale: float = 1.0):
    N = T.const("N")
    A: T.Tensor((N,), T.float32)
    C = T.empty((N,), T.float32)
    with T.Kernel(1):
        for i in T.Parallel(N):
            C[i] = A[i] * FACTOR * scale
    return C


def test_an_eager_kernels_repeated_calls_notice_globals_shapes_and_values():
    global FACTOR
    a, b = torch.randn(16), torch.randn(24)
    torch.testing.assert_close(eager_times_factor(a), a * 2.0)
    torch.testing.assert_close(eager_times_factor(b), b * 2.0)  # another shape
    torch.testing.assert_close(eager_times_factor(a, 0.5), a)  # another compile-time value
    FACTOR = 3.0
    try:
        torch.testing.assert_close(eager_times_factor(a), a * 3.0)
    finally:
        FACTOR = 2.0
    torch.testing.assert_close(eager_times_factor(a), a * 2.0)
    torch.testing.assert_close(eager_times_factor(a.double().float()), a * 2.0)


# -- the CPU runtime helper library ---------------------------------------------------------
def test_the_cpu_runtime_library_is_checksummed(cache_dir):
    from tilewright_cpu import runtime

    runtime.load.cache_clear()
    path = runtime.load()
    assert Path(str(path) + ".sha256").read_text().strip() == cache_mod.digest(path)
    path.write_bytes(b"\x7fELF truncated")
    runtime.load.cache_clear()
    with pytest.warns(RuntimeWarning, match="does not match its checksum"):
        path = runtime.load()
    assert Path(str(path) + ".sha256").read_text().strip() == cache_mod.digest(path)
    assert stat.S_ISREG(path.stat().st_mode)
