"""Reports of several runs: `report runs/cascade-tiny-*/` gives each cascade its own page inside
it, and one comparison page (--out) labels and colours two runs' same-named arms apart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from andrea_diag.cli import app
from andrea_diag.record import load_run
from andrea_diag.report.figures import loss_figure
from andrea_diag.report.html import _label_arms
from andrea_diag.report.style import Style

runner = CliRunner()


def _cascade(make_run, path: Path, n_updates: int) -> Path:
    make_run(path / "none", n_updates=n_updates, spikes=(5,))
    make_run(path / "global", clip="global", n_updates=n_updates, spikes=(5,))
    (path / "cascade.json").write_text(json.dumps({"arms": ["none", "global"]}))
    return path


@pytest.fixture
def two_cascades(make_run, tmp_path) -> list[Path]:
    runs = tmp_path / "runs"
    return [_cascade(make_run, runs / "cascade-tiny-a", 12),
            _cascade(make_run, runs / "cascade-tiny-b", 16)]  # fmt: skip


def test_two_runs_same_arm_names_get_distinct_labels_and_colours(two_cascades):
    arm_dirs = [c / arm for c in two_cascades for arm in ("none", "global")]
    arms = _label_arms([load_run(d) for d in arm_dirs])
    labels = [a.label for a in arms]
    assert labels == ["cascade-tiny-a/none", "cascade-tiny-a/global",
                      "cascade-tiny-b/none", "cascade-tiny-b/global"]  # fmt: skip
    style = Style(arms)
    assert len({style.of(a) for a in arms}) == 4  # two "none" arms, two colours
    fig, _ = loss_figure(arms)
    lines = {t.name: t.line.color for t in fig.data if t.name in labels}
    assert set(lines) == set(labels)
    assert lines["cascade-tiny-a/none"] != lines["cascade-tiny-b/none"]
    assert lines["cascade-tiny-a/global"] != lines["cascade-tiny-b/global"]


def test_one_run_keeps_its_plain_labels_and_the_clip_modes_own_colours(two_cascades):
    arms = _label_arms([load_run(two_cascades[0] / a) for a in ("none", "global")])
    assert [a.label for a in arms] == ["none", "global"]
    style = Style(arms)
    assert style.of(arms[0]) == style.color["none"] and style.of(arms[1]) == style.color["global"]


def test_two_monitor_runs_are_labelled_by_their_folders(make_run, tmp_path):
    dirs = [make_run(tmp_path / name, n_updates=10, spikes=(4,)) for name in ("mon-a", "mon-b")]
    arms = _label_arms([load_run(d) for d in dirs])
    assert [a.label for a in arms] == ["mon-a/none", "mon-b/none"]
    assert Style(arms).of(arms[0]) != Style(arms).of(arms[1])


def test_report_of_a_glob_of_cascades_writes_each_its_own_page(two_cascades):
    res = runner.invoke(app, ["report", *map(str, two_cascades)])
    assert res.exit_code == 0, res.output
    for c, other in zip(two_cascades, reversed(two_cascades), strict=True):
        page = (c / "report.html").read_text()
        assert f"{c}/report.html" in res.output.replace("\n", "")
        assert other.name not in page  # its own arms only, not a merged page
    assert not (two_cascades[0].parent / "report.html").exists()
    assert "one page comparing them: andrea-diag report" in res.output  # and how to get one


def test_report_comparing_cascades_goes_to_out_never_over_a_runs_report(two_cascades, tmp_path):
    own = two_cascades[0] / "report.html"
    res = runner.invoke(app, ["report", *map(str, two_cascades), "--out", str(own)])
    assert res.exit_code != 0 and "is a run's own report" in res.output
    assert not own.exists()
    page = tmp_path / "compare.html"
    res = runner.invoke(app, ["report", *map(str, two_cascades), "--out", str(page)])
    assert res.exit_code == 0, res.output
    html = page.read_text()
    assert "cascade-tiny-a/none" in html and "cascade-tiny-b/none" in html
    assert not own.exists()


def test_report_help_says_where_each_page_goes():
    res = runner.invoke(app, ["report", "--help"], terminal_width=200)
    assert "inside it" in res.output and "compares" in res.output
