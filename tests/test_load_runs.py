"""``load_runs``: several run directories (a cascade's arms, a monitor run) in one frame."""

from __future__ import annotations

import pytest
import torch
from monitor_helpers import monitored_update
from typer.testing import CliRunner

from andrea_diag.cli import app
from andrea_diag.monitor import SpikeMonitor
from andrea_diag.runs import load_runs


@pytest.mark.slow
def test_load_runs_puts_every_arm_of_every_run_in_one_frame(tmp_path):
    res = CliRunner().invoke(app, ["cascade", "--size", "tiny", "--steps", "3", "--device",
                                   "cpu", "--out", str(tmp_path / "c")])  # fmt: skip
    assert res.exit_code == 0, res.output
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with SpikeMonitor(model, opt, tmp_path / "mine", shadow=False) as mon:
        for _ in range(2):
            loss = model(torch.randn(4, 3)).square().mean()
            monitored_update(mon, opt, loss)
    df = load_runs([tmp_path / "c", tmp_path / "mine"])
    assert list(df.columns[:2]) == ["run", "arm"]
    counts = df.groupby(["run", "arm"])["update"].count().to_dict()
    assert counts == {("c", "none"): 3, ("c", "global"): 3, ("mine", "monitor"): 2}
    assert df.loc[df["run"] == "mine", "update"].tolist() == [1, 2]
