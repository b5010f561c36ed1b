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
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from andrea_diag.report import render_report

pytestmark = pytest.mark.browser

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


def _probe(chromium: str, html_text: str, tmp_path: Path) -> tuple[list[str], dict[str, int]]:
    """Load a probed copy of the page; returns (JS errors, plot div counts)."""
    probed = tmp_path / "probed.html"  # only the test's copy carries the probe
    probed.write_text(html_text.replace("<head>", "<head>\n" + PROBE, 1))
    dom = _dump_dom(chromium, probed, tmp_path / "profile")
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
