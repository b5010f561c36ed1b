"""`report` and `export` on run directories someone else made (issue 18): nothing in them runs,
nothing outside them is read or written, and a damaged file is one line, never a traceback.

The runs are synthetic (conftest's ``make_run``, through the real Recorder) and then edited the
way an attacker or a broken disk would. A page is "safe" when, outside plotly.js itself, it has
no ``<script`` but the page's own elements, no ``onerror=`` and no ``javascript:`` at all.
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
from plotly.offline import get_plotlyjs
from typer.testing import CliRunner

from andrea_diag.cli import app
from andrea_diag.errors import UserError
from andrea_diag.report import render_cascade, render_report
from andrea_diag.report.safe import esc, href, json_safe, script_json
from andrea_diag.report.sweep_page import render_sweep

XSS = "<script>alert(1)</script>"
ATTR = '"><img src=x onerror=alert(1)>'
JS = "javascript:alert(1)"
HOSTILE = [XSS, ATTR, JS, [XSS], {"x": ATTR}]
N = 30


def _own_scripts(page: str) -> int:
    """<script elements the page itself writes: meta, plotly.js, one per figure."""
    return len(re.findall(r"<script type=['\"](?:text/javascript|application/json)['\"]", page))


def assert_safe(page: str) -> None:
    rest = page.replace(get_plotlyjs(), "")
    assert rest.lower().count("<script") == _own_scripts(rest)
    assert "onerror=" not in rest.lower()
    assert "javascript:" not in rest.lower()
    assert "<img" not in rest.lower()


def _cli(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, list(args))
    out = res.output + (repr(res.exception) if res.exception and res.exit_code == 1 else "")
    return res.exit_code, out


def _one_line_error(*args: str) -> str:
    code, out = _cli(*args)
    assert code != 0, out
    assert "Traceback" not in out and "error:" in out, out
    return out


def _edit(path: Path, **fields: object) -> None:
    data = json.loads(path.read_text())
    for dotted, value in fields.items():
        *head, last = dotted.split("__")
        d = data
        for k in head:
            d = d.setdefault(k, {})
        d[last] = value
    path.write_text(json.dumps(data))


@pytest.fixture
def run(tmp_path: Path, make_run: Callable[..., Path]) -> Path:
    return make_run(tmp_path / "run" / "none", clip="none", n_updates=N)


@pytest.fixture
def cascade(tmp_path: Path, make_run: Callable[..., Path]) -> Path:
    c = tmp_path / "cascade"
    for arm in ("none", "global"):
        make_run(c / arm, clip=arm, n_updates=N)
    (c / "cascade.json").write_text(
        json.dumps({"arms": ["none", "global"], "status": "done", "size": "tiny", "seed": 0})
    )
    return c


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
    _edit(run / "summary.json", lockin__verdict=value, max_grad_norm=value, final_loss=value,
          spikes__n_spikes=value, pollution__max_v_share=value)  # fmt: skip
    page = render_report([run], run / "report.html").read_text()
    assert_safe(page)


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_config_data_env_fields_render_escaped(run: Path, value: object) -> None:
    _edit(run / "config.json", recipe=value, lr=value, steps=value, size=value, arm=value,
          effective_batch__m=value, model_config__n_params=value, clip=value)  # fmt: skip
    _edit(run / "data.json", **{"sources__repo-docs__n_bytes": value,
          "sources__repo-docs__origin": value, "sources__repo-docs__sha256": value})  # fmt: skip
    _edit(run / "env.json", gpu=value, torch=value, git_commit=value)
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
    _edit(cascade / "cascade.json", size=XSS, command=ATTR + JS, status=XSS)
    assert_safe(render_cascade(cascade).read_text())


def _sweep(tmp_path: Path, cascade: Path, cell: str) -> Path:
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    shutil.copytree(cascade, sweep / "c0")
    rows = [{"cell": c, "size": "tiny", "lr": lr, "max_norm": 1.0, "seed": 0,
             "precision": "fp32", "clip": arm, "final_loss": 3.0, "min_loss": 2.5,
             "n_spikes": 1, "max_grad_norm": 2.0, "lockin": XSS, "status": "done"}
            for c, lr in (("c0", 1e-3), (cell, 1e-2)) for arm in ("none", "global")]  # fmt: skip
    pd.DataFrame(rows).to_csv(sweep / "sweep.csv", index=False)
    meta = {"sizes": ["tiny", XSS], "lrs": [1e-3, XSS], "seeds": [0, ATTR], "steps": XSS,
            "recipe": [ATTR], "command": JS, "clips": ["none", "global"],
            "throughput": {"updates_per_s": 2.0, "updates": ATTR, "wall_s": XSS,
                           "executor": JS, "jobs": XSS}}  # fmt: skip
    (sweep / "sweep.json").write_text(json.dumps(meta))
    return sweep


def test_hostile_sweep_json_and_cell_names_render_escaped(tmp_path: Path, cascade: Path) -> None:
    sweep = _sweep(tmp_path, cascade, JS)
    code, out = _cli("report", str(sweep))
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


# ---- names from a run dir stay inside it ----


def test_cascade_arm_outside_the_cascade_is_refused_and_not_read(
    tmp_path: Path, cascade: Path, make_run: Callable[..., Path]
) -> None:
    outside = make_run(tmp_path / "outside" / "none", clip="none", n_updates=N)
    rel = os.path.relpath(outside, cascade)
    _edit(cascade / "cascade.json", arms=["none", rel])
    before = {p: p.stat().st_atime_ns for p in outside.iterdir()}
    out = _one_line_error("report", str(cascade))
    assert "arm" in out and "plain name" in out
    assert not (outside / "report.html").exists()
    assert {p: p.stat().st_atime_ns for p in outside.iterdir()} == before
    _one_line_error("export", "--tensorboard", str(cascade), "--out", str(tmp_path / "tb"))


def test_cascade_arm_linked_outside_is_refused(
    tmp_path: Path, cascade: Path, make_run: Callable[..., Path]
) -> None:
    outside = make_run(tmp_path / "outside" / "x", clip="none", n_updates=N)
    (cascade / "evil").symlink_to(outside)
    _edit(cascade / "cascade.json", arms=["none", "evil"])
    assert "outside" in _one_line_error("report", str(cascade))


def test_sweep_cell_outside_the_sweep_is_refused_and_nothing_written(
    tmp_path: Path, cascade: Path
) -> None:
    sweep = _sweep(tmp_path, cascade, "../victim")
    victim = tmp_path / "victim"
    shutil.copytree(cascade, victim)
    before = sorted(p.name for p in victim.iterdir())
    _one_line_error("report", str(sweep))
    assert sorted(p.name for p in victim.iterdir()) == before
    assert not (sweep / "sweep.html").exists() and not (sweep / "c0" / "report.html").exists()


# ---- writes: atomic, inside the run ----


def test_symlinked_report_html_is_replaced_not_written_through(tmp_path: Path, run: Path) -> None:
    outside = tmp_path / "precious.txt"
    outside.write_text("keep me")
    (run / "report.html").symlink_to(outside)
    code, out = _cli("report", str(run))
    assert code == 0, out
    assert outside.read_text() == "keep me"
    assert (run / "report.html").is_file() and not (run / "report.html").is_symlink()


def test_report_of_one_run_dir_writes_inside_it(run: Path) -> None:
    assert _cli("report", str(run))[0] == 0
    assert (run / "report.html").is_file() and not (run.parent / "report.html").exists()


def test_report_to_dev_full_is_one_line() -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    out = _one_line_error("report", "/dev/null", "--out", "/dev/full")
    assert Path("/dev/full").exists()
    del out


def test_report_out_dev_full_of_a_real_run_is_one_line(run: Path) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    _one_line_error("report", str(run), "--out", "/dev/full")
    assert Path("/dev/full").is_char_device()


def test_full_disk_leaves_no_partial_report(run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import andrea_diag.rundir as rundir

    real = rundir.os.fsync

    def full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(rundir.os, "fsync", full)
    out = _one_line_error("report", str(run))
    monkeypatch.setattr(rundir.os, "fsync", real)
    assert "no space left" in out
    assert not (run / "report.html").exists()
    assert not [p for p in run.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_run_dir_says_it_cannot_write(tmp_path: Path, run: Path) -> None:
    run.chmod(0o555)
    try:
        out = _one_line_error("report", str(run))
        assert "cannot write" in out and "--out" in out
        assert _cli("report", str(run), "--out", str(tmp_path / "r.html"))[0] == 0
    finally:
        run.chmod(0o755)


# ---- damaged and odd files: one line, never a traceback ----


def _truncate(p: Path) -> None:
    p.write_text(p.read_text()[: len(p.read_text()) // 2])


DAMAGE: dict[str, Callable[[Path], None]] = {
    "truncated summary.json": lambda r: _truncate(r / "summary.json"),
    "config.json a list": lambda r: (r / "config.json").write_text("[1, 2]"),
    "config.json not utf-8": lambda r: (r / "config.json").write_bytes(b"\xff\xfe{"),
    "corrupt metrics.parquet": lambda r: (r / "metrics.parquet").write_bytes(b"PAR1 garbage"),
    "empty metrics.parquet": lambda r: (r / "metrics.parquet").write_bytes(b""),
    "metrics.parquet a folder": lambda r: (
        (r / "metrics.parquet").unlink(),
        (r / "metrics.parquet").mkdir(),
    ),
    "summary.json a FIFO": lambda r: (
        (r / "summary.json").unlink(),
        os.mkfifo(r / "summary.json"),
    ),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damaged_file_is_one_line_for_report_and_export(
    tmp_path: Path, run: Path, damage: str
) -> None:
    DAMAGE[damage](run)
    _one_line_error("report", str(run))
    _one_line_error("export", "--tensorboard", str(run), "--out", str(tmp_path / "tb"))


def _jsonl_metrics(run: Path) -> list[dict]:
    (run / "metrics.parquet").unlink()
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


def test_metrics_row_with_null_update_is_one_line(tmp_path: Path, run: Path) -> None:
    rows = _jsonl_metrics(run)
    rows[3]["update"] = None
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert "update" in _one_line_error("report", str(run))
    _one_line_error("export", "--tensorboard", str(run), "--out", str(tmp_path / "tb"))


def test_fifo_metrics_jsonl_does_not_hang(tmp_path: Path, run: Path) -> None:
    _jsonl_metrics(run)
    (run / "metrics.jsonl").unlink()
    os.mkfifo(run / "metrics.jsonl")
    assert "not a regular file" in _one_line_error("report", str(run))
    _one_line_error("export", "--tensorboard", str(run), "--out", str(tmp_path / "tb"))


@pytest.mark.parametrize("value", ["16", [16], {"n": 16}, True, 1.5, -3, None])
def test_wrong_types_in_config_and_summary_render_as_dash(run: Path, value: object) -> None:
    _edit(run / "config.json", steps=value, lr=value, seed=value, max_norm=value,
          probes__boundary_k=value)  # fmt: skip
    _edit(run / "summary.json", final_loss=value, pct_clipped=value, spikes=value,
          pollution__recovery_v=value, nonfinite_updates=value, probe_failures=value)  # fmt: skip
    code, out = _cli("report", str(run))
    assert code == 0 and "Traceback" not in out, out


def test_wrong_cell_types_in_metrics_are_gaps(tmp_path: Path, run: Path) -> None:
    rows = _jsonl_metrics(run)
    rows[2].update({"loss": "x", "grad_norm": {"a": 1}, "boundary": "yes", "clip_coef": [1]})
    rows[5].update({"update": "6"})
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert _cli("report", str(run))[0] == 0
    assert _cli("export", "--tensorboard", str(run), "--out", str(tmp_path / "tb"))[0] == 0


@pytest.mark.parametrize(
    "text", ["{", "[1]", '{"arms": "none"}', '{"arms": [1]}', '{"arms": []}', '{"arms": null}']
)
def test_corrupt_cascade_json_is_one_line(cascade: Path, text: str) -> None:
    (cascade / "cascade.json").write_text(text)
    _one_line_error("report", str(cascade))


@pytest.mark.parametrize("text", ["{", "[]", '"x"'])
def test_corrupt_sweep_json_is_one_line(tmp_path: Path, cascade: Path, text: str) -> None:
    sweep = _sweep(tmp_path, cascade, "c1")
    (sweep / "sweep.json").write_text(text)
    _one_line_error("report", str(sweep))


def test_corrupt_sweep_csv_and_cell_cascade_json_are_one_line(
    tmp_path: Path, cascade: Path
) -> None:
    sweep = _sweep(tmp_path, cascade, "c1")
    (sweep / "c0" / "cascade.json").write_text('{"arms": ')
    _one_line_error("report", str(sweep))
    (sweep / "sweep.csv").write_bytes(b"\xff\xfe\x00garbage\n\x00")
    _one_line_error("report", str(sweep))


def test_path_component_longer_than_255_is_one_line(tmp_path: Path) -> None:
    long = str(tmp_path / ("x" * 300))
    assert "255" in _one_line_error("report", long)
    assert "255" in _one_line_error("export", "--tensorboard", long)
    assert "255" in _one_line_error("report", str(tmp_path), "--out", long)


def test_probe_failure_at_close_without_update_is_kept(run: Path) -> None:
    """Events rows without an update are dropped, except a probe failure at close."""
    from andrea_diag.record import load_run

    with open(run / "events.jsonl", "a") as f:
        f.write(json.dumps({"update": None, "kind": "probe_failure", "probe": "lockin",
                            "hook": "close", "error": "ValueError: x"}) + "\n")  # fmt: skip
        f.write(json.dumps({"update": None, "metric": "grad_norm", "value": 1.0}) + "\n")
    loaded = load_run(run)
    assert [f["probe"] for f in loaded["probe_failures"]] == ["lockin"]
    assert "update" not in loaded["probe_failures"][0]
    assert loaded["events"]["update"].notna().all()


def test_deeply_nested_json_is_one_line(run: Path) -> None:
    (run / "summary.json").write_text("[" * 100_000 + "]" * 100_000)
    assert "nested" in _one_line_error("report", str(run))


@pytest.mark.parametrize("update", [1e400, 10**30, -(2**60), 2.5, "x"])
def test_metrics_update_out_of_range_is_one_line(run: Path, update: object) -> None:
    rows = _jsonl_metrics(run)
    rows[3]["update"] = update
    text = "".join(json.dumps(r) + "\n" for r in rows).replace("Infinity", "1e400")
    (run / "metrics.jsonl").write_text(text)
    assert "update" in _one_line_error("report", str(run))


def test_events_with_odd_causes_render(run: Path) -> None:
    with open(run / "events.jsonl", "a") as f:
        for causes in ([{"a": 1}], "boundary", [[1, 2], None], 7):
            f.write(json.dumps({"update": 5, "metric": "grad_norm", "value": 2.0,
                                "cause": causes, "causes": causes}) + "\n")  # fmt: skip
    code, out = _cli("report", str(run))
    assert code == 0, out
    assert_safe((run / "report.html").read_text())


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
    out = _one_line_error("report", str(run))
    assert "cannot write" in out and "--out" in out
    assert _cli("report", str(run), "--out", str(tmp_path / "r.html"))[0] == 0
    assert (tmp_path / "r.html").is_file()
