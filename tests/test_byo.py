"""Bring your own model and data: ``cascade --model test_byo:... --data test_byo:...``.

The model and data factories are defined here, in this test module only (pytest puts tests/ on
sys.path, so ``test_byo:make_model`` imports them by spec, as a user's own module would be).
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from typer.testing import CliRunner

from andrea_diag.cli import app
from andrea_diag.config import ModelConfig
from andrea_diag.errors import UserError
from andrea_diag.record import load_run

STEPS = 4  # few updates: each arm still takes one lock-in sample per update
SEEN: list[ModelConfig] = []  # what make_model was called with


class PairModel(torch.nn.Module):
    """A model that is not the toolkit's GPT: each position sees its token and the previous one."""

    def __init__(self, vocab_size: int, d: int) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(vocab_size, d)
        self.mix = torch.nn.Linear(2 * d, d)
        self.head = torch.nn.Linear(d, vocab_size)
        # It sees two tokens, and says so: the lock-in probe then decodes on a 2-token context
        # (probes/lockin.py reads ``config.block_size``) instead of re-running the whole text.
        self.config = SimpleNamespace(block_size=2, vocab_size=vocab_size)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        # .view() as nanoGPT does: the trainer must hand over contiguous ids, not a slice
        x = self.emb(ids.view(-1)).view(*ids.shape, -1)  # (B, T, d)
        prev = torch.nn.functional.pad(x, (0, 0, 1, 0))[:, :-1]  # (B, T, d), causal shift
        return self.head(torch.tanh(self.mix(torch.cat([x, prev], dim=-1))))  # (B, T, V)


