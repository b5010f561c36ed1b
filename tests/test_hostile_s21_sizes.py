"""Huge files planted in a run directory (round 21): a sparse file costs its maker nothing and
its reader everything, so a table larger than any run writes is refused before it is read.
``report`` of a sweep whose ``sweep.csv`` was a sparse 40 GB file held 23 GB of memory for
minutes in ``read_csv``; a parquet table is refused before it is decoded past the same cap.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hostile_dirs import (  # noqa: F401 (the *_fixture names are fixtures: run, cascade)
    N,
    cascade_fixture,
    make_sweep,
    one_line_error,
    run_fixture,
)

from andrea_diag import parquet_read, runread
from andrea_diag.errors import UserError
from andrea_diag.report.sweep_dir import read_sweep_table


def sparse(path: Path, size: int) -> None:
    """``path`` replaced by a file of ``size`` zero bytes that takes no disk space."""
    path.unlink(missing_ok=True)
    with open(path, "wb") as f:
        f.truncate(size)


def never_read(*args: object, **kwargs: object) -> None:
    raise AssertionError("a file larger than any run writes was read")


def test_a_huge_sweep_csv_is_one_line_and_never_read(
    tmp_path: Path, cascade: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sweep = make_sweep(tmp_path, cascade, "c1")
    sparse(sweep / "sweep.csv", 40 << 30)
    monkeypatch.setattr(pd, "read_csv", never_read)
    with pytest.raises(UserError, match=r"40\.0 GiB.*\(64 MiB\)"):
        read_sweep_table(sweep)
    assert "(64 MiB)" in one_line_error("report", str(sweep))


def test_the_ladders_reader_of_a_huge_sweep_csv_is_one_line_and_never_reads_it(
    tmp_path: Path, cascade: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ladder`` reads the sweep's table through its own reader (read_sweep_outputs): the same
    cap as the sweep page's."""
    from andrea_diag.experiments.ladder import read_sweep_outputs

    sweep = make_sweep(tmp_path, cascade, "c1")
    sparse(sweep / "sweep.csv", 40 << 30)
    monkeypatch.setattr(pd, "read_csv", never_read)
    with pytest.raises(UserError, match=r"40\.0 GiB.*\(64 MiB\)"):
        read_sweep_outputs(sweep)


def test_a_parquet_that_decodes_past_the_cap_is_one_line_and_never_decoded(
    run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A constant column compresses to nothing: 3 MB of parquet held 22 GB of memory when
    read. The cap is lowered here to the run's own table, so no bomb is built."""
    monkeypatch.setattr(parquet_read, "MAX_TABLE_CELLS", 10)
    monkeypatch.setattr(pd, "read_parquet", never_read)
    with pytest.raises(UserError, match="decodes to more than this reader takes"):
        runread.read_parquet(run / "metrics.parquet")
    assert "decodes to more than" in one_line_error("report", str(run))


def test_a_parquet_under_the_caps_is_read_as_before(run: Path) -> None:
    assert len(runread.read_parquet(run / "metrics.parquet")) == N


def _dictionary_bomb(path: Path, rows: int, text: pa.Array) -> None:
    """``rows`` rows of one 100 kB string, written as parquet writes text: the string once,
    in a dictionary, and an index per row (written from a DictionaryArray, never decoded)."""
    one = pa.DictionaryArray.from_arrays(pa.array([0] * rows, pa.int32()), text)
    listed = pa.ListArray.from_arrays(pa.array(range(rows + 1), pa.int32()), one)
    pq.write_table(pa.table({"update": range(rows), "kind": one, "causes": listed}), path)


def test_a_text_column_that_decodes_past_the_cap_is_one_line_and_never_decoded(
    run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 100 kB string in 30,000 rows is a few hundred kB of parquet, and 6 GB once read: the
    footer counts the dictionary only, so it passed the footer's check and was decoded."""
    path = run / "metrics.parquet"
    _dictionary_bomb(path, 30_000, pa.array(["x" * 100_000]))
    assert path.stat().st_size < 2 << 20
    monkeypatch.setattr(pd, "read_parquet", never_read)
    with pytest.raises(UserError, match="bytes of text"):
        runread.read_parquet(path)
    assert "decodes to more than" in one_line_error("report", str(run))


def test_text_under_the_cap_reads_as_pandas_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "events.parquet"
    _dictionary_bomb(path, 50, pa.array(["spike"]))
    pd.testing.assert_frame_equal(runread.read_parquet(path), pd.read_parquet(path))


def test_a_text_column_with_a_dot_in_its_name_is_read_and_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check took "data.src" for a field "src" of a column "data": a table with such a
    column (SpikeMonitor.add_columns(**{"data.src": ...})) was refused as unreadable, and a
    bomb in "a.b" beside a column "a" was measured as "a" and decoded."""
    fine = tmp_path / "fine.parquet"
    pq.write_table(pa.table({"update": [1, 2], "data.src": ["wiki", "code"]}), fine)
    assert runread.read_parquet(fine)["data.src"].tolist() == ["wiki", "code"]
    bomb = tmp_path / "bomb.parquet"
    rows = 30_000
    one = pa.DictionaryArray.from_arrays(pa.array([0] * rows, pa.int32()), pa.array(["x" * 10**5]))
    pq.write_table(pa.table({"a": range(rows), "a.b": one}), bomb)
    monkeypatch.setattr(pd, "read_parquet", never_read)
    with pytest.raises(UserError, match="bytes of text"):
        runread.read_parquet(bomb)
