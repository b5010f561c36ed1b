"""``report --png`` / ``--svg``: every chart of the page as an image beside the HTML, drawn by
kaleido in headless Chromium; without kaleido or a browser, one line, non-zero exit, HTML kept.

    python -m pytest -q tests/test_report_images.py

The drawing test needs kaleido (``test`` extra) and Chromium: skipped when Chromium is absent,
except in CI (``CI=true``), where .ci/run installs it and its absence is a failure.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from andrea_diag.cli import app
from andrea_diag.report.images import WIDTH

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "chrome")
runner = CliRunner()


def _need_browser() -> None:
    if os.environ.get("BROWSER_PATH") or any(shutil.which(n) for n in CHROMIUM_NAMES):
        return
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail("chromium not found in CI (.ci/run installs it): report --png is untested")
    pytest.skip("chromium not installed (apt-get install -y chromium)")


@pytest.fixture
def cascade(make_run, tmp_path) -> Path:
    casc = tmp_path / "casc"
    make_run(casc / "none", n_updates=60)
    make_run(casc / "global", clip="global", n_updates=60)
    (casc / "cascade.json").write_text(json.dumps({"arms": ["none", "global"], "size": "tiny"}))
    return casc


def _report(*args: str):
    res = runner.invoke(app, ["report", *args])
    assert "Traceback" not in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)
    return res


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])  # IHDR: width, height


@pytest.mark.browser
@pytest.mark.slow  # kaleido renders every chart: ~8 s
def test_report_png_and_svg_write_every_chart_beside_the_html(cascade):
    _need_browser()
    res = _report(str(cascade), "--png", "--svg")
    assert res.exit_code == 0, res.output
    page = (cascade / "report.html").read_text()
    slugs = re.findall(r'<div id="fig-([a-z0-9-]+)"', page)
    meta = json.loads(re.search(r"id='report-meta'>(.*?)</script>", page).group(1))
    assert len(slugs) == meta["figures"] >= 6  # every drawn chart has a div
    for slug in slugs:
        width, height = _png_size(cascade / f"report-{slug}.png")
        assert width == WIDTH and height >= 150, slug
        svg = (cascade / f"report-{slug}.svg").read_text()
        assert svg.lstrip().startswith("<svg") and "<path" in svg, slug
    # the charts carry data, not a blank canvas: an arm's name is drawn in the legend
    assert ">global<" in (cascade / "report-gradient-norm.svg").read_text()
    assert sorted(p.name for p in cascade.glob("report-*.png")) == sorted(
        f"report-{s}.png" for s in slugs
    )


def test_report_png_without_a_browser_is_one_line_and_keeps_the_html(cascade, monkeypatch):
    pytest.importorskip("kaleido")
    monkeypatch.setenv("BROWSER_PATH", str(cascade / "no-such-chromium"))
    res = _report(str(cascade), "--png")
    assert res.exit_code != 0
    assert "no Chrome or Chromium was found" in res.output
    assert "apt-get install chromium" in res.output
    assert (cascade / "report.html").stat().st_size > 100_000  # the page, plotly.js inlined
    assert not list(cascade.glob("report-*.png"))


def test_report_png_without_kaleido_is_one_line_and_keeps_the_html(make_run, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "kaleido", None)
    run = make_run(tmp_path / "none", n_updates=30)
    out = tmp_path / "page.html"
    res = _report(str(run), "--out", str(out), "--png")
    assert res.exit_code != 0
    assert "static images need kaleido" in res.output and 'pip install "kaleido>=1"' in res.output
    assert len([ln for ln in res.output.splitlines() if ln.startswith("error:")]) == 1
    assert out.exists()


def test_report_png_of_a_sweep_page_says_to_pass_a_cell(tmp_path):
    (tmp_path / "sweep.json").write_text("{}")
    res = _report(str(tmp_path), "--png")
    assert res.exit_code != 0
    assert "not of the sweep page" in res.output
