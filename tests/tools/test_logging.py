"""TILEWRIGHT_LOG_LEVEL, TVM's variables passed through, and the doctor section."""

import logging
import subprocess
import sys

import pytest
from tilewright import log


@pytest.mark.parametrize("value,level", [(None, logging.WARNING), ("debug", logging.DEBUG),
                                         ("INFO", logging.INFO), ("warn", logging.WARNING),
                                         ("15", 15)])
def test_levels(value, level):
    assert log.parse_level(value) == level


def test_unknown_level_lists_valid_ones():
    with pytest.raises(ValueError, match="DEBUG, INFO, WARNING, ERROR, CRITICAL"):
        log.parse_level("chatty")


def test_configure_sets_our_logger_only(monkeypatch):
    logger = log.configure("DEBUG")
    try:
        assert logger.level == logging.DEBUG and log.get_logger("tools").isEnabledFor(10)
    finally:
        log.configure("WARNING")


def test_doctor_explains_both(monkeypatch):
    env = {"TILEWRIGHT_LOG_LEVEL": "INFO", "TVM_LOG_LEVEL": "2", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-m", "tilewright", "doctor"], check=False,
                          capture_output=True, text=True, timeout=180, env=env)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "TILEWRIGHT_LOG_LEVEL=INFO: level INFO" in out
    assert "TVM_LOG_LEVEL=2" in out and "TVM_LOG_DEBUG=(unset)" in out
    assert "passed to TVM untouched" in out


def test_engine_logs_at_debug(caplog):
    import tilewright
    from tool_kernels import add_one

    with caplog.at_level(logging.DEBUG, logger="tilewright"):
        tilewright.compile(add_one(64), out_idx=[-1], target="cpu",
                           pass_configs={"tw.disable_cache": True})
    messages = [r.getMessage() for r in caplog.records if r.name == "tilewright.engine"]
    assert any("lowering main for cpu (backend cpu)" in m for m in messages)
    assert any("built with executor llvm-shared" in m for m in messages)
