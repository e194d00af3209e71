"""The disk cache of compiled kernels: hits across processes, corruption, races, leftovers."""

import importlib
import json
import os
import subprocess
import sys
import time

import pytest
import tilewright
import torch
from tilewright.jit.cache import DiskCache

KERNEL_SOURCE = '''
import tilewright
import tilewright.language as T


def make(M=256, scale=1.0):
    @T.prim_func
    def main(A: T.Tensor((M,), "float32"), B: T.Tensor((M,), "float32"),
             C: T.Tensor((M,), "float32")):
        with T.Kernel(T.ceildiv(M, 64)) as bx:
            for i in T.Parallel(64):
                C[bx * 64 + i] = (A[bx * 64 + i] + B[bx * 64 + i]) * scale
    return main
'''

CHILD = '''
import json, os, sys, time
import torch
sys.path.insert(0, sys.argv[1])
import importlib
import tilewright
from cachekernel import make

jk = importlib.import_module("tilewright.jit.kernel")  # `tilewright.jit` is the decorator
built = []
inner = jk._build_into_cache
jk._build_into_cache = lambda *a, **k: built.append(1) or inner(*a, **k)
kind, name = sys.argv[2].split(":")
if kind == "gate":  # wait until the parent has filled the cache
    while not os.path.exists(os.path.join(sys.argv[1], name)):
        time.sleep(0.01)
else:  # "race:N": wait until both racers are ready, so that they compile at the same moment
    open(os.path.join(sys.argv[1], "ready-" + name), "w").close()
    while len([f for f in os.listdir(sys.argv[1]) if f.startswith("ready-")]) < 2:
        time.sleep(0.01)
start = time.perf_counter()
kernel = tilewright.compile(make(), out_idx=[-1], target="cpu")
seconds = time.perf_counter() - start
a, b = torch.randn(256), torch.randn(256)
ok = torch.allclose(kernel(a, b), a + b)
print(json.dumps({"built": len(built), "ok": ok, "dir": kernel.artifact_dir, "s": seconds}))
'''


@pytest.fixture
def kernel_module(tmp_path, monkeypatch):
    folder = tmp_path / "mod"
    folder.mkdir()
    (folder / "cachekernel.py").write_text(KERNEL_SOURCE)
    monkeypatch.syspath_prepend(str(folder))
    sys.modules.pop("cachekernel", None)
    import cachekernel

    yield folder, cachekernel
    sys.modules.pop("cachekernel", None)


@pytest.fixture(scope="module")
def children(tmp_path_factory):
    """Child processes started together, so that their slow imports (torch, TVM) overlap:
    one waits for its cache to be filled, one races this process to fill another."""
    root = tmp_path_factory.mktemp("children")
    (root / "cachekernel.py").write_text(KERNEL_SOURCE)
    (root / "child.py").write_text(CHILD)
    caches = {"fresh": root / "fresh-cache", "race": root / "race-cache"}

    def start(cache, mode):
        env = {**os.environ, "TILEWRIGHT_CACHE_DIR": str(cache)}
        return subprocess.Popen([sys.executable, str(root / "child.py"), str(root), mode],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env)

    procs = {"fresh": start(caches["fresh"], "gate:go"),
             "race": start(caches["race"], "race:child")}
    yield root, caches, procs
    for proc in procs.values():
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def compile_(func, **kw):
    return tilewright.compile(func, out_idx=[-1], target="cpu", **kw)


def entries(root) -> list:
    return sorted(p for p in (root / "kernels").glob("*/*") if p.is_dir()) \
        if (root / "kernels").exists() else []


def check(kernel, n=256, scale=1.0):
    a, b = torch.randn(n), torch.randn(n)
    torch.testing.assert_close(kernel(a, b), (a + b) * scale)


def rehash_compiler_code():
    """Cache keys include a digest of the compiler's files, taken once per process at its first
    compile. Take it again here, as the child does, in case the checkout was edited since;
    returns the new digests."""
    fingerprint = getattr(importlib.import_module("tilewright.jit.kernel"), "_fingerprint", None)
    if not hasattr(fingerprint, "cache_clear"):
        return None
    fingerprint.cache_clear()
    return fingerprint("tilewright"), fingerprint("tilewright_cpu")


