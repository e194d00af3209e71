"""The GPU benchmark's bundles built here by build_bundles.py (bench/), each row's SASS checked,
and the harness's GPU-free bundle check (``harness.py --list``) on them, run as the GPU
machine runs it: a separate process without TVM."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
ROOT = BENCH.parents[1]
sys.path.insert(0, str(BENCH))

import build_bundles  # noqa: E402 - after the sys.path setup
import sass  # noqa: E402
import sass_loops  # noqa: E402
from test_cuda_sparse_gemm import metadata_races  # noqa: E402


@pytest.mark.nvrtc
@pytest.mark.sass
@pytest.mark.parametrize(("only", "rows"), [
    ("fp8_gemm_tensor", {"fp8_gemm_tensor_1024": ("fp8_gemm", "QGMMA.64x256x32.F32.E4M3.E4M3")}),
    ("int8_gemm,gemm_sp", {"gemm_sp_float16_1024": ("gemm_sp", "HGMMA.SP.64x256x32.F32"),
                           "int8_gemm_1024": ("int8_gemm", "IGMMA.64x256x32.S8.S8")}),
])
def test_low_precision_bundles_build_on_wgmma_and_pass_the_list(tmp_path, monkeypatch, only,
                                                                 rows):
    # run_h200.sh build --only ...: each row's SASS shows its wgmma form, QGMMA (no HMMA) for
    # fp8, IGMMA (no IMMA or HMMA) for int8, the sparse HGMMA.SP (no dense HMMA or HGMMA) for
    # 2:4 (the build fails otherwise); harness.py --list accepts the bundles, whose kinds the
    # harness times against their peers (torch._scaled_mm, torch._int_mm, the dense cuBLAS
    # torch.matmul)
    monkeypatch.setattr(sys, "argv", ["build_bundles.py", "--out", str(tmp_path), "--quick",
                                      "--checks", "none", "--only", only])
    assert build_bundles.main() == 0
    built = sorted(p.name for p in (tmp_path / "quick").iterdir())
    assert built == sorted(rows)
    for name, (kind, instruction) in rows.items():
        case = json.loads((tmp_path / "quick" / name / "case.json").read_text())
        assert case["kind"] == kind and case["build"]["sass"][instruction] > 0
    listed = _list(tmp_path, "--quick")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert all(re.search(rf"{name} +ok ", listed.stdout) for name in rows)
    cubin = (tmp_path / "quick" / built[-1] / "kernel.cubin").read_bytes()
    with pytest.raises(SystemExit, match="the SASS has [IQ]GMMA"):
        build_bundles.check_build("row", "", cubin, ["UTMALDG.2D", "!QGMMA", "!IGMMA"])


@pytest.mark.nvrtc
@pytest.mark.sass
def test_w4a16_bundle_in_slices_of_k_records_both_kernels(tmp_path, monkeypatch):
    # the W4A16 row is a kernel sequence (split-K: the slices, then their sum): its build
    # record lists each kernel's grid and block (the build stopped at the one-kernel
    # launch['grid']), and harness.py --list accepts it
    monkeypatch.setattr(sys, "argv", ["build_bundles.py", "--out", str(tmp_path), "--quick",
                                      "--checks", "none", "--only", "w4a16"])
    assert build_bundles.main() == 0
    (name,) = [p.name for p in (tmp_path / "quick").iterdir()]
    case = json.loads((tmp_path / "quick" / name / "case.json").read_text())
    m, n, splits = case["M"], case["N"], case["config"]["splits"]
    assert name == f"w4a16_m{m}_{n}" and splits == build_bundles.kernels.W4A16["splits"]
    columns = n // case["config"]["block_N"]
    assert case["build"]["grid"] == [[str(columns), "1", str(splits)], [str(n // 256), str(m),
                                                                         "1"]]
    assert case["build"]["block"] == [[128, 1, 1], [128, 1, 1]]
    assert case["build"]["smem_bytes"] > 0 and case["build"]["sass"]["HMMA.16816.F32"] > 0
    listed = _list(tmp_path, "--quick")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert re.search(rf"{name} +ok ", listed.stdout)


def test_w4a16_rows_keep_diagnostic_rows_beside_each_split_row(monkeypatch):
    monkeypatch.setattr(build_bundles.kernels.w4a16_gemm, "fn", lambda *a, **k: None)
    rows = {name: case["config"]["splits"] for name, case, *_ in build_bundles.cases(False)
            if name.startswith("w4a16")}
    suffixes = {"": 8, "_nosplit": 1, "_n64": 8, "_s4": 4, "_t256": 8, "_overlap": 4,
                "_s4ss": 4, "_swap": 8}
    assert rows == {**{f"w4a16_m{m}_8192{suffix}": splits for m in (1, 16)
                       for suffix, splits in suffixes.items()},
                    "w4a16_m1_8192_swap8": 8,  # 8-row activation tiles: M = 1 only
                    "w4a16_m1_8192_s8": 8,  # M = 1's default is kernels.W4A16_NARROW
                    # the weights in wgmma's register A operand (kernels.W4A16_REGISTER_W)
                    **{f"w4a16_m{m}_8192{suffix}": splits for m in (1, 16)
                       for suffix, splits in (("_reg", 8), ("_reg_s3", 8), ("_reg_s4", 4),
                                              ("_reg_tk", 8), ("_reg_s3_tk", 8),
                                              ("_reg_s4_tk", 4),
                                              # k-tile i + 1 dequantised under i's wgmma
                                              ("_reg_ov", 8), ("_reg_ov_tk", 8))},
                    # the scales in the pipeline's first stage (kernels.W4A16_PROLOGUE_ROWS)
                    "w4a16_m1_8192_reg_s3_tk_ps": 8, "w4a16_m16_8192_reg_s4_tk_ps": 4,
                    "w4a16_m1_8192_reg_ov_tk_ps": 8, "w4a16_m16_8192_reg_ov_s4_tk_ps": 4}


def _list(bundles: Path, *extra) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "core")}
    return subprocess.run([sys.executable, str(BENCH / "harness.py"), "--bundles",
                           str(bundles), "--list", *extra], capture_output=True, text=True,
                          env=env, check=False, timeout=120)


@pytest.mark.nvrtc
def test_harness_list_checks_bundles_without_a_gpu(tmp_path, monkeypatch):
    # build the smallest bundle the way build_bundles.py does, then break a copy of it
    case = next(c for c in build_bundles.cases(quick=True) if c[0].startswith("elementwise"))
    monkeypatch.setattr(build_bundles, "cases", lambda quick: [case])
    monkeypatch.setattr(sys, "argv", ["build_bundles.py", "--out", str(tmp_path), "--quick",
                                      "--checks", "none"])
    assert build_bundles.main() == 0
    good = _list(tmp_path, "--quick")
    assert good.returncode == 0, good.stdout + good.stderr
    assert re.search(r"elementwise_add_float32 +ok ", good.stdout) and "0 broken" in good.stdout
    sig = tmp_path / "quick" / "elementwise_add_float32" / "signature.json"
    data = json.loads(sig.read_text())
    data["params"][2]["is_output"] = False
    sig.write_text(json.dumps(data))
    bad = _list(tmp_path, "--quick")
    assert bad.returncode == 1 and "BROKEN" in bad.stdout and "signature" in bad.stdout


def test_harness_list_accepts_the_built_bundles():
    """The bundles ``run_h200.sh build`` left in bench/bundles (skipped before a build)."""
    root = BENCH / "bundles"
    if not any((p / "manifest.json").exists() for p in root.glob("*")):
        pytest.skip("no bundles built yet (backend-cuda/bench/run_h200.sh build)")
    for extra in ((), ("--quick",)):
        result = _list(root, *extra)
        assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.nvrtc
@pytest.mark.sass
def test_attention_compute_loop_builds_no_descriptor_per_wgmma():
    # the serial FlashAttention bundle's compute loop (sass_loops.py; RESULTS.md "FlashAttention
    # with fast math"): its 16 HGMMA take their descriptors as one add of a constant each to the
    # tile's descriptor, on the uniform datapath: no USHF / ULOP3 pair or R2UR per HGMMA (at these
    # sizes 553 instructions a step before, USHF 16, ULOP3 32, R2UR 18; 501 after), and fast math
    # leaves exp2 one MUFU.EX2 without the FSETP guard; the stage and the parity of its 3 stages are
    # counters, not divisions by 3 (IMAD 20 -> 9, 512 -> 496 a step), and the producer's loop stays
    # rolled: its 4 TMA loads once (2920 -> 968 instructions in the kernel)
    name, _case, func, _expect, configs = next(
        c for c in build_bundles.cases(quick=True) if c[0] == "flash_attention_float16_serial")
    kernel = build_bundles.tw_compile(func, out_idx=[3], target="cuda -arch=sm_90a",
                                      execution_backend="nvrtc", pass_configs=configs)
    text = sass.dump(kernel.executable.cubin)
    loop = sass.hot_loop(text)
    ops = [op.split(".")[0] for op in loop]
    assert ops.count("HGMMA") == 16 and ops.count("MUFU") >= 64
    assert ops.count("USHF") <= 4 and ops.count("ULOP3") <= 8 and ops.count("R2UR") <= 4 \
        and ops.count("FSETP") == 0 and ops.count("IMAD") <= 12 and len(loop) <= 500 \
        and text.count("UTMALDG") == 4, sass_loops.loop_line(name, text)


@pytest.mark.nvrtc
@pytest.mark.sass
def test_sparse_wgmma_rows_keep_their_metadata_registers_under_each_hgmma_sp():
    # every gemm_sp_float16_8192 row on the sparse wgmma, as the bundles build it (NVRTC):
    # no metadata register written under an HGMMA.SP in flight (test_cuda_sparse_gemm's
    # check: two parity branches where a group stays in flight, 3 stages or more)
    rows = [c for c in build_bundles.cases(quick=False)
            if c[0].startswith("gemm_sp_float16_8192") and not c[0].endswith("_mmasp")]
    assert len(rows) == 22  # 12 on cp.async, 10 fed by TMA (kernels.GEMM_SP_TMA_ROWS)
    for name, case, func, _expect, configs in rows:
        kernel = build_bundles.tw_compile(func, out_idx=[3], target="cuda -arch=sm_90a",
                                          execution_backend="nvrtc", pass_configs=configs)
        text = sass.dump(kernel.executable.cubin)
        held = "WARPGROUP.DEPBAR.LE gsb0, 0x1" in text
        assert held == (case["config"]["num_stages"] >= 3), name
        assert metadata_races(text) == [], (name, sass_loops.loop_line(name, text))