def make_model(config: ModelConfig) -> torch.nn.Module:
    SEEN.append(config)
    return PairModel(config.vocab_size, config.d_model // 2)


SYLLABLES = {
    "repo-docs": "ar be ci do eu fa gi ho in ja ke lo mu ne ox pi qu ra se tu",
    "gutenberg": "th an er on ed in to it is he ha ou wa hi st nd re ve se at",
    "hermes3-general": "yo wh ca pl ea ty ng ow ly ri me no us ad co di pr ex so ma",
}


def make_data() -> dict[str, list[str]]:
    """Three seeded sources of made-up words, ~200 KB each: enough distinct byte pairs for the
    toolkit's 8449-token BPE (a second to train)."""
    out = {}
    for name, text in SYLLABLES.items():
        syl = text.split()
        rng = random.Random(name)

        def word(rng: random.Random = rng, syl: list[str] = syl) -> str:
            return "".join(rng.choice(syl) for _ in range(rng.randint(1, 4)))

        out[name] = [
            " ".join(word() for _ in range(rng.randint(40, 120))) + "." for _ in range(400)
        ]
    return out


def broken_factory(config: ModelConfig) -> torch.nn.Module:
    raise RuntimeError("no weights for you")


def not_a_module(config: ModelConfig) -> str:
    return "a string"


def wrong_vocab(config: ModelConfig) -> torch.nn.Module:
    return PairModel(100, 8)


class _Output:
    def __init__(self, logits: torch.Tensor) -> None:
        self.logits = logits


class HFStyle(PairModel):
    def forward(self, ids: torch.Tensor) -> _Output:  # type: ignore[override]
        return _Output(super().forward(ids))


def hf_style(config: ModelConfig) -> torch.nn.Module:
    return HFStyle(config.vocab_size, 8)


def data_not_mapping() -> list[str]:
    return ["just", "documents"]


def data_unknown_source() -> dict[str, list[str]]:
    return {"wikipedia": ["text"]}


BASE = ["--size", "tiny", "--steps", str(STEPS), "--micro-batch", "4", "--seq-len", "32"]


@pytest.fixture(scope="module")
def byo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("byo") / "c"
    args = ["cascade", *BASE, "--model", "test_byo:make_model", "--data", "test_byo:make_data"]
    res = CliRunner().invoke(app, [*args, "--out", str(out)])
    assert res.exit_code == 0, res.output
    return out


def test_user_model_and_data_get_identical_batches_and_initial_weights(byo_dir: Path) -> None:
    meta = json.loads((byo_dir / "cascade.json").read_text())
    assert meta["batch_hashes_identical"] is True
    hashes = [
        json.loads((byo_dir / arm / "schedule.json").read_text())["batch_hashes"]
        for arm in ("none", "global")
    ]
    assert len(hashes[0]) == STEPS and hashes[0] == hashes[1]
    none, glob = (load_run(byo_dir / arm)["metrics"] for arm in ("none", "global"))
    # same weights on the same first batch: the same loss and pre-clip gradient, bit for bit
    assert none["loss"].iloc[0] == glob["loss"].iloc[0]
    assert none["grad_norm"].iloc[0] == glob["grad_norm"].iloc[0]
    assert (byo_dir / "report.html").is_file()


def test_factory_receives_the_size_preset_and_the_run_trains_it(byo_dir: Path) -> None:
    assert SEEN and SEEN[-1].name == "tiny" and SEEN[-1].vocab_size == 8449
    config = json.loads((byo_dir / "none" / "config.json").read_text())
    n_params = sum(p.numel() for p in make_model(SEEN[-1]).parameters())
    assert config["model_config"]["n_params"] == n_params  # the real model, not the GPT preset
    assert config["model_factory"] == "test_byo:make_model"
    assert config["data_factory"] == "test_byo:make_data"


def test_run_sheet_records_where_model_and_data_came_from(byo_dir: Path) -> None:
    sheet = json.loads((byo_dir / "global" / "summary.json").read_text())["run_sheet"]
    assert sheet["model"]["source"] == "factory"
    assert sheet["model"]["spec"] == "test_byo:make_model"
    assert sheet["model"]["module_file"] == str(Path(__file__).resolve())
    assert sheet["model"]["class"].endswith("PairModel")
    assert sheet["data"]["factory"]["spec"] == "test_byo:make_data"
    assert set(sheet["data"]["sources"].values()) == {
        "data factory: test_byo:make_data (test_byo.py)"
    }
    data = json.loads((byo_dir / "global" / "data.json").read_text())
    assert all(s["origin"].startswith("data factory") for s in data["sources"].values())


@pytest.mark.parametrize(
    ("option", "spec", "message"),
    [
        ("--model", "test_byo", "is not an import spec"),
        ("--model", "no_such_module_anywhere:make", "cannot import 'no_such_module_anywhere'"),
        ("--model", "test_byo:missing", "has no attribute 'missing'"),
        ("--model", "test_byo:STEPS", "is a int, not a callable"),
        ("--model", "test_byo:broken_factory", "the factory raised RuntimeError: no weights"),
        ("--model", "test_byo:not_a_module", "returned a str, not a torch.nn.Module"),
        ("--model", "test_byo:wrong_vocab", "expected float logits (2, 8, 8449)"),
        ("--model", "test_byo:hf_style", "not a logits tensor (return its .logits)"),
        ("--data", "test_byo:data_not_mapping", "returned list, not a non-empty mapping"),
        ("--data", "test_byo:data_unknown_source", "unknown source 'wikipedia'"),
        ("--data", "test_byo:broken_factory", "the factory raised TypeError"),
    ],
)
def test_a_bad_factory_is_one_clear_error(
    option: str, spec: str, message: str, tmp_path: Path
) -> None:
    out = tmp_path / "never"
    res = CliRunner().invoke(app, ["train", *BASE, option, spec, "--out", str(out)])
    assert res.exit_code == 2, res.output
    assert "error:" in res.output and message in res.output
    assert "Traceback" not in res.output
    assert not out.exists()  # refused before any output exists


def test_model_and_hf_config_together_are_refused(tmp_path: Path) -> None:
    args = ["train", *BASE, "--model", "test_byo:make_model", "--hf-config", "x.json"]
    res = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "--model and --hf-config both name the model" in res.output


def _tiny_hf_config(path: Path, **extra: object) -> Path:
    config = {"model_type": "gpt2", "vocab_size": 50257, "n_positions": 64, "n_embd": 32}
    path.write_text(json.dumps({**config, "n_layer": 2, "n_head": 2, **extra}))
    return path


def test_hf_config_trains_with_the_toolkit_vocabulary(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    cfg = _tiny_hf_config(tmp_path / "config.json")
    args = ["train", *BASE, "--steps", "2", "--hf-config", str(cfg), "--data", "test_byo:make_data"]
    res = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "run")])
    assert res.exit_code == 0, res.output
    arm = tmp_path / "run" / "global"
    sheet = json.loads((arm / "summary.json").read_text())["run_sheet"]["model"]
    assert sheet["source"] == "hf-config" and sheet["architecture"] == "GPT2LMHeadModel"
    assert sheet["vocab_size_in_config"] == 50257 and sheet["vocab_size"] == 8449
    metrics = load_run(arm)["metrics"]
    assert len(metrics) == 2 and metrics["loss"].notna().all()
    assert "layer_gn/h01.attention" in metrics.columns  # GPT-2's names group like ours


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ({"vocab_size": 10}, "has no 'model_type'"),
        ({"model_type": "no-such-architecture"}, "no-such-architecture"),
        ({"model_type": "gpt2", "n_positions": 16}, "exceeds the 16 positions"),
    ],
)
def test_a_bad_hf_config_is_one_clear_error(content: dict, message: str, tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(content))
    res = CliRunner().invoke(app, ["train", *BASE, "--hf-config", str(path)])
    assert res.exit_code == 2, res.output
    assert message in res.output and "Traceback" not in res.output


