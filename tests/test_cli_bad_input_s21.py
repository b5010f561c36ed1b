"""Bad input refused in one line before anything is written (review of the CLI's bad input,
round 21): paths whose bytes are not UTF-8 (--out, --resume, --source, --hf-config), an
ANDREA_DIAG_CACHE that cannot be a folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cli_refusals import empty_fixture, no_work_started, refused, runner  # noqa: F401 (empty)

from andrea_diag.cli import app

# ---- 1. a path in bytes that are not UTF-8 ----

NOT_UTF8 = os.fsdecode(b"run-\xff\xfe")  # as argv hands it over: surrogate escapes


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["train", "--out", NOT_UTF8], "--out"),
        (["cascade", "--out", f"runs/{NOT_UTF8}/x"], "--out"),
        (["train", "--resume", NOT_UTF8], "--resume"),
        (["sweep", "--out", NOT_UTF8], "--out"),
        (["ladder", "--out", NOT_UTF8], "--out"),
        (["bench-kernels", "--out", NOT_UTF8], "--out"),
        (["bench-train", "--out", NOT_UTF8], "--out"),
        (["accum-check", "--out", NOT_UTF8], "--out"),
    ],
)
def test_an_out_or_resume_path_not_in_utf8_is_refused_before_the_run(
    args: list[str], flag: str, monkeypatch: pytest.MonkeyPatch, empty: Path
) -> None:
    """It trained, then the run's own files could not name the folder: a traceback-free error
    only after the whole run, and the folder left behind."""
    line = refused(args, monkeypatch, empty)
    assert flag in line and "UTF-8" in line
    assert "\\xff" in line  # the bytes shown escaped, not as a replacement character


@pytest.mark.parametrize("command", ["train", "cascade", "sweep", "ladder"])
def test_a_source_path_not_in_utf8_is_refused_before_the_run(
    command: str, monkeypatch: pytest.MonkeyPatch, empty: Path
) -> None:
    """A folder of that name, with text in it: it trained, then writing the run's page, which
    names the path, raised UnicodeEncodeError (a traceback after the whole run)."""
    folder = os.fsencode(empty.parent) + b"/books-\xff"
    os.mkdir(folder)
    Path(os.fsdecode(folder + b"/a.txt")).write_text("some text " * 500)
    line = refused([command, "--source", f"gutenberg={os.fsdecode(folder)}"], monkeypatch, empty)
    assert "--source gutenberg" in line and "UTF-8" in line and "\\xff" in line


def test_an_hf_config_path_not_in_utf8_is_refused_before_the_run(
    monkeypatch: pytest.MonkeyPatch, empty: Path
) -> None:
    """As --source: it trained, then writing the page that names it was a traceback."""
    config = os.fsencode(empty.parent) + b"/config-\xff.json"
    Path(os.fsdecode(config)).write_text('{"model_type": "gpt2", "n_layer": 1}')
    line = refused(["train", "--hf-config", os.fsdecode(config)], monkeypatch, empty)
    assert "--hf-config" in line and "UTF-8" in line


# ---- 2. ANDREA_DIAG_CACHE that cannot be the folder meant ----

JUNK_CACHE = [
    " ",  # was: a folder named " " made in the current folder, silently
    "cache\nold",  # was: a folder with a newline in its name
    "cache\x1b[2J",
    "~no-such-user-andrea-diag/cache",  # was: pathlib's RuntimeError traceback
]


def _refused_for_real(args: list[str], monkeypatch: pytest.MonkeyPatch, cwd: Path) -> str:
    """As ``cli_refusals.refused``, with the command's own work left in place (the cache is
    read there, before the --out folder is made)."""
    monkeypatch.chdir(cwd)
    res = runner.invoke(app, args)
    lines = [ln for ln in res.output.splitlines() if ln.strip() and not ln.startswith("prep")]
    assert res.exit_code != 0 and "Traceback" not in res.output, res.output
    assert not isinstance(res.exception, RuntimeError), res.exception
    assert lines and lines[0].startswith("error:"), res.output
    assert len(lines) == 1 or (len(lines) == 2 and lines[1].startswith("hint:")), res.output
    assert sorted(os.listdir(cwd)) == [], f"written before the refusal: {os.listdir(cwd)}"
    return lines[0]


@pytest.mark.parametrize("value", JUNK_CACHE)
def test_a_junk_cache_folder_in_the_environment_is_one_line_before_training(
    value: str, monkeypatch: pytest.MonkeyPatch, empty: Path
) -> None:
    monkeypatch.setenv("ANDREA_DIAG_CACHE", value)
    line = _refused_for_real(["train", "--steps", "1", "--eval-every", "0"], monkeypatch, empty)
    assert "ANDREA_DIAG_CACHE" in line


@pytest.mark.parametrize("value", JUNK_CACHE)
def test_a_junk_cache_folder_leaves_no_bench_train_out_folder(
    value: str, monkeypatch: pytest.MonkeyPatch, empty: Path
) -> None:
    """bench-train made its --out folder before it prepared the data that reads the cache."""
    monkeypatch.setenv("ANDREA_DIAG_CACHE", value)
    assert "ANDREA_DIAG_CACHE" in refused(["bench-train"], monkeypatch, empty)


def test_an_empty_cache_variable_is_the_default_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    from andrea_diag.data.tokenizer import default_cache_dir

    monkeypatch.setenv("ANDREA_DIAG_CACHE", "")
    assert default_cache_dir() == Path.home() / ".cache" / "andrea-diag"
