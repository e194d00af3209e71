"""TileLang's warp specialisation by hand on warps, as DeepSeek's mHC pre kernel writes it
(``threads=96``, ``if T.get_thread_binding() < 32:`` around T.Parallel nests and reductions
of a fragment): an ``if`` / ``else`` on the thread index selecting whole warps is a role of
those threads (transforms/threads.py ``thread_ranges_as_roles``), its tile ops spread over
them and its barriers named barriers of them (a role starting inside a warpgroup takes ids
11-15). Run in the host emulation against torch for sm_90a and sm_80, built with NVRTC; a
range that is not whole warps stays refused at the ``if``."""

import hostemu
import pytest
import tilewright
import tilewright_cuda.language as T
import torch
from tilewright.errors import KernelError, UnsupportedOpError

H, WIDTH, CHUNK, TOKENS, REPEAT, EPS = 4, 64, 16, 3, 3, 1e-6


def mhc_like(split="if_else"):
    """Per token: the first warp turns an H x H block into a Sinkhorn-normalised matrix
    (row softmax, then column and row normalisations in a loop) written to a shared tile;
    the other 64 threads (``else``: a T.Pipelined loop of copies, as mHC's; or ``tx >= 32``)
    scale the token's row into another shared tile; after the ``if`` every thread reads
    both."""

    @T.prim_func
    def main(X: T.Tensor((TOKENS, H * H), "float32"), R: T.Tensor((TOKENS, WIDTH), "float32"),
             C: T.Tensor((TOKENS, H * H), "float32"), Y: T.Tensor((TOKENS, WIDTH), "float32")):
        with T.Kernel(TOKENS, threads=96) as b:
            comb = T.alloc_shared((H * H,), "float32")
            row = T.alloc_shared((WIDTH,), "float32")
            tx = T.get_thread_binding()
            if tx < 32:
                cm = T.alloc_fragment((H, H), "float32")
                row_max = T.alloc_fragment((H,), "float32")
                row_sum = T.alloc_fragment((H,), "float32")
                col_sum = T.alloc_fragment((H,), "float32")
                for j, k in T.Parallel(H, H):
                    cm[j, k] = X[b, j * H + k]
                T.reduce_max(cm, row_max, dim=1)
                for j, k in T.Parallel(H, H):
                    cm[j, k] = T.exp(cm[j, k] - row_max[j])
                T.reduce_sum(cm, row_sum, dim=1)
                for j, k in T.Parallel(H, H):
                    cm[j, k] = cm[j, k] / row_sum[j] + EPS
                for _ in T.serial(REPEAT):
                    T.reduce_sum(cm, col_sum, dim=0)
                    for j, k in T.Parallel(H, H):
                        cm[j, k] = cm[j, k] / (col_sum[k] + EPS)
                    T.reduce_sum(cm, row_sum, dim=1)
                    for j, k in T.Parallel(H, H):
                        cm[j, k] = cm[j, k] / (row_sum[j] + EPS)
                for j, k in T.Parallel(H, H):
                    comb[j * H + k] = cm[j, k]
            if split == "if_else":
                if tx < 32:
                    pass
                else:
                    for c in T.Pipelined(WIDTH // CHUNK, num_stages=2):
                        part = T.alloc_shared((CHUNK,), "float32")
                        T.copy(R[b, c * CHUNK], part)
                        for j in T.Parallel(CHUNK):
                            row[c * CHUNK + j] = part[j] * 2.0
            else:
                if tx >= 32:
                    T.copy(R[b, :], row)
                    for j in T.Parallel(WIDTH):
                        row[j] = row[j] * 2.0
            for j in T.Parallel(H * H):
                C[b, j] = comb[j]
            for j in T.Parallel(WIDTH):
                Y[b, j] = row[j] + comb[j % (H * H)]

    return main


def one_chain():
    """The ``if tx < 32: ... else: ...`` chain itself (two roles side by side)."""

    @T.prim_func
    def main(X: T.Tensor((TOKENS, H * H), "float32"), R: T.Tensor((TOKENS, WIDTH), "float32"),
             C: T.Tensor((TOKENS, H * H), "float32"), Y: T.Tensor((TOKENS, WIDTH), "float32")):
        with T.Kernel(TOKENS, threads=96) as b:
            comb = T.alloc_shared((H * H,), "float32")
            row = T.alloc_shared((WIDTH,), "float32")
            if T.get_thread_binding() < 32:
                cm = T.alloc_fragment((H, H), "float32")
                row_sum = T.alloc_fragment((H,), "float32")
                for j, k in T.Parallel(H, H):
                    cm[j, k] = T.exp(X[b, j * H + k])
                T.reduce_sum(cm, row_sum, dim=1)
                for j, k in T.Parallel(H, H):
                    comb[j * H + k] = cm[j, k] / row_sum[j]
            else:
                part = T.alloc_shared((WIDTH,), "float32")
                T.copy(R[b, :], part)
                for j in T.Parallel(WIDTH):
                    row[j] = part[WIDTH - 1 - j] * 2.0
            for j in T.Parallel(H * H):
                C[b, j] = comb[j]
            for j in T.Parallel(WIDTH):
                Y[b, j] = row[j] + comb[j % (H * H)]

    return main


def _inputs():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(TOKENS, H * H, generator=g)
    r = torch.randn(TOKENS, WIDTH, generator=g)
    return x, r, torch.zeros(TOKENS, H * H), torch.zeros(TOKENS, WIDTH)


def _sinkhorn(x):
    cm = torch.softmax(x.view(TOKENS, H, H), -1) + EPS
    for _ in range(REPEAT):
        cm = cm / (cm.sum(-2, keepdim=True) + EPS)
        cm = cm / (cm.sum(-1, keepdim=True) + EPS)
    return cm.reshape(TOKENS, H * H)


def _lower(func, arch):
    return tilewright.lower(func, f"cuda -arch={arch}")


def _kernel(text):
    return text[text.rindex('extern "C" __global__'):]


def test_a_warp_range_is_a_role_of_its_threads():
    text = _kernel(_lower(mhc_like(), "sm_90a").source.text)
    assert "if (((int)threadIdx.x) < 32) {" in text
    assert "if (32 <= ((int)threadIdx.x)) {" in text
    # the reductions' barriers are the first warp's (id 1), the copy's the other two warps'
    # (a role starting inside a warpgroup: id 11); the block's barrier after the roles
    assert "tw_named_barrier_sync(1, 32);" in text
    assert "tw_named_barrier_sync(11, 64);" in text
    assert "__syncthreads();" in text


@pytest.mark.emulator
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("split", ["if_else", "ge"])
def test_warp_roles_match_torch_in_emulation(tmp_path, arch, split):
    lowered = _lower(mhc_like(split), arch)
    x, r, c, y = _inputs()
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, x, r, c, y)
    comb = _sinkhorn(x)
    torch.testing.assert_close(c, comb)
    torch.testing.assert_close(y, r * 2 + comb.repeat(1, WIDTH // (H * H)))


@pytest.mark.emulator
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_an_if_else_chain_of_warps_matches_torch_in_emulation(tmp_path, arch):
    lowered = _lower(one_chain(), arch)
    x, r, c, y = _inputs()
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, x, r, c, y)
    comb = torch.softmax(x.view(TOKENS, H, H), -1).reshape(TOKENS, H * H)
    torch.testing.assert_close(c, comb)
    torch.testing.assert_close(y, r.flip(-1) * 2 + comb.repeat(1, WIDTH // (H * H)))


@pytest.mark.nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_warp_roles_build_with_nvrtc(arch):
    for func in (mhc_like(), mhc_like("ge"), one_chain()):
        kernel = tilewright.compile(func, target=f"cuda -arch={arch}")
        with open(f"{kernel.artifact_dir}/kernel.cubin", "rb") as f:
            assert f.read(4) == b"\x7fELF"


def test_a_range_of_part_of_a_warp_stays_refused_at_the_if():
    @T.prim_func
    def main(A: T.Tensor((96,), "float32")):
        with T.Kernel(1, threads=96):
            if T.get_thread_binding() < 40:
                for i in T.Parallel(40):
                    A[i] = 1.0

    with pytest.raises(KernelError, match=r"a T\.Parallel loop under a condition on the thread "
                                          r"index") as info:
        _lower(main, "sm_90a")
    assert "test_cuda_warp_roles.py" in str(info.value)  # at the user's 'if'


def test_setmaxnreg_in_a_role_of_part_of_a_warpgroup_is_refused():
    def kernel(part):
        @T.prim_func
        def main(Y: T.Tensor((256,), "float32")):
            with T.Kernel(1, threads=256):
                if T.get_thread_binding() < part:
                    T.set_max_nreg(240, 1)
                    T.fill(Y, 1.0)

        return main

    assert "tw_setmaxnreg_inc<240>" in _lower(kernel(128), "sm_90a").source.text
    with pytest.raises(KernelError, match=r"T\.set_max_nreg issues setmaxnreg, which the 128 "
                                          r"threads of a warpgroup execute together, but its "
                                          r"role is threads 0\.\.63"):
        _lower(kernel(64), "sm_90a")


def test_a_sixth_role_with_barriers_starting_inside_a_warpgroup_is_refused():
    def kernel(barriers):
        @T.macro
        def reverse(A, B, s, k):  # B's row k is A's reversed (through shared: a barrier)
            if barriers:
                T.copy(A[k, :], s)
                for i in T.Parallel(32):
                    B[k, i] = s[31 - i]
            else:
                for i in T.Parallel(32):
                    B[k, i] = A[k, 31 - i]

        @T.prim_func
        def main(A: T.Tensor((6, 32), "float32"), B: T.Tensor((6, 32), "float32")):
            with T.Kernel(1, threads=768):
                tx = T.get_thread_binding()
                s = T.alloc_shared((32,), "float32")
                if tx >= 32 and tx < 64:
                    reverse(A, B, s, 0)
                if tx >= 160 and tx < 192:
                    reverse(A, B, s, 1)
                if tx >= 288 and tx < 320:
                    reverse(A, B, s, 2)
                if tx >= 416 and tx < 448:
                    reverse(A, B, s, 3)
                if tx >= 544 and tx < 576:
                    reverse(A, B, s, 4)
                if tx >= 672 and tx < 704:
                    reverse(A, B, s, 5)

        return main

    text = _kernel(_lower(kernel(barriers=False), "sm_90a").source.text)
    assert "tw_named_barrier_sync" not in text  # roles without barriers take no id
    with pytest.raises(UnsupportedOpError, match=r"roles with barriers starting at more than 5 "
                                                 r"threads inside a warpgroup \(here 32, 160, "
                                                 r"288, 416, 544, 672\)") as info:
        _lower(kernel(barriers=True), "sm_90a")
    assert "test_cuda_warp_roles.py" in str(info.value)
