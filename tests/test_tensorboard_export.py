"""``export --tensorboard`` and ``SpikeMonitor(tensorboard_dir=...)``, read back with TensorBoard's
own event reader (``EventAccumulator``): every metric cell present, with its tag and step.

    python -m pytest -q tests/test_tensorboard_export.py

Needs tensorboardX (the writer) and tensorboard (the reader); both are in the ``test`` extra.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from typer.testing import CliRunner

from andrea_diag.cli import app
from andrea_diag.config import MODEL_PRESETS
from andrea_diag.model import GPT
from andrea_diag.monitor import SpikeMonitor
from andrea_diag.record import load_run
from andrea_diag.tensorboard import export_tensorboard, tensorboard_tag

REPO = Path(__file__).resolve().parents[1]
# a published H200 run: the columns the trainer really writes (probes, per-layer norms, lock-in)
GPU_RUN = REPO / "reports/gpu-sweep/12m-lr0.001-mn1-s0/none"
NAMESPACES = {"loss", "grad_norm", "clip", "optstate", "spikes"}
KNOWN = NAMESPACES | {"eval", "lockin", "data", "optim", "amp", "progress"}
# modules that, set to None in sys.modules, make the writer's imports fail
TENSORBOARDX = ("tensorboardX",)
BOTH_WRITERS = (*TENSORBOARDX, "tensorboard.compat.proto.summary_pb2")


def _read(folder: Path) -> tuple[dict[str, dict[int, float]], dict[str, str]]:
    """(scalars: tag -> {step: value}, texts: tag -> text) through TensorBoard's own reader."""
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    tags = acc.Tags()
    scalars = {t: {e.step: e.value for e in acc.Scalars(t)} for t in tags["scalars"]}
    texts = {
        t.removesuffix("/text_summary"): acc.Tensors(t)[-1].tensor_proto.string_val[0].decode()
        for t in tags["tensors"]
    }
    return scalars, texts


def _expected_cells(metrics: pd.DataFrame) -> dict[str, dict[int, float]]:
    """Every numeric, non-empty cell of a metrics table, keyed as the export should tag it."""
    want: dict[str, dict[int, float]] = {}
    for col in metrics.columns:
        if col in ("update", "unix_time_s") or not (  # the step and the wall time: no tag
            pd.api.types.is_numeric_dtype(metrics[col]) or pd.api.types.is_bool_dtype(metrics[col])
        ):
            continue
        for step, v in zip(metrics["update"], metrics[col], strict=True):
            if pd.notna(v):
                want.setdefault(tensorboard_tag(col), {})[int(step)] = float(v)
    return want


@pytest.fixture(params=["tensorboardX", "torch.utils.tensorboard"])
def writer(request, monkeypatch) -> str:
    """Both writers the export can use: tensorboardX, and torch's when tensorboardX is absent."""
    if request.param != "tensorboardX":
        for mod in TENSORBOARDX:
            monkeypatch.setitem(sys.modules, mod, None)
    return request.param


def test_export_writes_every_metric_cell_with_its_tag_and_step(writer, make_run, tmp_path):
    run = make_run(tmp_path / "c" / "none", n_updates=60, spikes=(23, 41))
    metrics = load_run(run)["metrics"]
    metrics.loc[5, "grad_norm"] = math.inf  # a non-finite norm is a measurement: kept as inf
    metrics.to_parquet(run / "metrics.parquet", index=False)

    [(src, folder)] = export_tensorboard([run], tmp_path / "tb")
    assert (src, folder) == (run, tmp_path / "tb" / "none")
    scalars, texts = _read(folder)

    want = _expected_cells(metrics)
    assert len(want) > 30  # the synthetic run has probe and per-layer columns
    for tag, cells in want.items():
        assert tag in scalars, tag
        assert scalars[tag].keys() == cells.keys(), tag  # every step, nothing extra
        got, exp = np.array([scalars[tag][s] for s in cells]), np.array(list(cells.values()))
        np.testing.assert_allclose(got, exp.astype(np.float32), rtol=1e-6, err_msg=tag)
    assert scalars["grad_norm/total"][6] == math.inf
    # lr is numeric but not a namespace the issue names: it still goes in, under optim/
    assert scalars["optim/lr"][60] == pytest.approx(3e-4)
    # spike events: z and value at the spike's update; config and summary as text
    assert set(scalars["spikes/event_z/grad_norm"]) == {23, 41}
    assert "| 23 | grad_norm |" in texts["spikes/events"]
    assert json.loads(texts["run/summary"].replace("\n    ", "\n"))["n_updates"] == 60
    assert json.loads(texts["run/config"].replace("\n    ", "\n"))["clip"] == "none"