def result(proc) -> dict:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def test_fresh_process_hits_the_cache(kernel_module, children, monkeypatch):
    _, mod = kernel_module
    root, caches, procs = children
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(caches["fresh"]))
    code = rehash_compiler_code()
    first = compile_(mod.make())
    check(first)
    [entry] = entries(caches["fresh"])
    assert first.artifact_dir == str(entry)
    meta = json.loads((entry / "meta.json").read_text())
    for phase in ("lower_tile_ops", "lower_loops", "lower_memory", "lower_blocks", "codegen",
                  "build"):
        assert meta["timings"][phase] >= 0
    assert "kernel.so" in meta["files"]
    before = (entry / "meta.json").stat().st_mtime_ns

    (root / "go").touch()
    out = result(procs["fresh"])
    if out["built"] and rehash_compiler_code() != code:
        pytest.skip("the compiler's files were edited during the test, which changes the key")
    assert out == {**out, "built": 0, "ok": True, "dir": str(entry)}
    assert entries(caches["fresh"]) == [entry]
    assert (entry / "meta.json").stat().st_mtime_ns == before


def test_two_processes_compiling_at_once(kernel_module, children, monkeypatch):
    _, mod = kernel_module
    root, caches, procs = children
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(caches["race"]))
    jk = importlib.import_module("tilewright.jit.kernel")
    built = []
    inner = jk._build_into_cache
    monkeypatch.setattr(jk, "_build_into_cache", lambda *a, **k: built.append(1) or inner(*a, **k))
    deadline = time.monotonic() + 120
    while not (root / "ready-child").exists():  # the child has imported everything
        assert procs["race"].poll() is None, procs["race"].communicate()[1]
        assert time.monotonic() < deadline
        time.sleep(0.01)
    rehash_compiler_code()
    (root / "ready-parent").touch()
    kernel = compile_(mod.make())
    out = result(procs["race"])
    check(kernel)
    assert out["ok"]
    assert out["built"] + len(built) == 1  # the lock kept the second from building
    [entry] = entries(caches["race"])
    assert {out["dir"], kernel.artifact_dir} == {str(entry)}
    assert not list((caches["race"] / "tmp").iterdir())


@pytest.mark.parametrize("victim", ["kernel.so", "meta.json"])
def test_corrupt_entry_warns_and_rebuilds(kernel_module, cache_dir, victim):
    _, mod = kernel_module
    compile_(mod.make())
    [entry] = entries(cache_dir)
    # write the truncated file under a new inode: truncating in place the library this
    # process has mapped would crash it (SIGBUS), as it would any dlopen user
    data = (entry / victim).read_bytes()
    (entry / "partial").write_bytes(data[:10])
    os.replace(entry / "partial", entry / victim)
    with pytest.warns(RuntimeWarning, match="invalid"):
        kernel = compile_(mod.make())
    check(kernel)
    assert entries(cache_dir) == [entry]
    assert DiskCache(cache_dir).lookup(entry.name) is not None


def test_missing_library_warns_and_rebuilds(kernel_module, cache_dir):
    _, mod = kernel_module
    compile_(mod.make())
    [entry] = entries(cache_dir)
    (entry / "kernel.so").unlink()
    with pytest.warns(RuntimeWarning, match="invalid"):
        check(compile_(mod.make()))


def test_leftover_staging_dir_is_harmless(kernel_module, cache_dir):
    _, mod = kernel_module
    # what a compile killed between building and renaming leaves behind
    stale = cache_dir / "tmp" / "build-999999-dead"
    stale.mkdir(parents=True)
    (stale / "kernel.so").write_bytes(b"\x7fELF half a library")
    (cache_dir / "locks").mkdir()
    kernel = compile_(mod.make())
    check(kernel)
    assert len(entries(cache_dir)) == 1
    check(compile_(mod.make()))
    cache = DiskCache(cache_dir)
    assert cache.clear() == 1
    assert not stale.exists() and entries(cache_dir) == []


