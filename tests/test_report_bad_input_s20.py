"""``report`` refuses, in one line and before writing anything, a run given twice (however it
is spelled), an empty path, and an ``--out`` inside a run it reads (over the run's own page or
its recorded files); an ``--out`` that is exactly the page ``report DIR`` writes is that page."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from hostile_dirs import (  # noqa: F401 (the *_fixture names are fixtures: run, cascade)
    cascade_fixture,
    cli,
    one_line_error,
    run_fixture,
)


def _digest(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` and its bytes' hash: what a refusal must leave as it was."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}  # fmt: skip


@pytest.mark.parametrize("with_out", [False, True])
@pytest.mark.parametrize("spelling", ["trailing slash", "dot dot", "link"])
def test_the_same_run_given_twice_however_spelled_is_one_line(
    tmp_path: Path, run: Path, spelling: str, with_out: bool
) -> None:
    if spelling == "link":
        again = tmp_path / "alias"
        again.symlink_to(run, target_is_directory=True)
    else:
        again = f"{run}/" if spelling == "trailing slash" else run.parent / ".." / "run" / run.name
    before = _digest(run)
    out = tmp_path / "compare.html"
    out_args = ["--out", str(out)] if with_out else []
    said = one_line_error("report", str(run), str(again), *out_args)
    assert "the same run directory was given twice" in said
    assert _digest(run) == before and not out.exists()


def test_a_cascade_and_one_of_its_arms_on_one_page_is_one_line(
    tmp_path: Path, cascade: Path
) -> None:
    out = tmp_path / "compare.html"
    said = one_line_error("report", str(cascade), str(cascade / "none"), "--out", str(out))
    assert "given twice" in said and not out.exists()


@pytest.mark.parametrize("args", [[""], ["RUN", ""], ["RUN", "--out", ""]])
def test_an_empty_path_is_one_line_not_the_current_folder(
    run: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    monkeypatch.chdir(run)  # "" read as "." would be this very run
    said = one_line_error("report", *[str(run) if a == "RUN" else a for a in args])
    assert "an empty path" in said
    assert not (run / "report.html").exists()


@pytest.mark.parametrize(
    ("given", "out", "says"),
    [
        (["cascade"], "cascade/none/metrics.parquet", "inside"),
        (["cascade"], "cascade/none/report.html", "own report"),
        (["cascade/none"], "cascade/none/compare.html", "inside"),
        (["cascade/none", "cascade/global"], "cascade/none/report.html", "own report"),
        (["cascade/none", "cascade/global"], "cascade/report.html", "own report"),
    ],
)
def test_an_out_inside_a_run_the_report_reads_is_refused_and_the_run_left_as_it_was(
    cascade: Path, given: list[str], out: str, says: str
) -> None:
    root = cascade.parent
    before = _digest(cascade)
    said = one_line_error("report", *[str(root / g) for g in given], "--out", str(root / out))
    assert says in said and "--out" in said
    assert _digest(cascade) == before


def test_an_out_inside_a_run_through_a_linked_folder_is_refused(tmp_path: Path, run: Path) -> None:
    (tmp_path / "via").symlink_to(run, target_is_directory=True)
    before = _digest(run)
    said = one_line_error("report", str(run), "--out", str(tmp_path / "via" / "metrics.parquet"))
    assert "inside" in said and _digest(run) == before


def test_an_out_that_is_the_cascades_own_page_renders_the_cascade_page(
    cascade: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``report C --out C/report.html`` writes what ``report C`` writes (the cascade's page),
    not a comparison of its arms over it."""
    import andrea_diag.report as report_pkg

    called: list[str] = []
    real_cascade, real_report = report_pkg.render_cascade, report_pkg.render_report

    def cascade_page(*args: object, **kwargs: object) -> Path:
        called.append("cascade")
        return real_cascade(*args, **kwargs)

    def comparison(*args: object, **kwargs: object) -> Path:
        called.append("comparison")
        return real_report(*args, **kwargs)

    monkeypatch.setattr(report_pkg, "render_cascade", cascade_page)
    monkeypatch.setattr(report_pkg, "render_report", comparison)
    code, said = cli("report", str(cascade), "--out", str(cascade / "report.html"))
    assert code == 0, said
    assert called == ["cascade"] and (cascade / "report.html").is_file()


def test_an_out_that_is_the_runs_own_page_still_writes_it(run: Path) -> None:
    code, said = cli("report", str(run), "--out", f"{run}/./report.html")
    assert code == 0, said
    assert (run / "report.html").is_file()


def test_an_out_given_with_a_sweep_is_one_line_not_silently_dropped(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "sweep.json").write_text("{}")
    out = tmp_path / "compare.html"
    said = one_line_error("report", str(sweep), "--out", str(out))
    assert "a sweep's pages are written inside it" in said
    assert not out.exists() and not (sweep / "sweep.html").exists()