def test_hf_config_without_transformers_says_which_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers -> ImportError
    cfg = _tiny_hf_config(tmp_path / "config.json")
    res = CliRunner().invoke(app, ["train", *BASE, "--hf-config", str(cfg)])
    assert res.exit_code == 2
    assert "needs the transformers package" in res.output and "andrea-diag[hf]" in res.output


def _slurm_check(**base: object) -> None:
    """``sweep --executor slurm``'s pre-flight on this (login) host, over one cell."""
    from andrea_diag.config import RunConfig
    from andrea_diag.experiments.executor import ExecutorConfig
    from andrea_diag.experiments.sweep import SweepSpec, cells, check_cells_runnable

    spec = SweepSpec(base=RunConfig(**base), lrs=[1e-3], executor=ExecutorConfig(kind="slurm"))
    check_cells_runnable(spec, cells(spec))


def test_a_slurm_sweep_imports_the_model_factory_but_never_calls_it_on_the_login_node() -> None:
    _slurm_check(model_factory="test_byo:broken_factory")  # would raise if called: it is not
    with pytest.raises(UserError, match="has no attribute 'missing'"):
        _slurm_check(model_factory="test_byo:missing")  # a bad spec still fails here


def test_a_slurm_sweep_checks_the_hf_config_without_making_its_weights(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    transformers = pytest.importorskip("transformers")

    def no_weights(*_: object, **__: object) -> None:
        raise AssertionError("the login node made the model's weights")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_config", no_weights)
    _slurm_check(hf_config=str(_tiny_hf_config(tmp_path / "ok.json")), seq_len=32)
    too_short = _tiny_hf_config(tmp_path / "short.json", n_positions=8)
    with pytest.raises(UserError, match="exceeds the 8 positions"):
        _slurm_check(hf_config=str(too_short), seq_len=32)


def test_an_unknown_hf_model_type_is_one_short_line_with_the_nearest_names(
    tmp_path: Path,
) -> None:
    """transformers' own message lists every model type it knows (~800, thousands of
    characters) in what must be one line; ours names the nearest ones instead."""
    pytest.importorskip("transformers")
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "lama"}))
    res = CliRunner().invoke(app, ["train", *BASE, "--hf-config", str(path)])
    assert res.exit_code == 2, res.output
    error, hint = [ln for ln in res.output.splitlines() if ln.strip()]
    assert error.startswith("error:") and "'lama' is not one transformers" in error
    assert len(error) < 200 and "'llama'" in hint
