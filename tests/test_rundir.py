"""The untrusted-run-dir primitives: names stay inside, only regular files are read, writes never
follow a link out of the run."""

from __future__ import annotations

import os

import pytest

from andrea_diag.errors import UserError
from andrea_diag.rundir import (
    atomic_write_text,
    child,
    open_append,
    read_json,
    regular_file,
)


@pytest.mark.parametrize("name", ["../victim", "/etc", "a/b", "..", ".", "", "x" * 256])
def test_child_refuses_a_name_that_is_not_one_component_inside(tmp_path, name):
    with pytest.raises(UserError):
        child(tmp_path, name, "arm")


def test_child_refuses_a_link_that_leaves_the_run(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    run = tmp_path / "run"
    run.mkdir()
    (run / "none").symlink_to(outside)
    with pytest.raises(UserError, match="outside"):
        child(run, "none", "arm")
    (run / "global").mkdir()
    assert child(run, "global", "arm") == run / "global"


def test_a_fifo_is_refused_instead_of_read(tmp_path):
    fifo = tmp_path / "metrics.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(UserError, match="not a regular file"):
        regular_file(fifo, "metrics")


@pytest.mark.parametrize(
    ("text", "match"), [('{"steps": 1', "not valid JSON"), ("[1, 2]", "holds a list")]
)
def test_damaged_json_is_one_line(tmp_path, text, match):
    p = tmp_path / "config.json"
    p.write_text(text)
    with pytest.raises(UserError, match=match):
        read_json(p, "the config", kind=dict)


def test_atomic_write_replaces_a_symlink_and_leaves_its_target_alone(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    page = tmp_path / "report.html"
    page.symlink_to(victim)
    atomic_write_text(page, "<html>")
    assert victim.read_text() == "keep me"
    assert not page.is_symlink() and page.read_text() == "<html>"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_append_refuses_a_symlink(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (tmp_path / "events.jsonl").symlink_to(victim)
    with pytest.raises(UserError, match="symbolic link"), open_append(tmp_path / "events.jsonl"):
        pass
    assert victim.read_text() == "keep me"


def test_a_file_linked_out_of_its_run_is_not_read(tmp_path):
    secret = tmp_path / "secret.json"
    secret.write_text('{"token": "do not show"}')
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").symlink_to(secret)
    with pytest.raises(UserError, match="link out of its run"):
        read_json(run / "summary.json", "the summary", kind=dict)


def test_a_json_integer_past_pythons_digit_limit_is_one_line_not_a_traceback(tmp_path):
    from andrea_diag.rundir import read_json

    path = tmp_path / "config.json"
    path.write_text('{"steps": ' + "9" * 5000 + "}")
    with pytest.raises(UserError, match="is not a run's JSON"):
        read_json(path, "config.json")


def test_a_json_side_file_larger_than_any_run_writes_is_refused_unread(tmp_path):
    from andrea_diag.rundir import MAX_JSON_BYTES, read_json

    path = tmp_path / "summary.json"
    with open(path, "wb") as f:
        f.truncate(MAX_JSON_BYTES + 1)  # sparse: no disk, and never read
    with pytest.raises(UserError, match="more than any run writes"):
        read_json(path, "summary.json")


def test_jsonl_rows_nested_too_deep_or_past_the_digit_limit_are_skipped_not_fatal(tmp_path):
    from andrea_diag.runread import read_jsonl

    path = tmp_path / "events.jsonl"
    rows = ['{"update": 1}', "[" * 100_000 + "]" * 100_000, '{"update": ' + "9" * 5000 + "}",
            '{"update": 2}']  # fmt: skip
    path.write_text("\n".join(rows) + "\n")
    assert read_jsonl(path)["update"].tolist() == [1, 2]


def test_a_jsonl_table_larger_than_the_reader_takes_is_refused_unread(tmp_path):
    from andrea_diag.rundir import MAX_TABLE_BYTES
    from andrea_diag.runread import read_jsonl

    path = tmp_path / "metrics.jsonl"
    with open(path, "wb") as f:
        f.truncate(MAX_TABLE_BYTES + 1)
    with pytest.raises(UserError, match="more than this reader takes"):
        read_jsonl(path)


@pytest.mark.parametrize("name", ["none\x1b]0;PWNED\x07", "a\nb", "arm\x9b2J", "tab\there"])
def test_a_name_with_control_characters_is_refused_and_shown_escaped(name):
    from andrea_diag.rundir import check_component

    with pytest.raises(UserError, match="holds control characters") as caught:
        check_component(name, "arm")
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in caught.value.message)
