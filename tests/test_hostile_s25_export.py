"""``export`` and ``report`` of a damaged or oddly named run directory (round 25): a refusal
leaves nothing behind, says what the command was doing, and every line that echoes a path is
one line (``commands/export.py``, ``commands/report.py``).

- A W&B export refused (an update given twice, a damaged metrics table) left the empty --out
  it had made, with the parents it made for it (``--out a/b/c``: three empty folders), or an
  empty ``wandb`` folder inside the run's own parent by default. A folder the user had, and
  what another format wrote before the refusal, stay.
- A run dir holding data of an unexpected shape said "cannot render" from ``export``.
- A run folder named with a Unicode line or paragraph separator (U+2028, U+2029) printed the
  "report:" / "tensorboard:" line as two; a bidi override (U+202E) reordered it on screen.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hostile_dirs import (  # noqa: F401 (the *_fixture names are fixtures: run, cascade)
    cli,
    jsonl_metrics,
    one_line_error,
    run_fixture,
)


def _repeat_an_update(run: Path) -> None:
    rows = jsonl_metrics(run)
    rows.append(dict(rows[5], loss=99.0))  # W&B keeps one row per step: refused up front
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _break_the_table(run: Path) -> None:
    (run / "metrics.parquet").write_text("not parquet")


@pytest.mark.parametrize("damage", [_repeat_an_update, _break_the_table],
                         ids=["update-twice", "damaged-table"])  # fmt: skip
def test_a_refused_wandb_export_leaves_no_folder_it_made_and_keeps_the_users(
    run: Path, tmp_path: Path, damage
) -> None:
    pytest.importorskip("wandb")
    damage(run)
    one_line_error("export", "--wandb", str(run), "--out", str(tmp_path / "wb"))
    assert not (tmp_path / "wb").exists()  # was: an empty wb/
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("the user's")
    one_line_error("export", "--wandb", str(run), "--out", str(mine / "new" / "a" / "b"))
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]  # was: new/a/b, all empty
    one_line_error("export", "--wandb", str(run))  # default: <the run's parent>/wandb
    assert not (run.parent / "wandb").exists()  # was: an empty wandb/ beside the run


def test_what_tensorboard_wrote_before_wandb_refused_stays(run: Path, tmp_path: Path) -> None:
    pytest.importorskip("wandb")
    from andrea_diag.tensorboard import writer_backend

    try:
        writer_backend()
    except Exception:
        pytest.skip("no TensorBoard writer installed")
    _repeat_an_update(run)
    one_line_error("export", "--wandb", str(run), "--out", str(tmp_path / "only-wb"))
    assert not (tmp_path / "only-wb").exists()  # was: left, empty
    out = tmp_path / "both"
    one_line_error("export", "--tensorboard", "--wandb", str(run), "--out", str(out))
    assert list(out.rglob("events.out.tfevents.*"))  # the TensorBoard export is the user's now
    assert not (out / "wandb").exists()


def test_a_run_dir_of_an_unexpected_shape_says_export_not_render(
    run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What runread.py does not clean (every field it knows is) reaches the same guard."""
    from andrea_diag import tensorboard

    def surprised(*args: object, **kwargs: object) -> None:
        raise KeyError("a field no loader expected")

    monkeypatch.setattr(tensorboard, "writer_backend", lambda: None)
    monkeypatch.setattr(tensorboard, "export_tensorboard", surprised)
    line = one_line_error("export", "--tensorboard", str(run), "--out", str(tmp_path / "tb"))
    assert f"cannot export {run}: it holds data of an unexpected shape (KeyError)" in line, line
    assert "render" not in line  # was: cannot render


SEPARATORS = ["\u2028", "\u2029", "\u202e", "\u200b"]


@pytest.mark.parametrize("ch", SEPARATORS, ids=lambda c: f"U+{ord(c):04X}")
def test_report_echoes_a_run_folder_named_with_a_unicode_separator_on_one_line(
    tmp_path: Path, make_run, ch: str
) -> None:
    run = make_run(tmp_path / f"a{ch}b" / "none", clip="none", n_updates=12)
    code, said = cli("report", str(run), "--svg")
    assert code == 0, said
    shown = f"{tmp_path}/a\\u{ord(ch):04x}b/none"
    assert said.splitlines() == [f"report: {shown}/report.html",
                                 f"svg: {shown}/report-<chart>.svg"], said  # fmt: skip
    code, said = cli("report", str(run), "--out", str(tmp_path / f"c{ch}.html"))
    assert code == 0, said
    assert said.splitlines() == [f"report: {tmp_path}/c\\u{ord(ch):04x}.html"], said


@pytest.mark.parametrize("ch", SEPARATORS[:3], ids=lambda c: f"U+{ord(c):04X}")
def test_export_echoes_a_run_folder_named_with_a_unicode_separator_on_one_line(
    tmp_path: Path, make_run, ch: str
) -> None:
    from andrea_diag.tensorboard import writer_backend

    try:
        writer_backend()
    except Exception:
        pytest.skip("no TensorBoard writer installed")
    run = make_run(tmp_path / f"a{ch}b" / "none", clip="none", n_updates=12)
    code, said = cli("export", "--tensorboard", str(run), "--out", str(tmp_path / "tb"))
    assert code == 0, said
    lines = said.splitlines()
    assert len(lines) == 2 and ch not in said, said  # was: each line broken at the separator
    assert lines[0].startswith(f"tensorboard: {tmp_path}/a\\u{ord(ch):04x}b/none -> ")
