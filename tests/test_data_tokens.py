"""Token-id sources (issue 24 item 8): ``.bin``/``.npy`` files or a factory's tensors with a
declared ``--vocab-size`` skip the tokenizer; ``--sources only`` keeps just the given sources.

The quick tests read files and build data; the ``slow`` ones train a tiny cascade a few updates.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from andrea_diag.cli import app
from andrea_diag.config import SOURCE_NAMES
from andrea_diag.data import BatchPlan, Mixer, prepare_data
from andrea_diag.data.corpus import Source
from andrea_diag.data.heldout import check_fits, eval_set
from andrea_diag.data.token_ids import load_token_file, split_spec
from andrea_diag.errors import UserError
from andrea_diag.factories import factory_sources

V = 320  # a declared vocabulary that is neither the toolkit's 8449 nor a power of two
N = 6000  # tokens a source: one 33-token sequence and a held-out tail of 300 fit easily
BASE = ["--size", "tiny", "--steps", "3", "--micro-batch", "4", "--seq-len", "32"]


def ids(seed: int, n: int = N, vocab: int = V) -> np.ndarray:
    """A learnable stream: a walk through the vocabulary with small seeded jumps."""
    rng = np.random.default_rng(seed)
    return (np.cumsum(rng.integers(1, 4, n)) % vocab).astype(np.int64)


def token_data() -> dict[str, torch.Tensor]:
    """A ``--data`` factory returning token ids (``--data test_data_tokens:token_data``)."""
    return {"hermes3-general": torch.from_numpy(ids(5)), "gutenberg": torch.from_numpy(ids(6))}


@pytest.fixture
def token_files(tmp_path: Path) -> dict[str, Path]:
    ids(0).astype(np.uint16).tofile(tmp_path / "train.bin")  # nanoGPT's format
    ids(1).astype(np.uint32).tofile(tmp_path / "wide.bin")
    np.save(tmp_path / "ids.npy", ids(2).astype(np.int32))
    return {
        "bin": tmp_path / "train.bin",
        "wide": tmp_path / "wide.bin",
        "npy": tmp_path / "ids.npy",
    }


# -- reading -------------------------------------------------------------------------------


def test_a_bin_of_uint16_and_an_npy_read_back_as_the_ids_written(token_files) -> None:
    got = load_token_file("gutenberg", str(token_files["bin"]), V)
    assert torch.equal(got.ids, torch.from_numpy(ids(0)))
    assert (got.dtype, got.vocab_size, got.path) == ("uint16", V, str(token_files["bin"]))
    assert got.sha256 == hashlib.sha256(token_files["bin"].read_bytes()).hexdigest()
    wide = load_token_file("gutenberg", f"{token_files['wide']}:uint32", V)
    assert torch.equal(wide.ids, torch.from_numpy(ids(1))) and wide.dtype == "uint32"
    npy = load_token_file("repo-docs", str(token_files["npy"]), V)
    assert torch.equal(npy.ids, torch.from_numpy(ids(2))) and npy.dtype == "int32"


def test_a_token_spec_is_a_bin_or_npy_path_with_an_optional_dtype() -> None:
    assert split_spec("a/train.bin") == ("a/train.bin", None)
    assert split_spec("a/train.bin:UINT32") == ("a/train.bin", "uint32")
    assert split_spec("ids.npy") == ("ids.npy", None)
    assert split_spec("books/") is None and split_spec("notes.txt") is None


def _write(tmp_path: Path, name: str, content: object) -> str:
    p = tmp_path / name
    if isinstance(content, bytes):
        p.write_bytes(content)
    else:
        np.save(p, content)
    return str(p)


@pytest.mark.parametrize(
    ("name", "content", "suffix", "vocab", "message"),
    [
        ("odd.bin", b"\x01\x02\x03", "", V, "3 bytes, not a whole number of uint16 ids"),
        ("empty.bin", b"", "", V, "is empty"),
        ("f.npy", np.zeros(50, np.float32), "", V, "float32 values, not integer token ids"),
        ("big.npy", np.array([0, 5, V]), "", V, f"token id {V}, outside the vocabulary 0..{V - 1}"),
        ("neg.npy", np.array([3, -1]), "", V, "token id -1, outside the vocabulary"),
        ("2d.npy", np.zeros((4, 4), np.int64), "", V, "shape (4, 4), not a 1-D token stream"),
        ("ok.bin", b"\x01\x00", ":float16", V, "unknown token dtype 'float16'"),
        ("ok.npy", np.arange(4), ":uint16", V, "a .npy names its own dtype"),
        ("ok.bin", b"\x01\x00", "", None, "no vocabulary size was declared"),
        (
            "obj.npy",
            np.array([{"a": 1}], dtype=object),
            "",
            V,
            "holds Python objects (pickled data)",
        ),
    ],
)
def test_bad_token_files_are_one_clear_line(
    tmp_path, name, content, suffix, vocab, message
) -> None:
    spec = _write(tmp_path, name, content) + suffix
    with pytest.raises(UserError, match=r"^source gutenberg: ") as err:
        load_token_file("gutenberg", spec, vocab)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_missing_token_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="does not exist"):
        load_token_file("gutenberg", str(tmp_path / "nope.bin"), V)


def test_a_stream_too_short_for_a_sequence_and_its_held_out_tail_is_refused() -> None:
    check_fits({"gutenberg": torch.zeros(20 * 33 + 1, dtype=torch.int64)}, seq_len=32)  # fits
    with pytest.raises(UserError, match="held-out tail") as err:
        check_fits({"gutenberg": torch.zeros(20 * 33 - 1, dtype=torch.int64)}, seq_len=32)
    assert "at least ~661 tokens" in err.value.hint


# -- preparing: token ids, mixing, only-given --------------------------------------------------


def test_token_data_skips_the_tokenizer_and_uses_only_the_given_sources(token_files) -> None:
    data = prepare_data({"gutenberg": str(token_files["bin"]), "hermes3-general":
                         str(token_files["npy"])}, declared_vocab=V)  # fmt: skip
    assert data.tokenizer is None and data.vocab_size == V and data.eot_id is None
    assert data.names == ("gutenberg", "hermes3-general")  # SOURCE_NAMES order, no default
    assert data.note == ""  # token ids imply only-given: nothing mixed in
    d = data.describe()
    assert d["tokenizer"] is None and d["vocab"] == {"kind": "token-ids", "vocab_size": V}
    src = d["sources"]["gutenberg"]
    assert (src["dtype"], src["n_tokens"], src["vocab_size"]) == ("uint16", N, V)
    assert src["path"] == str(token_files["bin"]) and len(src["sha256"]) == 64
    assert src["n_bytes"] == 2 * N  # the file's size: two bytes an id
    assert data.rare_token_ids(8).max() < V and data.token_counts.numel() == V
    assert data.decode(torch.tensor([3, 17])) == "3 17"  # lock-in samples: the ids themselves
    again = prepare_data({"gutenberg": str(token_files["bin"]),
                          "hermes3-general": str(token_files["npy"])}, declared_vocab=V)  # fmt: skip
    assert again.key == data.key  # the same bytes: the same data identity (resume, sweeps)


def test_mixing_text_and_token_ids_is_refused_in_one_line(token_files, tmp_path) -> None:
    (tmp_path / "notes.txt").write_text("some text " * 50)
    with pytest.raises(UserError) as err:
        prepare_data({"gutenberg": str(token_files["bin"]), "repo-docs": str(tmp_path / "notes.txt")},
                     declared_vocab=V)  # fmt: skip
    assert str(err.value).startswith("source gutenberg is token ids but source repo-docs is text")


def test_a_token_source_given_twice_or_under_an_unknown_name_is_refused(token_files) -> None:
    given = {"gutenberg": load_token_file("gutenberg", str(token_files["npy"]), V)}
    with pytest.raises(UserError, match="comes from both --source and --data"):
        prepare_data({"gutenberg": str(token_files["bin"])}, given=given, declared_vocab=V)
    with pytest.raises(UserError, match="'wiki' is unknown"):
        prepare_data({"wiki": str(token_files["bin"])}, declared_vocab=V)


def test_a_vocab_size_without_token_ids_is_refused() -> None:
    with pytest.raises(UserError, match="declares the vocabulary of token-id sources"):
        prepare_data(declared_vocab=V)


def test_sources_only_without_a_given_source_is_refused() -> None:
    with pytest.raises(UserError, match="none was given"):
        prepare_data(only=True)


def _words(seed: int, n_docs: int) -> list[str]:
    """Documents of seeded made-up words: enough distinct ones for the toolkit's 8449-token BPE
    from one source alone (about 420 bytes a document)."""
    rng = random.Random(seed)
    lexicon = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 9)))
               for _ in range(8000)]  # fmt: skip
    return [" ".join(rng.choice(lexicon) for _ in range(60)) + "." for _ in range(n_docs)]


def test_given_text_with_the_defaults_names_the_defaults_mixed_in(tmp_path) -> None:
    given = {"gutenberg": Source("gutenberg", tuple(_words(0, 40)), "test", generated=False)}
    data = prepare_data(given=given, cache_dir=tmp_path, vocab_size=300, target_bytes=20_000)
    assert data.names == SOURCE_NAMES  # today's behaviour: the defaults fill the rest
    assert data.note.startswith("default sources mixed in with yours: repo-docs, hermes3-general")
    only = prepare_data(given=given, cache_dir=tmp_path, vocab_size=300, only=True)
    assert only.names == ("gutenberg",) and only.note == ""
    assert list(only.describe()["sources"]) == ["gutenberg"]
    assert prepare_data(cache_dir=tmp_path, vocab_size=300, target_bytes=20_000).note == ""


def test_a_factory_may_return_token_tensors_per_source() -> None:
    import sys
    import types

    mod = types.ModuleType("tok_factory_mod")
    mod.load = lambda: {
        "gutenberg": torch.from_numpy(ids(3)),
        "repo-docs": ids(4).astype(np.uint16),
    }
    mod.floats = lambda: {"gutenberg": torch.zeros(100)}
    sys.modules["tok_factory_mod"] = mod
    try:
        got = factory_sources("tok_factory_mod:load", V)
        assert torch.equal(got["gutenberg"].ids, torch.from_numpy(ids(3)))
        assert got["repo-docs"].dtype == "uint16" and got["gutenberg"].dtype == "int64"
        data = prepare_data(given=got, declared_vocab=V)
        assert data.names == ("repo-docs", "gutenberg") and data.tokenizer is None
        with pytest.raises(UserError, match="float32 values, not integer token ids"):
            factory_sources("tok_factory_mod:floats", V)
        with pytest.raises(UserError, match="no vocabulary size was declared"):
            factory_sources("tok_factory_mod:load", None)
    finally:
        del sys.modules["tok_factory_mod"]


# -- held-out split, mixer and batches on one or two sources ------------------------------------


@pytest.mark.parametrize("names", [("gutenberg",), ("repo-docs", "hermes3-general")])
def test_mixer_batches_and_eval_set_work_on_one_or_two_sources(names) -> None:
    streams = {n: torch.from_numpy(ids(i)) for i, n in enumerate(names)}
    mixer = Mixer(seed=0, source_names=names)
    phases = mixer.schedule(200)
    assert all(set(p.weights) == set(names) for p in phases)
    assert all(abs(sum(p.weights.values()) - 1) < 1e-9 for p in phases)
    if len(names) == 2:  # a boundary still moves the dominant source
        assert all(a.dominant != b.dominant for a, b in itertools.pairwise(phases))
    plan = BatchPlan(streams, mixer, seed=0, micro_batch=4, accum=2, seq_len=32)
    seen = torch.cat([plan.batch(u).source_idx.reshape(-1) for u in range(1, 30)])
    assert set(seen.tolist()) == set(range(len(names)))  # every source drawn, no other index
    assert int(plan.batch(5).tokens.max()) < V
    es = eval_set(streams, seq_len=32, seed=0)
    assert es.sources == names and es.tokens.shape == (len(names), 4, 33)
    assert int(es.offsets.min()) >= int(N * 0.95) - 1  # the held-out tail only


@pytest.mark.parametrize("names", [("gutenberg",), ("repo-docs", "hermes3-general")])
def test_the_exp3_mixer_runs_on_one_or_two_sources(names) -> None:
    mixer = Mixer(seed=0, policy="exp3", source_names=names)
    for u in range(1, 60):
        mixer.phase_at(u)
        mixer.observe(u, {n: 1.0 + i for i, n in enumerate(names)})  # the last one is hardest
    last = mixer.phase_at(60).weights
    assert set(last) == set(names) and abs(sum(last.values()) - 1) < 1e-9
    assert last[names[-1]] == max(last.values())  # more weight where the loss is higher


def test_a_mixer_of_other_sources_than_the_data_is_refused() -> None:
    with pytest.raises(ValueError, match="the mixer mixes"):
        BatchPlan({"gutenberg": torch.from_numpy(ids(0))}, Mixer(seed=0), seed=0,
                  micro_batch=2, accum=1, seq_len=8)  # fmt: skip


# -- end to end: a tiny cascade trains on token ids ----------------------------------------------


def _cascade(tmp_path: Path, *args: str) -> tuple[Path, str]:
    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["cascade", *BASE, "--clip", "none", *args, "--out", str(out)])
    assert res.exit_code == 0, res.output
    return out / "none", res.output


@pytest.mark.slow
def test_a_tiny_cascade_trains_on_a_bin_and_an_npy_with_the_declared_vocab(token_files, tmp_path):
    arm, _ = _cascade(tmp_path, "--source", f"gutenberg={token_files['bin']}",
                      "--source", f"repo-docs={token_files['npy']}", "--vocab-size", str(V))  # fmt: skip
    cfg = json.loads((arm / "config.json").read_text())
    assert cfg["model_config"]["vocab_size"] == V and cfg["vocab_size"] == V
    data = json.loads((arm / "data.json").read_text())
    assert list(data["sources"]) == ["repo-docs", "gutenberg"] and data["vocab"]["vocab_size"] == V
    rows = [json.loads(line) for line in (arm / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all(np.isfinite(r["loss"]) for r in rows)
    per_source = {k for k in rows[0] if k.startswith(("loss_", "w_"))} - {"loss_excess", "loss_z"}
    assert per_source == {"loss_repo-docs", "loss_gutenberg", "w_repo-docs", "w_gutenberg"}
    assert abs(rows[0]["loss"] - np.log(V)) < 0.3  # logits over the declared vocab at init
    evals = json.loads((arm / "eval_set.json").read_text())
    assert evals["sources"] == ["repo-docs", "gutenberg"]
    sheet = json.loads((arm / "summary.json").read_text())["run_sheet"]["data"]["token_ids"]
    assert sheet["vocab_size"] == V and sheet["sources"]["gutenberg"]["dtype"] == "uint16"
    assert sheet["sources"]["gutenberg"]["sha256"] == data["sources"]["gutenberg"]["sha256"]
    report = (arm.parent / "report.html").read_text()
    assert "token-id sources (their own vocabulary): gutenberg, repo-docs" in report
    assert "real-text sources" not in report


@pytest.mark.slow
def test_a_data_factory_of_token_tensors_trains_a_user_model_with_the_declared_vocab(tmp_path):
    arm, _ = _cascade(tmp_path, "--data", "test_data_tokens:token_data", "--vocab-size", str(V),
                      "--model", "test_byo:make_model")  # fmt: skip
    cfg = json.loads((arm / "config.json").read_text())
    assert cfg["model_config"]["vocab_size"] == V
    assert cfg["model_origin"]["class"].endswith("PairModel")
    data = json.loads((arm / "data.json").read_text())
    assert list(data["sources"]) == ["gutenberg", "hermes3-general"]
    src = data["sources"]["gutenberg"]
    assert src["origin"].startswith("data factory: test_data_tokens:token_data")
    assert (src["dtype"], src["n_tokens"], src["path"]) == ("int64", N, None)
    row = json.loads((arm / "metrics.jsonl").read_text().splitlines()[0])
    assert abs(row["loss"] - np.log(V)) < 0.3  # the user's model has the declared vocab's logits


@pytest.mark.slow
def test_sources_only_trains_on_the_given_text_alone(tmp_path) -> None:
    (tmp_path / "books").mkdir()
    for i, doc in enumerate(_words(1, 600)):
        (tmp_path / "books" / f"{i:03}.txt").write_text(doc)
    arm, output = _cascade(tmp_path, "--source", f"gutenberg={tmp_path / 'books'}",
                           "--sources", "only")  # fmt: skip
    assert list(json.loads((arm / "data.json").read_text())["sources"]) == ["gutenberg"]
    row = json.loads((arm / "metrics.jsonl").read_text().splitlines()[0])
    assert row["w_gutenberg"] == 1.0 and "loss_repo-docs" not in row and "w_repo-docs" not in row
    assert "default sources mixed in" not in output


@pytest.mark.slow
def test_a_source_given_without_only_prints_the_defaults_mixed_in(tmp_path) -> None:
    (tmp_path / "books").mkdir()
    (tmp_path / "books" / "a.txt").write_text("\n".join(_words(2, 300)))
    arm, output = _cascade(tmp_path, "--source", f"gutenberg={tmp_path / 'books'}")
    line = "default sources mixed in with yours: repo-docs, hermes3-general (--sources only"
    assert line in output
    assert list(json.loads((arm / "data.json").read_text())["sources"]) == list(SOURCE_NAMES)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.bool])
def test_a_factory_tensor_that_is_not_integer_is_one_line(dtype: torch.dtype) -> None:
    from andrea_diag.data.token_ids import check_ids

    with pytest.raises(UserError, match="not integer token ids"):
        check_ids(torch.zeros(64, dtype=dtype), "gutenberg", "the factory's tensor", 97)
