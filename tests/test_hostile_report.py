"""`report` and `export` on run directories someone else made (issue 18): nothing in them runs,
nothing outside them is read or written, and every page write is atomic and inside the run.

The runs are synthetic (conftest's ``make_run``, through the real Recorder) and then edited the
way an attacker would (tests/hostile_dirs.py). Damaged files: test_report_damaged.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
from hostile_dirs import (  # noqa: F401 (the *_fixture names are fixtures: run, cascade)
    ATTR,
    HOSTILE,
    JS,
    XSS,
    N,
    assert_safe,
    cascade_fixture,
    cli,
    edit,
    figure_strings,
    jsonl_metrics,
    make_sweep,
    one_line_error,
    run_fixture,
)

from andrea_diag.errors import UserError
from andrea_diag.report import render_cascade, render_report
from andrea_diag.report.safe import esc, href, json_safe, script_json
from andrea_diag.report.sweep_page import render_sweep

# ---- the one escaping place ----


@pytest.mark.parametrize("value", [*HOSTILE, 1.5, None, True, float("nan")])
def test_esc_formats_then_escapes_any_type(value: object) -> None:
    out = esc(value)
    assert "<" not in out and ">" not in out and '"' not in out
    assert "javascript:" not in out and "onerror=" not in out


def test_esc_format_spec_that_does_not_fit_shows_the_value() -> None:
    assert esc(0.123456, ".3g") == "0.123" and esc("16", ".3g") == "16"
    assert esc([1, 2], ".1f") == "[1, 2]"


@pytest.mark.parametrize("name", ["../victim", "/abs", "..", "", "a/b"])
def test_href_refuses_names_that_are_not_one_component(name: str) -> None:
    with pytest.raises(UserError):
        href(name, "report.html")


def test_href_of_a_javascript_name_is_a_relative_link() -> None:
    link = href(JS, "report.html")
    assert link.startswith("./") and "javascript:" not in link


def test_embedded_json_cannot_end_its_script_element() -> None:
    text = script_json({"arms": ["</script><script>alert(1)</script>", ATTR, JS]})
    assert "<" not in text and ">" not in text and "javascript:" not in text
    assert json.loads(text)["arms"][1] == ATTR  # the same value, only escaped
    assert "onerror=" not in json_safe(json.dumps(ATTR))


# ---- hostile values in the files a page shows ----


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_summary_fields_render_escaped(run: Path, value: object) -> None:
    edit(run / "summary.json", lockin__verdict=value, max_grad_norm=value, final_loss=value,
          spikes__n_spikes=value, pollution__max_v_share=value)  # fmt: skip
    page = render_report([run], run / "report.html").read_text()
    assert_safe(page)


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_config_data_env_fields_render_escaped(run: Path, value: object) -> None:
    edit(run / "config.json", recipe=value, lr=value, steps=value, size=value, arm=value,
          effective_batch__m=value, model_config__n_params=value, clip=value)  # fmt: skip
    edit(run / "data.json", **{"sources__repo-docs__n_bytes": value,
          "sources__repo-docs__origin": value, "sources__repo-docs__sha256": value})  # fmt: skip
    edit(run / "env.json", gpu=value, torch=value, git_commit=value)
    page = render_report([run], run / "report.html").read_text()
    assert_safe(page)


def test_hostile_table_values_render_escaped(run: Path) -> None:
    with open(run / "events.jsonl", "a") as f:
        f.write(json.dumps({"update": 3, "metric": "grad_norm", "value": 9.0, "cause": ATTR,
                            "causes": [XSS]}) + "\n")  # fmt: skip
    with open(run / "samples.jsonl", "a") as f:
        f.write(json.dumps({"update": N, "source": XSS, "mode": ATTR, "text": JS}) + "\n")
    (run / "metrics.parquet").unlink()  # the JSONL is read, with the hostile cells
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    rows[4].update({"loss": XSS, "injected": ATTR, "grad_norm": [1, 2]})
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    page = render_report([run], run / "report.html").read_text()
    assert_safe(page)


def test_hostile_arm_and_title_in_cascade_json(cascade: Path) -> None:
    edit(cascade / "cascade.json", size=XSS, command=ATTR + JS, status=XSS)
    assert_safe(render_cascade(cascade).read_text())


def test_hostile_sweep_json_and_cell_names_render_escaped(tmp_path: Path, cascade: Path) -> None:
    sweep = make_sweep(tmp_path, cascade, JS)
    code, out = cli("report", str(sweep))
    assert code == 0, out
    page = (sweep / "sweep.html").read_text()
    assert_safe(page)
    assert "href='./javascript%3Aalert%281%29/report.html'" in page


def test_sweep_page_rendered_live_escapes_its_meta(tmp_path: Path) -> None:
    """render_sweep from the sweep itself (not re-read) escapes the same fields."""
    table = pd.DataFrame([{"cell": JS, "size": "tiny", "lr": 1e-3, "max_norm": 1.0, "seed": 0,
                           "clip": c, "final_loss": 3.0, "min_loss": 2.5, "n_spikes": 1.0,
                           "max_grad_norm": 2.0, "lockin": "healthy"}
                          for c in ("none", "global")])  # fmt: skip
    meta = {"sizes": [XSS], "lrs": [1e-3], "seeds": [ATTR], "steps": XSS, "recipe": XSS,
            "command": JS, "throughput": {"updates_per_s": 1.0, "updates": XSS, "wall_s": 1.0,
                                          "executor": ATTR, "jobs": JS}}  # fmt: skip
    assert_safe(render_sweep(tmp_path, table, meta).read_text())


HOSTILE_BUSY = [
    "96",
    [[96, XSS]],
    XSS * 4000 + ATTR,  # a huge string with HTML in it
    {"pct_mean": XSS, "n_samples": ATTR, "devices": XSS},
    {"pct_mean": 10**400, "n_samples": 10**400, "devices": {"0": {"pct_mean": -1}}},
    {"pct_mean": 96, "n_samples": [XSS], "devices": {ATTR: {"pct_mean": 50}, JS: XSS, "1": [1]}},
]


@pytest.mark.parametrize("busy", HOSTILE_BUSY, ids=["str", "nested-list", "huge", "bad-fields",
                                                     "past-float", "bad-devices"])  # fmt: skip
def test_hostile_gpu_busy_renders_escaped_or_not_at_all(
    tmp_path: Path, cascade: Path, busy: object
) -> None:
    sweep = make_sweep(tmp_path, cascade, "c1")
    edit(sweep / "sweep.json", throughput__gpu_busy=busy)
    code, out = cli("report", str(sweep))  # re-read: sweep.json's schema (runread.SWEEP)
    assert code == 0 and "Traceback" not in out, out
    page = (sweep / "sweep.html").read_text()
    assert_safe(page)
    assert "updates/s aggregate" in page  # the line is there; the damaged field is not in it
    shown = busy is HOSTILE_BUSY[-1]  # the one with a percentage where it belongs
    assert ("a kernel ran on the GPU 96% of the time (NVML" in page) == shown
    if shown:  # a GPU named by a hostile key: escaped; entries that are not numbers: left out
        gpu = "&quot;&gt;&lt;img src=x onerror&#61;alert(1)&gt;"
        assert f"(NVML; by GPU (NVML index): {gpu} 50%)" in page
    # rendered live from the sweep's own meta (not re-read through the schema): the same
    meta = json.loads((sweep / "sweep.json").read_text())
    live = tmp_path / "live"
    live.mkdir()
    assert_safe(render_sweep(live, pd.read_csv(sweep / "sweep.csv"), meta).read_text())


# ---- names from a run dir stay inside it ----


def test_cascade_arm_outside_the_cascade_is_refused_and_not_read(
    tmp_path: Path, cascade: Path, make_run: Callable[..., Path]
) -> None:
    outside = make_run(tmp_path / "outside" / "none", clip="none", n_updates=N)
    rel = os.path.relpath(outside, cascade)
    edit(cascade / "cascade.json", arms=["none", rel])
    before = {p: p.stat().st_atime_ns for p in outside.iterdir()}
    out = one_line_error("report", str(cascade))
    assert "arm" in out and "plain name" in out
    assert not (outside / "report.html").exists()
    assert {p: p.stat().st_atime_ns for p in outside.iterdir()} == before
    one_line_error("export", "--tensorboard", str(cascade), "--out", str(tmp_path / "tb"))


def test_cascade_arm_linked_outside_is_refused(
    tmp_path: Path, cascade: Path, make_run: Callable[..., Path]
) -> None:
    outside = make_run(tmp_path / "outside" / "x", clip="none", n_updates=N)
    (cascade / "evil").symlink_to(outside)
    edit(cascade / "cascade.json", arms=["none", "evil"])
    assert "outside" in one_line_error("report", str(cascade))


def test_sweep_cell_outside_the_sweep_is_refused_and_nothing_written(
    tmp_path: Path, cascade: Path
) -> None:
    sweep = make_sweep(tmp_path, cascade, "../victim")
    victim = tmp_path / "victim"
    shutil.copytree(cascade, victim)
    before = sorted(p.name for p in victim.iterdir())
    one_line_error("report", str(sweep))
    assert sorted(p.name for p in victim.iterdir()) == before
    assert not (sweep / "sweep.html").exists() and not (sweep / "c0" / "report.html").exists()


# ---- writes: atomic, inside the run ----


def test_symlinked_report_html_is_replaced_not_written_through(tmp_path: Path, run: Path) -> None:
    outside = tmp_path / "precious.txt"
    outside.write_text("keep me")
    (run / "report.html").symlink_to(outside)
    code, out = cli("report", str(run))
    assert code == 0, out
    assert outside.read_text() == "keep me"
    assert (run / "report.html").is_file() and not (run / "report.html").is_symlink()


@pytest.mark.parametrize("linked", ["cascade", "cascade/none"])
def test_export_never_writes_event_files_through_a_folder_linked_out_of_its_out(
    tmp_path: Path, cascade: Path, linked: str
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    tb = tmp_path / "tb"
    (tb / linked).parent.mkdir(parents=True, exist_ok=True)
    (tb / linked).symlink_to(outside, target_is_directory=True)
    out = one_line_error("export", "--tensorboard", str(cascade), "--out", str(tb))
    assert "points outside" in out and "--out" in out
    assert list(outside.iterdir()) == [] and not list(tb.rglob("events.out.tfevents.*"))


def test_export_default_out_refuses_a_tensorboard_link_planted_beside_the_runs(
    tmp_path_factory: pytest.TempPathFactory, cascade: Path
) -> None:
    outside = tmp_path_factory.mktemp("outside")  # not under the runs' parent
    (cascade.parent / "tensorboard").symlink_to(outside, target_is_directory=True)
    out = one_line_error("export", "--tensorboard", str(cascade))
    assert "default --out" in out and "points outside" in out
    assert list(outside.iterdir()) == []


def test_export_writes_no_event_file_when_a_later_run_folder_cannot_be_made(
    tmp_path: Path, cascade: Path
) -> None:
    tb = tmp_path / "tb"
    (tb / "cascade").mkdir(parents=True)
    (tb / "cascade" / "global").write_text("a file where the second arm's folder goes")
    out = one_line_error("export", "--tensorboard", str(cascade), "--out", str(tb))
    assert "is a file" in out
    assert not list(tb.rglob("events.out.tfevents.*"))


def test_export_wandb_refuses_a_wandb_folder_linked_out_of_its_out(
    tmp_path: Path, cascade: Path
) -> None:
    pytest.importorskip("wandb")
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "wb").mkdir()
    (tmp_path / "wb" / "wandb").symlink_to(outside, target_is_directory=True)
    out = one_line_error("export", "--wandb", str(cascade), "--out", str(tmp_path / "wb"))
    assert "'wandb' points outside" in out and list(outside.iterdir()) == []


def test_report_of_one_run_dir_writes_inside_it(run: Path) -> None:
    assert cli("report", str(run))[0] == 0
    assert (run / "report.html").is_file() and not (run.parent / "report.html").exists()


def test_report_to_dev_full_is_one_line() -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    out = one_line_error("report", "/dev/null", "--out", "/dev/full")
    assert Path("/dev/full").exists()
    del out


def test_report_out_dev_full_of_a_real_run_is_one_line(run: Path) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    one_line_error("report", str(run), "--out", "/dev/full")
    assert Path("/dev/full").is_char_device()


def test_full_disk_leaves_no_partial_report(run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import andrea_diag.rundir as rundir

    real = rundir.os.fsync

    def full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(rundir.os, "fsync", full)
    out = one_line_error("report", str(run))
    monkeypatch.setattr(rundir.os, "fsync", real)
    assert "no space left" in out
    assert not (run / "report.html").exists()
    assert not [p for p in run.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_run_dir_says_it_cannot_write(tmp_path: Path, run: Path) -> None:
    run.chmod(0o555)
    try:
        out = one_line_error("report", str(run))
        assert "cannot write" in out and "--out" in out
        assert cli("report", str(run), "--out", str(tmp_path / "r.html"))[0] == 0
    finally:
        run.chmod(0o755)


def test_unwritable_run_dir_says_it_cannot_write_and_names_out(
    tmp_path: Path, run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The read-only case as root sees it too: the temp file cannot be created in the run."""
    import andrea_diag.rundir as rundir

    real = rundir.tempfile.mkstemp

    def refuse(*args: object, dir: str | Path | None = None, **kw: object) -> tuple[int, str]:
        if Path(str(dir)) == run:
            raise PermissionError(13, "Permission denied")
        return real(*args, dir=dir, **kw)

    monkeypatch.setattr(rundir.tempfile, "mkstemp", refuse)
    out = one_line_error("report", str(run))
    assert "cannot write" in out and "--out" in out
    assert cli("report", str(run), "--out", str(tmp_path / "r.html"))[0] == 0
    assert (tmp_path / "r.html").is_file()