def test_every_column_the_trainer_writes_lands_in_a_named_namespace():
    columns = list(pd.read_parquet(GPU_RUN / "metrics.parquet").columns)
    # columns of features that run did not use: fp16, held-out evaluation
    columns += ["loss_scale", "eval_loss", "eval_loss_gutenberg"]
    tags = {c: tensorboard_tag(c) for c in columns if c not in ("update", "batch_hash", "injected")}
    stray = {c: t for c, t in tags.items() if t.split("/")[0] not in KNOWN}
    assert not stray
    assert {t.split("/")[0] for t in tags.values()} >= NAMESPACES
    assert len(set(tags.values())) == len(tags)  # no two columns share a tag
    assert tags["grad_norm"] == "grad_norm/total" and tags["loss_z"] == "spikes/loss_z"
    assert tags["loss_gutenberg"] == "loss/source/gutenberg"
    assert tags["eval_loss_gutenberg"] == "eval/loss/gutenberg"
    assert tags["layer_v/h00.mlp"] == "optstate/v/h00.mlp"


def test_unknown_columns_keep_a_slash_name_or_go_under_misc():
    assert tensorboard_tag("myprobe/score") == "myprobe/score"
    assert tensorboard_tag("weird") == "misc/weird"


def test_cascade_and_sweep_dirs_export_one_folder_per_arm(make_run, tmp_path):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "sweep.json").write_text(json.dumps({"cells": ["a", "b"]}))
    for cell in ("a", "b"):
        for arm in ("none", "global"):
            make_run(sweep / cell / arm, clip=arm, n_updates=12)
        (sweep / cell / "cascade.json").write_text(json.dumps({"arms": ["none", "global"]}))
    out = tmp_path / "tb"
    written = export_tensorboard([sweep], out)
    folders = sorted(f.relative_to(out).as_posix() for _, f in written)
    assert folders == ["sweep/a/global", "sweep/a/none", "sweep/b/global", "sweep/b/none"]
    # two cascades' arms share the name "none": each keeps its cell folder
    written = export_tensorboard([sweep / "a" / "none", sweep / "b" / "none"], tmp_path / "tb2")
    assert sorted(f.relative_to(tmp_path / "tb2").as_posix() for _, f in written) == [
        "a/none",
        "b/none",
    ]
    scalars, _ = _read(out / "sweep/b/global")
    assert sorted(scalars["loss/train"]) == list(range(1, 13))


