"""The HTML report in headless Chromium: load it, press j and k, toggle the theme, expand all,
take a screenshot. Skipped when no Chromium is installed."""

import json
import re
import shutil
import subprocess

import pytest
import tvm
from tilewright.tools import lower_trace as lt
from tool_kernels import gemm

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome",
                                           "chrome") if shutil.which(n)), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed "
                                "(apt-get install chromium) to test the HTML report")

HARNESS = """<!DOCTYPE html><html><body>
<iframe id="f" src="report.html" width="1200" height="800"></iframe><pre id="out">pending</pre>
<script>
document.getElementById("f").onload = () => {
  const w = document.getElementById("f").contentWindow, d = w.document, r = {};
  const sel = () => { const e = d.querySelector(".item.sel"); return e ? +e.dataset.i : null; };
  const key = (k, shift) => d.dispatchEvent(new w.KeyboardEvent("keydown",
      {key: k, shiftKey: !!shift, bubbles: true}));
  r.items = d.querySelectorAll(".item").length;
  r.dots = [...d.querySelectorAll(".item .dot")].map(e => e.textContent).join("");
  r.start = sel(); r.errbox = !!d.getElementById("errbox");
  key("k"); r.afterK0 = sel();
  key("j"); r.afterJ = sel();
  key("j"); r.afterJJ = sel();
  key("k"); r.afterK = sel(); r.rows = d.querySelectorAll("table.diff tr").length;
  r.hidden = d.querySelectorAll("tr.hid").length;
  r.words = d.querySelectorAll("span.aw, span.dw").length;
  key("E", true); r.hiddenExpanded = d.querySelectorAll("tr.hid").length;
  r.theme0 = d.documentElement.dataset.theme;
  d.getElementById("theme").click(); r.theme1 = d.documentElement.dataset.theme;
  try { r.stored = w.localStorage.getItem("tw-trace-theme"); } catch (e) { r.stored = "n/a"; }
  r.tabs = [...d.querySelectorAll("#tabs button")].map(b => b.textContent);
  r.status = d.getElementById("status").textContent;
  document.getElementById("out").textContent = JSON.stringify(r);
};
</script></body></html>"""


def _flags(tmp_path):
    return [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--allow-file-access-from-files", f"--user-data-dir={tmp_path / 'profile'}"]


def test_report_keys_theme_and_screenshot(tmp_path):
    def boom(mod):
        raise RuntimeError("planted failure")

    replace = lambda mod: tvm.IRModule({"main": gemm(K=128)})
    with pytest.raises(RuntimeError):
        lt.lower_trace(gemm(), [("Simplify", tvm.tirx.transform.StmtSimplify()),
                                ("Grow K", replace), ("Boom", boom)],
                       mode="html", html_path=tmp_path / "report.html")
    (tmp_path / "harness.html").write_text(HARNESS)
    dom = subprocess.run([*_flags(tmp_path), "--virtual-time-budget=10000", "--dump-dom",
                          f"file://{tmp_path / 'harness.html'}"],
                         check=False, capture_output=True, text=True, timeout=120)
    found = re.search(r'<pre id="out">(.*?)</pre>', dom.stdout, re.DOTALL)
    assert found and found.group(1) != "pending", dom.stderr[-2000:]
    r = json.loads(found.group(1).replace("&quot;", '"'))
    assert r["items"] == 3 and r["dots"][2] == "\u2715"  # the failed pass
    assert r["start"] == 2 and r["errbox"]  # opens at the failure, with its error box
    assert r["afterK0"] == 1 and r["afterJ"] == 2 and r["afterK"] == 1
    assert r["rows"] > 0 and r["words"] > 0  # side-by-side diff with word highlights
    assert r["hidden"] >= 1 and r["hiddenExpanded"] == 0  # collapsed context; Shift+E
    assert r["theme0"] == "light" and r["theme1"] == "dark"
    assert r["stored"] in ("dark", "n/a")
    assert r["tabs"] == ["all", "lower_trace"] and "FAILED" in r["status"]
    shot = tmp_path / "shot.png"
    subprocess.run([*_flags(tmp_path), "--window-size=1280,800", f"--screenshot={shot}",
                    f"file://{tmp_path / 'report.html'}"], check=False, capture_output=True,
                   timeout=120)
    assert shot.exists() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert shot.stat().st_size > 10_000
