"""Pass timing and per-pass IR dumps through pass_configs."""

import tilewright
from tilewright.engine import events
from tilewright.tools import pass_timing
from tool_kernels import add_one


def test_collect_times_every_pass_and_phase():
    with pass_timing.collect() as timings:
        tilewright.compile(add_one(), out_idx=[-1], target="cpu")
    (session,) = timings.finished
    names = [name for _, name, _, _ in session.passes]
    assert "LowerTileOps" in names and "CPULowerBlocks" in names
    assert all(sec >= 0 for _, _, sec, _ in session.passes)
    assert {"lower_tile_ops", "lower_blocks", "codegen", "build"} <= set(session.phases)
    table = session.table()
    lines = table.splitlines()
    assert lines[0].startswith("pass timing: main (backend cpu)")
    secs = [float(line.split()[0]) for line in lines[2:] if "%" in line]
    assert secs == sorted(secs, reverse=True)
    assert not events.active()


def test_pass_config_prints_the_table_and_dumps_ir(tmp_path, capsys):
    tilewright.compile(add_one(), out_idx=[-1], target="cpu", pass_configs={
        "tw.pass_timing": True, "tw.dump_ir_dir": str(tmp_path)})
    err = capsys.readouterr().err
    assert "pass timing: main" in err and "lower_loops / CPULowerLoops" in err
    dumps = sorted(p.name for p in tmp_path.iterdir())
    assert dumps[:7] == ["00_bind_solved_symbols_CPUBindSolvedSymbols.tir",
                         "01_split_grid_syncs_CPUSplitGridSyncs.tir",
                         "02_serialize_threads_CPUSerializeThreads.tir",
                         "03_lower_tile_ops_CPUFloatMinMax.tir",
                         "04_lower_tile_ops_CPUFuseGemmK.tir",
                         "05_lower_tile_ops_CPUHoistGemmConversions.tir",
                         "06_lower_tile_ops_LowerTileOps.tir"]
    assert any("lower_blocks_CPULowerBlocks" in d for d in dumps)
    assert not events.active()  # the tools detach when the compilation ends


def test_dump_ir_prints(capsys):
    tilewright.compile(add_one(128), out_idx=[-1], target="cpu",
                       pass_configs={"tw.dump_ir": True})
    assert "# ---- IR after lower_loops / CPULowerLoops ----" in capsys.readouterr().err
