"""User-supplied files refused in one line before anything is written (review of the CLI's bad
input, round 24): a --source file too large for memory, an --hf-config that is not a config's
JSON, a ``~user`` path naming no user, a --model or --data factory that calls sys.exit."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from cli_refusals import empty_fixture, refused, runner  # noqa: F401 (empty)
from test_cli_bad_input_s21 import _refused_for_real

from andrea_diag.cli import app
from andrea_diag.errors import UserError

FREE = 1 << 20  # the memory a test says is free: far below each file below


def _sparse(path: Path, size: int) -> Path:
    """A file of ``size`` bytes that takes no disk (zeros, as a planted or mistaken one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(size)
    return path


# ---- 1. a --source file too large to read into memory ----


@pytest.mark.parametrize(
    ("name", "extra"),
    [
        ("books.txt", []),
        ("rows.jsonl", []),
        ("folder/a.txt", []),  # a folder's file: --source gutenberg=folder
        ("ids.bin", ["--vocab-size", "100", "--sources", "only"]),
        ("ids.npy", ["--vocab-size", "100", "--sources", "only"]),
    ],
)
def test_a_source_file_too_large_for_memory_is_one_line_before_training(
    name: str, extra: list[str], monkeypatch: pytest.MonkeyPatch, empty: Path
) -> None:
    """It was read whole first: a 40 GiB sparse file was a MemoryError traceback (or the OOM
    killer), a smaller one too large for its copies (decoded, widened to int64) likewise."""
    monkeypatch.setattr("andrea_diag.data.whole_file.available_memory", lambda: FREE)
    path = _sparse(empty.parent / name, 64 << 20)
    given = path.parent if name.startswith("folder/") else path
    args = ["train", "--steps", "1", "--eval-every", "0", "--source", f"gutenberg={given}"]
    line = _refused_for_real([*args, *extra], monkeypatch, empty)
    assert "gutenberg" in line and f"{64 << 20:,} bytes" in line and "memory" in line


def test_an_allocation_refused_past_the_free_memory_is_the_same_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``ulimit -v`` the free memory does not show: MemoryError from the read itself."""
    from andrea_diag.data import whole_file

    path = tmp_path / "a.txt"
    path.write_text("some text")

    def no_memory(self: Path) -> bytes:
        raise MemoryError

    monkeypatch.setattr(whole_file.Path, "read_bytes", no_memory)
    with pytest.raises(UserError, match=r"gutenberg.*memory"):
        whole_file.read_whole(path, "gutenberg", whole_file.TEXT_COPIES)


def test_a_source_file_that_fits_in_memory_is_read_whole(tmp_path: Path) -> None:
    from andrea_diag.data.whole_file import TOKEN_COPIES, available_memory, read_whole

    path = tmp_path / "ids.bin"
    path.write_bytes(b"\x01\x00" * 1000)
    assert read_whole(path, "gutenberg", TOKEN_COPIES) == b"\x01\x00" * 1000
    assert available_memory() is None or available_memory() > 0


# ---- 2. an --hf-config that is a file but not a config's JSON ----


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[" * 100_000, "nested too deeply"),  # was: RecursionError traceback
        ('{"model_type": "gpt2", "n_layer": 1' + "0" * 5000 + "}", "digits"),  # was: ValueError
    ],
)
def test_an_hf_config_json_the_loader_cannot_parse_is_one_line(
    text: str, words: str, monkeypatch: pytest.MonkeyPatch, empty: Path
) -> None:
    path = empty.parent / "config.json"
    path.write_text(text)
    line = refused(["train", "--hf-config", str(path)], monkeypatch, empty)
    assert "--hf-config" in line and words in line


@pytest.mark.parametrize("command", ["train", "sweep"])
def test_a_huge_hf_config_is_refused_by_its_size_unread(
    command: str, monkeypatch: pytest.MonkeyPatch, empty: Path
) -> None:
    """A sparse 40 GiB config.json was read whole: a MemoryError traceback."""
    path = _sparse(empty.parent / "model" / "config.json", 40 << 30)
    line = refused([command, "--hf-config", str(path.parent)], monkeypatch, empty)
    assert "--hf-config" in line and f"{40 << 30:,} bytes" in line


def test_an_hf_config_that_parses_still_reaches_training(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "gpt2", "n_layer": 1, "n_embd": 32, "n_head": 2}')
    seen: dict[str, Any] = {}

    def fake_run(spec: Any, console: Any) -> None:
        seen["spec"] = spec
        raise SystemExit(0)

    monkeypatch.setattr("andrea_diag.commands.run.run_cascade", fake_run)
    res = runner.invoke(app, ["train", "--hf-config", str(tmp_path)])
    assert seen["spec"].base.hf_config == str(tmp_path), res.output


# ---- 3. ~user naming no user ----

NO_USER = "~no-such-user-andrea-diag"


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["train", "--source", f"gutenberg={NO_USER}/books"], "--source gutenberg"),
        (["cascade", "--source", f"gutenberg={NO_USER}/ids.bin:uint16"], "--source gutenberg"),
        (["sweep", "--source", f"hermes3-general={NO_USER}/chat.jsonl"], "--source hermes3"),
        (["train", "--hf-config", f"{NO_USER}/config.json"], "--hf-config"),
        (["ladder", "--hf-config", f"{NO_USER}/config.json"], "--hf-config"),
    ],
)
def test_a_path_under_an_unknown_users_home_is_one_line(
    args: list[str], flag: str, monkeypatch: pytest.MonkeyPatch, empty: Path
) -> None:
    """pathlib's expanduser raised RuntimeError("Could not determine home directory."), a
    traceback, where the data was prepared or the model built."""
    line = refused(args, monkeypatch, empty)
    assert flag in line and NO_USER in line


# ---- 4. a factory that calls sys.exit ----


def test_a_model_factory_calling_sys_exit_is_one_line() -> None:
    """``--model sys:exit`` printed the size preset and exited 1; no error line said why."""
    from andrea_diag.config import RunConfig
    from andrea_diag.factories import build_model

    with pytest.raises(UserError, match=r"--model 'sys:exit': the factory called sys.exit"):
        build_model(RunConfig(model_factory="sys:exit").resolve())


def test_a_data_factory_calling_sys_exit_is_one_line_not_a_silent_success() -> None:
    """``--data sys:exit`` ended the command with exit code 0 and no word, nothing trained."""
    from andrea_diag.factories import factory_sources

    with pytest.raises(UserError, match=r"--data 'sys:exit': the factory called sys.exit\(None\)"):
        factory_sources("sys:exit")


def test_a_factory_module_that_exits_while_imported_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from andrea_diag.factories import load_factory

    (tmp_path / "exits_on_import_s24.py").write_text("import sys\nsys.exit(3)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "exits_on_import_s24", raising=False)
    with pytest.raises(UserError, match=r"importing 'exits_on_import_s24' called sys.exit\(3\)"):
        load_factory("exits_on_import_s24:make", "--model")