def _monitored_loop(run_dir: Path, tb_dir: Path | None, n: int = 6) -> SpikeMonitor:
    torch.manual_seed(0)
    model = GPT(MODEL_PRESETS["tiny"])
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with SpikeMonitor(
        model, opt, run_dir, tensorboard_dir=tb_dir, spike_window=4, moment_norms_every=1
    ) as mon:  # every update's m_norm
        for _ in range(n):
            x = torch.randint(0, 8449, (2, 17))  # (B, T+1) token ids
            per_ex = F.cross_entropy(
                model(x[:, :-1]).transpose(1, 2), x[:, 1:], reduction="none"
            ).mean(1)
            per_ex.mean().backward()
            mon.after_backward(per_ex.mean(), per_example_loss=per_ex)
            mon.after_clip(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
            opt.step()
            mon.after_step()
            opt.zero_grad()
    return mon


def test_spike_monitor_writes_live_what_the_export_writes(tmp_path):
    mon = _monitored_loop(tmp_path / "run", tmp_path / "live")
    live_scalars, live_texts = _read(tmp_path / "live")
    export_tensorboard([mon.run_dir], tmp_path / "export")
    exp_scalars, exp_texts = _read(tmp_path / "export" / "run")
    assert live_scalars == exp_scalars
    assert live_texts == exp_texts
    assert sorted(live_scalars["loss/train"]) == list(range(1, 7))
    assert "optstate/m_norm" in live_scalars and "grad_norm/h00.attention" in live_scalars


def test_spike_monitor_without_a_writer_fails_before_making_the_run_dir(tmp_path, monkeypatch):
    from andrea_diag.errors import UserError

    for mod in BOTH_WRITERS:
        monkeypatch.setitem(sys.modules, mod, None)
    with pytest.raises(UserError, match="tensorboardX"):
        _monitored_loop(tmp_path / "run", tmp_path / "live", n=1)
    assert not (tmp_path / "run").exists()


# ---- the CLI: bad input is one line and a non-zero exit ----

runner = CliRunner()


def _cli(*args: str):
    res = runner.invoke(app, ["export", *args])
    assert "Traceback" not in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)
    return res


def test_cli_exports_a_cascade_and_says_where(make_run, tmp_path):
    casc = tmp_path / "casc"
    make_run(casc / "none", n_updates=10)
    make_run(casc / "global", clip="global", n_updates=10)
    (casc / "cascade.json").write_text(json.dumps({"arms": ["none", "global"]}))
    res = _cli("--tensorboard", str(casc))
    assert res.exit_code == 0, res.output
    default_out = tmp_path / "tensorboard"  # next to the runs
    for arm in ("none", "global"):
        assert sorted(_read(default_out / "casc" / arm)[0]["loss/train"]) == list(range(1, 11))
    assert "tensorboard --logdir" in res.output


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("missing", "does not exist"),
        ("not_a_run", "is not a run, cascade or sweep directory"),
        ("no_format", "choose an export format"),
        ("no_rows", "no metric rows"),
        ("already", "already holds TensorBoard event files"),
        ("no_writer", "pip install tensorboardX"),
        ("out_is_file", "is a file"),
    ],
)
def test_cli_bad_input_is_one_clear_line_and_nonzero_exit(
    setup, message, make_run, tmp_path, monkeypatch
):
    run = make_run(tmp_path / "runs" / "none", n_updates=12)
    out = tmp_path / "tb"
    args = ["--tensorboard", str(run), "--out", str(out)]
    if setup == "missing":
        args[1] = str(tmp_path / "no" / "such" / "run")
    elif setup == "not_a_run":
        args[1] = str(tmp_path)
    elif setup == "no_format":
        args = args[1:]
    elif setup == "no_rows":
        (run / "metrics.parquet").unlink()
        (run / "metrics.jsonl").write_text("")
    elif setup == "already":
        assert _cli(*args).exit_code == 0
    elif setup == "out_is_file":
        out.write_text("not a folder")
    elif setup == "no_writer":
        for mod in BOTH_WRITERS:
            monkeypatch.setitem(sys.modules, mod, None)
    res = _cli(*args)
    assert res.exit_code != 0
    assert message in res.output
    assert len([ln for ln in res.output.splitlines() if ln.startswith("error:")]) == 1
    if setup != "already":
        assert not any(out.rglob("events.out.tfevents.*"))  # nothing half-written


def _events(folder: Path, tag: str) -> dict[int, tuple[float, float]]:
    """step -> (value, wall_time) of one scalar tag, through TensorBoard's own reader."""
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    return {e.step: (e.value, e.wall_time) for e in acc.Scalars(tag)}


