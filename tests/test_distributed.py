"""Data-parallel replicas on CPU (gloo, 2 processes): D=2·m=4 trains on exactly what D=1·m=8
does, replicas see disjoint sequences and the same clip norm, and rank 0 alone writes."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from andrea_diag.cli import app
from andrea_diag.config import MODEL_PRESETS, RunConfig
from andrea_diag.model import GPT
from andrea_diag.train.accumulation import IGNORE, accumulate_group
from andrea_diag.train.distributed import DistInfo, init_from_env, launch, replica_slice

D, M, STEPS = 2, 4, 3


# ---- what each rank runs (module level, so spawn can pickle it) ----
def _trainer_worker(out: str, data: object) -> None:
    """Train 3 updates as one of D replicas; record this rank's view to a test-only file."""
    from andrea_diag.data import BatchPlan, Mixer
    from andrea_diag.train.loop import Trainer

    cfg = RunConfig(size="tiny", steps=STEPS, clip="global", device="cpu", micro_batch=M,
                    replicas=D).resolve()  # fmt: skip
    plan = BatchPlan(data, Mixer(seed=0), seed=0, micro_batch=M * D, accum=cfg.accum,
                     seq_len=cfg.seq_len)  # fmt: skip
    info = init_from_env("cpu")
    run_dir = Path(out) / f"run-rank{info.rank}"
    trainer = Trainer(cfg, run_dir, data, plan)
    view = []
    for u in range(1, STEPS + 1):
        mine = replica_slice(plan.batch(u).tokens, info)  # (A, m, T+1): what this rank trains
        row = trainer.train_update(u)
        view.append({"seqs": [s.tolist() for s in mine.reshape(-1, mine.size(-1))],
                     "clip_norm": row["grad_norm"], "loss": row["loss"]})  # fmt: skip
    trainer.run()  # nothing left to train: closes (rank 0 writes summary.json)
    Path(out, f"view-rank{info.rank}.json").write_text(json.dumps(view))


def _padding_worker(out: str) -> None:
    """The global denominator with padding and unequal lengths: D=2 DDP vs one full batch."""
    from andrea_diag.train.distributed import DDPReducer

    info = init_from_env("cpu")
    torch.manual_seed(0)
    model = GPT(MODEL_PRESETS["tiny"])
    full = GPT(MODEL_PRESETS["tiny"])
    full.load_state_dict(model.state_dict())
    gen = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 8449, (2, M * D, 17), generator=gen)  # (A, m·D, T+1)
    targets = tokens[..., 1:].clone()
    for a in range(2):  # unequal supervised lengths: sequence i ignores its last 3·i targets
        for i in range(M * D):
            if i:
                targets[a, i, -3 * i :] = IGNORE
    mine = replica_slice(tokens, info)
    my_targets = replica_slice(torch.cat([tokens[..., :1], targets], -1), info)[..., 1:]
    red = DDPReducer(model, info, torch.device("cpu"))
    micro = [(mine[a, :, :-1], my_targets[a]) for a in range(2)]
    accumulate_group(
        red.module, micro,
        context=lambda i: red.microbatch(last=i == 1),
        backward=lambda loss: (loss * red.backward_factor()).backward(),
        denominator=lambda n: red.global_tokens(n, torch.device("cpu")),
    )  # fmt: skip
    accumulate_group(full, [(tokens[a, :, :-1], targets[a]) for a in range(2)])
    err = max(
        float((p.grad - q.grad).norm() / q.grad.norm().clamp(min=1e-30))
        for p, q in zip(model.parameters(), full.parameters(), strict=True)
    )
    Path(out, f"padding-rank{info.rank}.json").write_text(json.dumps({"max_rel_err": err}))


# ---- the parent ----
@pytest.fixture(scope="module")
def views(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[list[dict]]]:
    from andrea_diag.data import prepare_data

    out = tmp_path_factory.mktemp("ddp")
    launch(D, _trainer_worker, str(out), prepare_data({}, seed=0))
    return out, [json.loads((out / f"view-rank{r}.json").read_text()) for r in range(D)]


def test_replicas_train_disjoint_slices_that_together_are_the_full_batch(views) -> None:
    _, (r0, r1) = views
    for u in range(STEPS):
        a, b = r0[u]["seqs"], r1[u]["seqs"]
        assert len(a) == len(b) and not {tuple(s) for s in a} & {tuple(s) for s in b}


def test_every_replica_computes_the_same_clip_norm_and_loss(views) -> None:
    _, (r0, r1) = views
    assert [v["clip_norm"] for v in r0] == [v["clip_norm"] for v in r1]
    assert [v["loss"] for v in r0] == [v["loss"] for v in r1]


def test_rank_0_alone_writes(views) -> None:
    out, _ = views
    assert (out / "run-rank0" / "metrics.jsonl").exists()
    assert (out / "run-rank0" / "summary.json").exists()
    assert not (out / "run-rank1").exists()


def test_global_denominator_matches_the_full_batch_with_padding(tmp_path: Path) -> None:
    launch(D, _padding_worker, str(tmp_path))
    for r in range(D):
        assert json.loads((tmp_path / f"padding-rank{r}.json").read_text())["max_rel_err"] < 1e-6


def test_d2_m4_equals_d1_m8_through_the_cli(tmp_path: Path) -> None:
    base = ["train", "--clip", "global", "--steps", str(STEPS)]
    for name, extra in (("d1", ["-m", "8"]), ("d2", ["-m", "4", "--nproc", "2"])):
        res = CliRunner().invoke(app, [*base, *extra, "--out", str(tmp_path / name)])
        assert res.exit_code == 0, res.output
    one, two = (pd.read_json(tmp_path / n / "global" / "metrics.jsonl", lines=True)
                for n in ("d1", "d2"))  # fmt: skip
    assert one["batch_hash"].tolist() == two["batch_hash"].tolist()  # identical sequences
    assert one["tokens"].tolist() == two["tokens"].tolist()
    for col in ("loss", "grad_norm"):
        rel = ((one[col] - two[col]).abs() / one[col].abs()).max()
        assert rel < 1e-6, (col, rel)
    sheet = json.loads((tmp_path / "d2" / "global" / "summary.json").read_text())["run_sheet"]
    assert sheet["D"] == 2 and sheet["m"] == 4 and sheet["examples_per_update"] == 16


def test_replica_slice_refuses_a_batch_that_does_not_split() -> None:
    with pytest.raises(ValueError, match="do not split"):
        replica_slice(torch.zeros(2, 5, 9), DistInfo(rank=0, world_size=2))
