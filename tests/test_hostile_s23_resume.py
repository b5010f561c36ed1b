"""``cascade --resume`` of a hostile run directory (round 23):

- a kept (finished) arm's ``summary.json`` is the run's word: a field of the wrong type is
  dropped as the report drops it, and the closing lines never format it raw (before: the whole
  resume trained, then ended in an OverflowError or ValueError traceback, exit 1);
- a JSONL table planted as a 40 GiB sparse file is refused by its size, unread and unchanged,
  before anything is written (before: its tail was read backwards for a newline, 40 GiB of
  zeros, then the file was cut to 0 bytes).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from stopped_cascade import stopped  # the same stopped cascade
from typer.testing import CliRunner

from andrea_diag.cli import app

pytestmark = pytest.mark.slow  # each trains a tiny cascade's last updates


def _invoke(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, list(args))
    out = res.output + (repr(res.exception) if res.exit_code == 1 else "")
    return res.exit_code, out


@pytest.mark.parametrize(
    "fields",
    [{"final_loss": "8.1"}, {"max_grad_norm": 10**400}, {"pct_clipped": None},
     {"pct_clipped": [67]}, {"final_loss": {"a": 1}, "pct_skipped": "x"}],
    ids=["str", "past-float", "null", "list", "dict"],
)  # fmt: skip
def test_a_kept_arms_summary_of_the_wrong_types_never_ends_the_resume_in_a_traceback(
    finished_cascade: Path, tmp_path: Path, fields: dict
) -> None:
    out = stopped(finished_cascade, tmp_path)
    path = out / "global" / "summary.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))
    code, output = _invoke("cascade", "--resume", str(out))
    assert code == 0 and "Traceback" not in output, output
    assert "global: finished earlier, kept" in output
    assert (out / "report.html").is_file() and (out / "none" / "summary.json").is_file()


def test_a_kept_arm_with_a_bad_vocab_size_still_gets_its_page_at_resume(
    finished_cascade: Path, tmp_path: Path
) -> None:
    out = stopped(finished_cascade, tmp_path)
    path = out / "global" / "config.json"
    config = json.loads(path.read_text())
    config["model_config"]["vocab_size"] = [8449]
    path.write_text(json.dumps(config))
    code, output = _invoke("cascade", "--resume", str(out))
    assert code == 0 and "Traceback" not in output, output
    assert (out / "report.html").is_file()


@pytest.mark.parametrize("table", ["events.jsonl", "samples.jsonl", "metrics.jsonl"])
def test_a_huge_sparse_table_is_refused_by_size_at_resume_and_left_as_it_was(
    finished_cascade: Path, tmp_path: Path, table: str
) -> None:
    out = stopped(finished_cascade, tmp_path)
    path = out / "none" / table
    path.unlink()
    with open(path, "wb") as f:
        f.truncate(40 << 30)  # sparse: costs its maker nothing
    before = {p: p.stat().st_size for p in out.rglob("*") if p.is_file()}
    code, output = _invoke("cascade", "--resume", str(out))
    assert code == 2, output
    assert "Traceback" not in output and f"error: {table}" in output and "40.0 GiB" in output
    assert {p: p.stat().st_size for p in out.rglob("*") if p.is_file()} == before
    assert not os.path.exists(out / "none" / "summary.json")


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(
    "fields",
    [{"steps": -1}, {"eval_every": -3}, {"seq_len": 1048576},
     {"clip_params": {"zclip_alpha": 5}}, {"inject": ["outlier@999"]}],
    ids=["steps", "eval-every", "seq-len", "zclip-alpha", "inject"],
)  # fmt: skip
def test_a_value_out_of_range_in_a_saved_config_is_said_of_the_file_not_of_an_option(
    finished_cascade: Path, tmp_path: Path, fields: dict
) -> None:
    out = stopped(finished_cascade, tmp_path)
    path = out / "none" / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))
    before = _snapshot(out)
    code, output = _invoke("cascade", "--resume", str(out))
    assert code == 2 and "Traceback" not in output, output
    line = next(x for x in output.splitlines() if x.startswith("error:"))
    assert str(path) in line and "holds a value no run takes" in line, output
    assert _snapshot(out) == before