def test_a_diverged_runs_nonfinite_rows_are_exported_as_nan_and_inf(make_run, tmp_path):
    run = make_run(tmp_path / "c" / "none", n_updates=20, spikes=(5,))
    metrics = load_run(run)["metrics"]
    end = metrics["update"] >= 18  # the run diverged at update 18
    metrics.loc[end, ["loss", "grad_norm_post"]] = math.nan
    metrics.loc[end, "grad_norm"] = math.inf
    metrics.loc[end, "nonfinite"] = True
    metrics.loc[metrics["update"] == 20, "grad_norm"] = math.nan
    metrics.to_parquet(run / "metrics.parquet", index=False)

    [(_, folder)] = export_tensorboard([run], tmp_path / "tb")
    loss = _events(folder, "loss/train")
    assert sorted(loss) == list(range(1, 21))  # the diverged end is there
    assert all(math.isnan(loss[u][0]) for u in (18, 19, 20))
    assert math.isfinite(loss[17][0])
    grad = _events(folder, "grad_norm/total")
    assert grad[18][0] == math.inf and math.isnan(grad[20][0])
    assert math.isnan(_events(folder, "clip/grad_norm_post")[19][0])
    # an empty per-source cell of a finite row is still not written
    empty = metrics[metrics["loss_gutenberg"].isna() & ~end]["update"]
    if len(empty):
        assert int(empty.iloc[0]) not in _events(folder, "loss/train_gutenberg")


def test_export_wall_time_is_each_rows_own_time_not_the_export_time(make_run, tmp_path):
    run = make_run(tmp_path / "c" / "none", n_updates=10)
    metrics = load_run(run)["metrics"]
    assert "unix_time_s" in metrics  # the recorder stamps every row
    stamps = 1_700_000_000.0 + 60.0 * metrics["update"]  # a run of 2026-11... one a minute
    metrics.assign(unix_time_s=stamps).to_parquet(run / "metrics.parquet", index=False)
    [(_, folder)] = export_tensorboard([run], tmp_path / "tb")
    got = {u: wall for u, (_, wall) in _events(folder, "loss/train").items()}
    assert got == pytest.approx(dict(zip(metrics["update"], stamps, strict=True)))
    assert "misc/unix_time_s" not in _read(folder)[0]  # the time is no scalar of its own


def test_a_run_without_row_times_takes_its_start_plus_the_update_durations(make_run, tmp_path):
    run = make_run(tmp_path / "c" / "none", n_updates=5, spikes=(3,))
    metrics = load_run(run)["metrics"].drop(columns=["unix_time_s"])
    metrics.to_parquet(run / "metrics.parquet", index=False)
    env = json.loads((run / "env.json").read_text())
    env["started"] = "2026-01-02T03:04:05+00:00"
    (run / "env.json").write_text(json.dumps(env))
    [(_, folder)] = export_tensorboard([run], tmp_path / "tb")
    start = 1767323045.0  # 2026-01-02T03:04:05Z
    want = start + metrics["time_s"].cumsum()  # time_s = 0.01 u in the synthetic run
    got = _events(folder, "loss/train")
    assert [got[u][1] for u in range(1, 6)] == pytest.approx(want.tolist())


def test_the_live_writer_keeps_a_nonfinite_updates_nan_tensor_loss(tmp_path):
    from andrea_diag.tensorboard import TensorBoardRun

    tb = TensorBoardRun(tmp_path / "live")
    nan = torch.tensor(float("nan"))  # live rows may hold 0-dim tensors until the flush
    tb.log({"update": 1, "loss": torch.tensor(2.0), "grad_norm": 1.0, "nonfinite": False})
    tb.log({"update": 2, "loss": nan, "grad_norm": math.inf, "nonfinite": torch.tensor(True)})
    tb.close()
    loss = _events(tmp_path / "live", "loss/train")
    assert loss[1][0] == 2.0 and math.isnan(loss[2][0])
