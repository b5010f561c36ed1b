"""``report --out`` never replaces a record: not inside the cascade or sweep holding an arm it
reads (``report C/none --out C/cascade.json`` overwrote the cascade's record), and never over an
existing file that is not an HTML page. The same folder is refused however the runs are given
(the cascade, or its arms one by one); a comparison page given again is replaced."""

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


@pytest.mark.parametrize("out", ["cascade.json", "compare.html"])
@pytest.mark.parametrize("given", [["cascade"], ["none"], ["none", "global"]])
def test_an_out_in_the_cascade_of_the_arms_read_is_refused_however_they_are_given(
    cascade: Path, given: list[str], out: str
) -> None:
    before = _digest(cascade)
    runs = [str(cascade if g == "cascade" else cascade / g) for g in given]
    said = one_line_error("report", *runs, "--out", str(cascade / out))
    assert "inside" in said and "--out" in said
    assert _digest(cascade) == before


def test_an_out_over_the_sweep_record_of_a_cell_read_is_refused(
    tmp_path: Path, cascade: Path
) -> None:
    sweep = make_sweep(tmp_path, cascade, "c1")
    before = _digest(sweep)
    said = one_line_error("report", str(sweep / "c0" / "none"), "--out", str(sweep / "sweep.json"))
    assert "inside" in said
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


def test_a_comparison_page_given_again_is_replaced(tmp_path: Path, cascade: Path) -> None:
    page = tmp_path / "compare.html"
    for _ in range(2):
        code, said = cli(
            "report", str(cascade / "none"), str(cascade / "global"), "--out", str(page)
        )
        assert code == 0, said
    assert "<html" in page.read_text().lower()
