"""Bad input to the run config and the data layer, refused in one line of the toolkit's own
error types (round 30, from a bad-input audit):

- ``--inject outlier@<5,000 digits>`` was a traceback (int()'s "Exceeds the limit (4300
  digits)"); ``parse_injections("outlier@3")`` read a str as specs one letter long.
- ``RunConfig(model_factory="")`` (``data_factory``, ``hf_config`` too) was read as unset and
  trained the toolkit's own model or data without a word; ``corpus_seed=-1`` was taken.
- ``load_override("gutenberg", "")`` read every text file of the working folder as the
  source; a non-path was pathlib's TypeError.
- ``Mixer(seed=True)`` or ``seed="a"`` seeded a schedule of its own, ``source_names="abc"`` made
  one source per letter, ``()`` phases of no weights, ``eta=inf`` nan weights, and
  ``phase_at(10**12)`` built phases until the memory ran out.
- ``given_path`` (and the checks beside it) raised a bare ``TypeError``: now ``BadType``, still
  a ``TypeError``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from cli_refusals import empty_fixture, refused  # noqa: F401 (empty)

from andrea_diag.config import RunConfig, parse_injections
from andrea_diag.data import Mixer, load_override
from andrea_diag.errors import BadArgument, BadType, UserError
from andrea_diag.given_checks import check_project, given_path


def test_an_inject_update_of_thousands_of_digits_is_one_line_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, empty: Path
) -> None:
    line = refused(["train", "--inject", "outlier@" + "9" * 5000], monkeypatch, empty)
    assert line == "error: --inject outlier@...: update of 5,000 digits is outside 1..240"


def test_an_inject_update_with_leading_zeros_is_still_the_update_it_names() -> None:
    assert list(parse_injections(["outlier@" + "0" * 30 + "5"], 10)) == [5]
    with pytest.raises(UserError, match=r"update 11 is outside 1\.\.10"):
        parse_injections(["outlier@011"], 10)


def test_injections_given_as_one_str_are_a_type_error_not_one_letter_specs() -> None:
    with pytest.raises(BadType, match="--inject takes a list of KIND@UPDATE, got str"):
        parse_injections("outlier@3", 10)


@pytest.mark.parametrize(
    ("field", "flag"),
    [("model_factory", "--model"), ("data_factory", "--data"), ("hf_config", "--hf-config")],
)
@pytest.mark.parametrize("blank", ["", "   "])
def test_a_blank_factory_or_hf_config_is_refused_not_read_as_unset(
    field: str, flag: str, blank: str
) -> None:
    with pytest.raises(BadArgument, match=f"^{flag} \\({field}\\) '{blank}' is blank"):
        RunConfig(**{field: blank}).resolve()


@pytest.mark.parametrize("seed", [-1, 2**32, 2**70])
def test_a_corpus_seed_outside_a_seeds_range_is_refused(seed: int) -> None:
    with pytest.raises(BadArgument, match="corpus_seed must be from 0 to 4294967295"):
        RunConfig(corpus_seed=seed).resolve()
    assert RunConfig(corpus_seed=2**32 - 1).resolve().corpus_seed == 2**32 - 1


def test_a_blank_source_override_is_refused_not_read_as_the_working_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "secret.txt").write_text("not for training\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(BadArgument, match="source gutenberg: an empty path names no file"):
        load_override("gutenberg", "")
    with pytest.raises(BadType, match="source gutenberg must be a str or a path, got int"):
        load_override("gutenberg", 3)  # type: ignore[arg-type]
    assert load_override("gutenberg", "secret.txt").documents == ("not for training\n",)


@pytest.mark.parametrize(
    ("kw", "error", "said"),
    [({"seed": True}, BadType, "mixer seed must be an int, got bool True"),
     ({"seed": "a"}, BadType, "mixer seed must be an int, got str"),
     ({"seed": 1.0}, BadType, "mixer seed must be an int, got float"),
     ({"seed": -1}, BadArgument, "mixer seed must be from 0 to 4294967295, got -1"),
     ({"source_names": "abc"}, BadType, "source_names must be a tuple of str, got 'abc'"),
     ({"source_names": ()}, BadArgument, "source_names must name at least one source"),
     ({"source_names": ("a", "a")}, BadArgument, "source_names must name at least one source, "
      "each once"),
     ({"policy": "exp3", "eta": float("inf")}, BadArgument, "exp3 inverse temperature eta"),
     ({"policy": "exp3", "eta": -1.0}, BadArgument, "exp3 inverse temperature eta"),
     ({"policy": "exp3", "smoothing": 2.0}, BadArgument, "exp3 smoothing must be in (0, 1]"),
     ({"policy": "exp3", "smoothing": 0.0}, BadArgument, "exp3 smoothing must be in (0, 1]")],
    ids=["bool-seed", "str-seed", "float-seed", "negative-seed", "str-names", "no-names",
         "name-twice", "inf-eta", "negative-eta", "smoothing-2", "smoothing-0"],
)  # fmt: skip
def test_a_mixer_refuses_what_would_make_another_schedule_or_no_weights(
    kw: dict, error: type[Exception], said: str
) -> None:
    with pytest.raises(error, match=f"^{said.replace('(', '.').replace(')', '.')}"):
        Mixer(**kw)


def test_a_mixer_takes_a_numpy_seed_as_the_int_it_holds() -> None:
    mixer = Mixer(np.int64(3))
    assert type(mixer.seed) is int and mixer.boundaries(100) == Mixer(3).boundaries(100)


def test_a_phase_past_the_most_updates_a_run_takes_is_refused_not_built() -> None:
    with pytest.raises(BadArgument, match="update 1000000000000 is past the most a run takes"):
        Mixer(0).phase_at(10**12)
    with pytest.raises(BadArgument, match="updates are 1-based, got 0"):
        Mixer(0).phase_at(0)


def test_a_path_or_project_of_the_wrong_type_is_the_toolkits_bad_type() -> None:
    with pytest.raises(BadType, match="must be a str or a path, got bytes"):
        given_path(b"abc", "--out")
    with pytest.raises(BadType, match="--project must be a str, got int"):
        check_project(3, wandb=True)
