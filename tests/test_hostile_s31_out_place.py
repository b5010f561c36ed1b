"""An output never lands among the records of a run, arm, cascade or sweep the command does not
own (round 31): ``report C/none --out C/global/x.html`` wrote the page into the sibling arm
``global``, through a link to it too, and made the folder of an arm not started yet;
``--out C2/x.html`` wrote into a cascade it does not read; ``export --out`` and ``--mlflow``
put event files and a store into a run they did not read. A page beside the runs read (in
their cascade or sweep folder) is still written.

python -m pytest -q tests/test_hostile_s31_out_place.py
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
from hostile_dirs import (  # noqa: F401 (the *_fixture names are fixtures: run, cascade)
    cascade_fixture,
    cli,
    one_line_error,
    run_fixture,
)


def _digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}  # fmt: skip


def test_a_report_out_inside_a_sibling_arm_is_refused_and_writes_nothing(cascade: Path) -> None:
    before = _digest(cascade)
    said = one_line_error(
        "report", str(cascade / "none"), "--out", str(cascade / "global" / "x.html")
    )
    assert "global" in said and "run" in said
    assert _digest(cascade) == before


def test_a_report_out_through_a_link_to_a_sibling_arm_is_refused(
    tmp_path: Path, cascade: Path
) -> None:
    link = tmp_path / "elsewhere"
    link.symlink_to(cascade / "global")
    before = _digest(cascade)
    said = one_line_error("report", str(cascade / "none"), "--out", str(link / "x.html"))
    assert str(cascade / "global") in said
    assert _digest(cascade) == before


def test_a_report_out_in_the_folder_of_an_arm_not_started_is_refused_unmade(
    cascade: Path,
) -> None:
    """``global`` is named by cascade.json but has no records yet: its folder is still its."""
    shutil.rmtree(cascade / "global")
    said = one_line_error(
        "report", str(cascade / "none"), "--out", str(cascade / "global" / "x.html")
    )
    assert "arm 'global'" in said
    assert not (cascade / "global").exists()


def test_a_report_out_in_a_cascade_not_read_is_refused(tmp_path: Path, cascade: Path) -> None:
    other = tmp_path / "other"
    shutil.copytree(cascade, other)
    before = _digest(other)
    said = one_line_error("report", str(cascade / "none"), "--out", str(other / "x.html"))
    assert "does not read" in said
    assert _digest(other) == before


def test_a_report_out_inside_a_run_not_read_is_refused(
    tmp_path: Path, cascade: Path, run: Path
) -> None:
    before = _digest(run)
    said = one_line_error("report", str(cascade), "--out", str(run / "pages" / "x.html"))
    assert "another run's folder" in said
    assert _digest(run) == before and not (run / "pages").exists()


def test_a_report_out_beside_the_arms_read_is_still_written(cascade: Path) -> None:
    code, said = cli("report", str(cascade / "none"), "--out", str(cascade / "pages" / "x.html"))
    assert code == 0, said
    assert "<html" in (cascade / "pages" / "x.html").read_text().lower()


def _tensorboard() -> None:
    from andrea_diag.tensorboard import writer_backend

    try:
        writer_backend()
    except Exception:
        pytest.skip("no TensorBoard writer installed")


@pytest.mark.parametrize("where", ["global", "global/tb"])
def test_an_export_out_inside_a_sibling_arm_is_refused(cascade: Path, where: str) -> None:
    _tensorboard()
    before = _digest(cascade)
    said = one_line_error(
        "export", "--tensorboard", str(cascade / "none"), "--out", str(cascade / where)
    )
    assert "another run's folder" in said
    assert _digest(cascade) == before and not (cascade / "global" / "tb").exists()


def test_an_export_out_in_a_cascade_not_read_is_refused(tmp_path: Path, cascade: Path) -> None:
    _tensorboard()
    other = tmp_path / "other"
    shutil.copytree(cascade, other)
    said = one_line_error(
        "export", "--tensorboard", str(cascade / "none"), "--out", str(other / "tb")
    )
    assert "does not read" in said
    assert not (other / "tb").exists()


def test_an_mlflow_store_inside_a_run_not_read_is_refused(cascade: Path) -> None:
    pytest.importorskip("mlflow")
    before = _digest(cascade)
    for store in (str(cascade / "global" / "ml"), f"sqlite:///{cascade}/global/ml.db"):
        said = one_line_error("export", "--mlflow", store, str(cascade / "none"))
        assert "another run's folder" in said
    assert _digest(cascade) == before and not (cascade / "global" / "ml").exists()


def test_folder_kind_names_a_run_a_cascade_and_a_plain_folder(cascade: Path) -> None:
    from andrea_diag.out_place import folder_kind

    assert folder_kind(cascade) == "cascade"
    assert folder_kind(cascade / "none") == "run"
    (cascade / "plain").mkdir()
    assert folder_kind(cascade / "plain") is None
