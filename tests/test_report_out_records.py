"""``report --out`` never replaces a record: not a file that is not an HTML page (``report
C/none --out C/cascade.json`` overwrote the cascade's record), not a cascade's or sweep's own
page, never inside an arm it reads. A new page beside a cascade's or sweep's records is
written, however the runs are given (the cascade, or its arms one by one), and a comparison
page given again is replaced."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from hostile_dirs import (  # noqa: F401 (the *_fixture names are fixtures: run, cascade)
    cascade_fixture,
    cli,
    make_sweep,
    one_line_error,
    run_fixture,
)


def _digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}  # fmt: skip


@pytest.mark.parametrize("given", [["cascade"], ["none"], ["none", "global"]])
def test_an_out_over_the_cascades_record_is_refused_however_its_arms_are_given(
    cascade: Path, given: list[str]
) -> None:
    before = _digest(cascade)
    runs = [str(cascade if g == "cascade" else cascade / g) for g in given]
    said = one_line_error("report", *runs, "--out", str(cascade / "cascade.json"))
    assert "is not an HTML page" in said and "--out" in said
    assert _digest(cascade) == before


@pytest.mark.parametrize("given", [["cascade"], ["none"], ["none", "global"]])
def test_a_new_page_in_the_cascade_folder_is_written_however_its_arms_are_given(
    cascade: Path, given: list[str]
) -> None:
    """Beside the cascade's records (not inside an arm) a comparison page is fine, as the
    published reports/gpu-sweep/README.md command writes one into its sweep folder."""
    before = _digest(cascade)
    runs = [str(cascade if g == "cascade" else cascade / g) for g in given]
    code, said = cli("report", *runs, "--out", str(cascade / "compare.html"))
    assert code == 0, said
    after = _digest(cascade)
    assert after.pop("compare.html") and after == before


def test_a_comparison_page_in_a_sweep_folder_is_written_but_not_over_its_page(
    tmp_path: Path, cascade: Path
) -> None:
    sweep = make_sweep(tmp_path, cascade, "c1")
    arms = [str(sweep / "c0" / a) for a in ("none", "global")]
    code, said = cli("report", *arms, "--out", str(sweep / "capacity.html"))
    assert code == 0, said
    (sweep / "sweep.html").write_text("<!doctype html><p>the sweep's own page</p>")
    said = one_line_error("report", *arms, "--out", str(sweep / "sweep.html"))
    assert "own report" in said
    assert "own page" in (sweep / "sweep.html").read_text()


def test_an_out_over_the_sweep_record_of_a_cell_read_is_refused(
    tmp_path: Path, cascade: Path
) -> None:
    sweep = make_sweep(tmp_path, cascade, "c1")
    before = _digest(sweep)
    said = one_line_error("report", str(sweep / "c0" / "none"), "--out", str(sweep / "sweep.json"))
    assert "is not an HTML page" in said
    assert _digest(sweep) == before


@pytest.mark.parametrize("name", ["data.parquet", "notes.txt", "README"])
def test_an_out_over_an_existing_file_that_is_not_a_page_is_refused(
    tmp_path: Path, run: Path, name: str
) -> None:
    keep = tmp_path / name
    keep.write_text("the user's own file")
    said = one_line_error("report", str(run), "--out", str(keep))
    assert "is not an HTML page" in said
    assert keep.read_text() == "the user's own file"


@pytest.mark.parametrize("name", ["compare.html", "compare", "page.HTM"])
def test_a_comparison_page_given_again_is_replaced(
    tmp_path: Path, cascade: Path, name: str
) -> None:
    """Any name the page was first written to, an extension or none: what is there is a page."""
    page = tmp_path / name
    for _ in range(2):
        code, said = cli(
            "report", str(cascade / "none"), str(cascade / "global"), "--out", str(page)
        )
        assert code == 0, said
    assert "<html" in page.read_text().lower()