@pytest.mark.browser
def test_hard_link_at_an_image_path_is_replaced_not_written_through(tmp_path: Path, run: Path):
    if not (os.environ.get("BROWSER_PATH") or shutil.which("chromium")):  # as test_report_images
        pytest.skip("chromium not installed (apt-get install -y chromium)")
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    image = run / "report-training-loss.svg"
    os.link(victim, image)
    code, out = cli("report", "--svg", str(run))
    assert code == 0, out
    assert victim.read_text() == "keep me" and victim.stat().st_nlink == 1
    assert image.stat().st_ino != victim.stat().st_ino
    assert image.read_text().lstrip().startswith("<svg")


# ---- names from a run dir in the charts: plotly draws their text as its own pseudo-HTML ----

ARM_LINK = '<a href="https://evil.example/arm">Arm</a>'
COLUMN_LINK = '<a href="https://evil.example/phish">Click</a>'


def test_run_names_in_charts_are_drawn_as_text_not_links(run: Path) -> None:
    edit(run / "config.json", arm=ARM_LINK)  # the arm's label: legend entries
    rows = jsonl_metrics(run)  # a per-layer column: the heatmap's row labels
    (run / "metrics.jsonl").write_text("".join(
        json.dumps({**r, "layer_gn/embed": 1.0, f"layer_gn/{COLUMN_LINK}": 2.0}) + "\n"
        for r in rows))  # fmt: skip
    strings = figure_strings(render_report([run], run / "report.html").read_text())
    assert not [s for s in strings if re.search(r"(?i)<\s*a\b|<[^>]*href", s)]
    for link in (ARM_LINK, COLUMN_LINK):  # still there, as text plotly shows literally
        assert link.replace("<", "&lt;").replace(">", "&gt;") in strings
    assert any("%{x}<br>%{y}<br>" in s for s in strings)  # the toolkit's own markup kept


def test_control_characters_from_a_run_name_are_shown_escaped_in_the_error(run: Path) -> None:
    arm = run.rename(run.parent / "none\x1b]0;PWNED\x07\x1b[2K")
    (arm / "summary.json").unlink()
    os.mkfifo(arm / "summary.json")
    out = one_line_error("report", str(arm))
    assert "\x1b" not in out and "\x07" not in out
    assert len([ln for ln in out.splitlines() if ln.startswith("error:")]) == 1
    assert "none\\x1b]0;PWNED\\x07\\x1b[2K" in out