def test_disable_cache_bypasses_the_cache(kernel_module, cache_dir):
    _, mod = kernel_module
    kernel = compile_(mod.make(), pass_configs={"tw.disable_cache": True})
    check(kernel)
    assert kernel.artifact_dir is None
    assert entries(cache_dir) == []
    # and it neither reads an existing entry
    compile_(mod.make())
    [entry] = entries(cache_dir)
    # a new inode: this process has the old library mapped (see the corruption test)
    (entry / "garbage").write_bytes(b"garbage")
    os.replace(entry / "garbage", entry / "kernel.so")
    check(compile_(mod.make(), pass_configs={"tw.disable_cache": True}))


def test_key_follows_pass_configs_and_source(kernel_module, cache_dir):
    _, mod = kernel_module
    base = compile_(mod.make()).artifact_dir
    assert compile_(mod.make()).artifact_dir == base
    novec = compile_(mod.make(), pass_configs={"tw.disable_vectorize": True})
    check(novec)
    scaled = compile_(mod.make(scale=2.0))
    check(scaled, scale=2.0)
    other_size = compile_(mod.make(M=128))
    check(other_size, n=128)
    dirs = {base, novec.artifact_dir, scaled.artifact_dir, other_size.artifact_dir}
    assert len(dirs) == 4
    assert len(entries(cache_dir)) == 4


def test_jit_hits_cache_without_relowering(kernel_module, cache_dir, monkeypatch):
    _, mod = kernel_module
    compile_(mod.make())
    jk = importlib.import_module("tilewright.jit.kernel")

    def fail(*a, **k):
        raise AssertionError("lowered again despite a cache entry")

    monkeypatch.setattr(jk, "lower", fail)
    start = time.perf_counter()
    kernel = compile_(mod.make())
    assert time.perf_counter() - start < 5
    check(kernel)


def test_key_follows_kernel_source_not_its_formatting(kernel_module, cache_dir):
    folder, mod = kernel_module
    base = compile_(mod.make()).artifact_dir

    def variant(source: str, name: str):
        (folder / f"{name}.py").write_text(source)
        return importlib.import_module(name)

    commented = variant(KERNEL_SOURCE.replace("    return main", "    # note\n    return main"),
                        "cachekernel_comment")
    assert compile_(commented.make()).artifact_dir == base
    edited = variant(KERNEL_SOURCE.replace("A[bx * 64 + i] + B", "A[bx * 64 + i] - B"),
                     "cachekernel_edit")
    kernel = compile_(edited.make())
    assert kernel.artifact_dir != base
    a, b = torch.randn(256), torch.randn(256)
    torch.testing.assert_close(kernel(a, b), a - b)
    assert len(entries(cache_dir)) == 2


def test_the_compiler_fingerprint_covers_files_besides_python(tmp_path, monkeypatch):
    # a backend's headers are compiled into every kernel: editing one must change cache keys
    import sys
    import types

    from tilewright.jit.kernel import _fingerprint

    pkg = tmp_path / "tw_fake_backend"
    (pkg / "include").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    header = pkg / "include" / "fake.h"
    header.write_text("// one\n")
    module = types.ModuleType("tw_fake_backend")
    module.__file__ = str(pkg / "__init__.py")
    monkeypatch.setitem(sys.modules, "tw_fake_backend", module)
    before = _fingerprint("tw_fake_backend")
    _fingerprint.cache_clear()
    header.write_text("// two, longer\n")
    assert _fingerprint("tw_fake_backend") != before
    _fingerprint.cache_clear()
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "x.pyc").write_bytes(b"0")  # bytecode is not the compiler's source
    again = _fingerprint("tw_fake_backend")
    _fingerprint.cache_clear()
    (pkg / "__pycache__" / "x.pyc").write_bytes(b"0123")
    assert _fingerprint("tw_fake_backend") == again
    _fingerprint.cache_clear()
