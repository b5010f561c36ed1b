"""Open a rendered report in headless Chromium: no JavaScript error, every chart drawn.

    python -m pytest -q -m browser tests/test_report_browser.py

Chromium's ``--dump-dom`` prints the DOM after ``--virtual-time-budget`` of page time. A small
probe script, injected only into the test's copy of the page, records errors (window.onerror,
console.error, unhandled rejections) and, after load, the number of plot divs that hold an
SVG into ``<pre>`` elements that the dumped DOM then carries. Skipped when Chromium is absent,
except in CI (``CI=true``), where .ci/run installs it and its absence is a failure.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from andrea_diag.report import render_cascade, render_report

pytestmark = [pytest.mark.browser, pytest.mark.slow]  # chromium: 5-6 s a page

CHROMIUM_NAMES = ("/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome")

# Runs before plotly.js (injected right after <head>), so errors thrown while it loads count.
PROBE = """<script>
(function () {
  var errors = [];
  function put(id, text) {
    var el = document.getElementById(id);
    if (!el) { el = document.createElement('pre'); el.id = id; document.body.appendChild(el); }
    el.textContent = text;
  }
  window.addEventListener('error', function (e) { errors.push('error: ' + e.message); });
  window.addEventListener('unhandledrejection', function (e) { errors.push('rejection: ' + e.reason); });
  var orig = console.error;
  console.error = function () {
    errors.push('console.error: ' + Array.prototype.join.call(arguments, ' '));
    return orig.apply(console, arguments);
  };
  window.addEventListener('load', function () {
    setTimeout(function () {
      var plots = document.querySelectorAll('.js-plotly-plot');
      var drawn = 0;
      plots.forEach(function (p) { if (p.querySelector('.main-svg')) drawn++; });
      put('plots-rendered', JSON.stringify({divs: plots.length, drawn: drawn}));
      var banner = document.getElementById('run-status');  // unfinished runs only
      if (banner) {
        var r = banner.getBoundingClientRect(), s = getComputedStyle(banner);
        put('banner', JSON.stringify({
          text: banner.innerText, top: r.top, height: r.height, viewport: window.innerHeight,
          shown: s.display !== 'none' && s.visibility !== 'hidden' && parseFloat(s.opacity) > 0
        }));
      }
      put('js-errors', JSON.stringify(errors));
    }, 500);
  });
})();
</script>"""


def _chromium() -> str | None:
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def _dump_dom(chromium: str, page: Path, profile: Path) -> str:
    cmd = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",  # containers have a tiny /dev/shm
        f"--user-data-dir={profile}",
        "--virtual-time-budget=10000",
        "--dump-dom",
        page.as_uri(),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
    assert out.returncode == 0, f"chromium failed ({out.returncode}): {out.stderr[-2000:]}"
    return out.stdout


def _pre(dom: str, element_id: str) -> str:
    m = re.search(rf'<pre id="{element_id}">(.*?)</pre>', dom, re.S)
    assert m, f"probe element #{element_id} missing: the page did not finish loading"
    return (
        m.group(1)
        .replace("&quot;", '"')
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
    )


def _need_chromium() -> str:
    chromium = _chromium()
    if chromium is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(
                "chromium not found in CI (.ci/run installs it): the report is untested in a browser"
            )
        pytest.skip("chromium not installed (apt-get install -y chromium)")
    return chromium


def _probed_dom(chromium: str, html_text: str, tmp_path: Path) -> str:
    """Load a probed copy of the page; returns the DOM after the probe ran."""
    probed = tmp_path / "probed.html"  # only the test's copy carries the probe
    probed.write_text(html_text.replace("<head>", "<head>\n" + PROBE, 1), encoding="utf-8")
    return _dump_dom(chromium, probed, tmp_path / "profile")


def _probe(chromium: str, html_text: str, tmp_path: Path) -> tuple[list[str], dict[str, int]]:
    """Load a probed copy of the page; returns (JS errors, plot div counts)."""
    dom = _probed_dom(chromium, html_text, tmp_path)
    return json.loads(_pre(dom, "js-errors")), json.loads(_pre(dom, "plots-rendered"))


def test_report_renders_in_chromium(tmp_path: Path, make_run: Callable[..., Path]) -> None:
    chromium = _need_chromium()
    runs = [make_run(tmp_path / "none", clip="none"), make_run(tmp_path / "global", clip="global")]
    text = render_report(runs, tmp_path / "report.html").read_text()
    n_figs = json.loads(re.search(r"id='report-meta'>(.*?)</script>", text).group(1))["figures"]
    assert n_figs >= 7

    errors, plots = _probe(chromium, text, tmp_path)
    assert errors == [], f"JavaScript errors in the report: {errors}"
    assert plots == {"divs": n_figs, "drawn": n_figs}


def test_probe_catches_errors(tmp_path: Path) -> None:
    """Negative control: the probe really sees a thrown error, console.error and an undrawn plot."""
    chromium = _need_chromium()
    page = (
        "<!DOCTYPE html><html><head><title>broken</title></head><body>"
        "<div class='js-plotly-plot'></div><script>undefinedFn();</script>"
        "<script>console.error('boom')</script></body></html>"
    )
    errors, plots = _probe(chromium, page, tmp_path)
    assert len(errors) == 2 and "undefinedFn" in errors[0] and "boom" in errors[1]
    assert plots == {"divs": 1, "drawn": 0}


def _killed_cascade(out: Path, make_run: Callable[..., Path]) -> int:
    """A cascade whose second arm was SIGKILLed at update 25 of 60: no summary, schedule or
    parquet, metrics.jsonl cut there, and the lock its dead process left. Returns that pid."""
    make_run(out / "none", clip="none", n_updates=60)
    arm = make_run(out / "global", clip="global", n_updates=60)
    for name in ("summary.json", "metrics.parquet"):
        (arm / name).unlink()
    rows = (arm / "metrics.jsonl").read_text().splitlines(keepends=True)[:25]
    (arm / "metrics.jsonl").write_text("".join(rows))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lock = {"pid": dead.pid, "host": socket.gethostname(), "started": "2025-01-02T03:04:05"}
    (arm / "run.lock").write_text(json.dumps(lock))
    meta = {"arms": ["none", "global"], "size": "tiny", "seed": 0, "status": "running"}
    (out / "cascade.json").write_text(json.dumps(meta))
    return dead.pid


def test_killed_cascade_report_shows_banner_and_plots_in_chromium(
    tmp_path: Path, make_run: Callable[..., Path]
) -> None:
    chromium = _need_chromium()
    dead = _killed_cascade(tmp_path / "c", make_run)
    text = render_cascade(tmp_path / "c").read_text(encoding="utf-8")
    n_figs = json.loads(re.search(r"id='report-meta'>(.*?)</script>", text).group(1))["figures"]
    assert n_figs >= 7

    dom = _probed_dom(chromium, text, tmp_path)
    errors, plots = json.loads(_pre(dom, "js-errors")), json.loads(_pre(dom, "plots-rendered"))
    assert errors == [], f"JavaScript errors in the report: {errors}"
    assert plots == {"divs": n_figs, "drawn": n_figs}
    banner = json.loads(_pre(dom, "banner"))
    assert banner["shown"] and banner["height"] > 0
    assert 0 <= banner["top"] < banner["viewport"], "the banner is not on the first screen"
    assert "This run did not finish" in banner["text"]
    assert "none: finished at update 60 of 60" in banner["text"]
    assert (
        f"global: stopped at update 25 of 60 — killed (no summary, lock left by dead process {dead})"
        in banner["text"]
    )
