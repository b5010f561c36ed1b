"""A project name or tracking store given from Python is checked as the CLI's options are: a
lone surrogate (bytes of another encoding) or a control character is one line, before the
tool makes anything (MLflow wrote its store first and then failed, read as a damaged run; a
newline in a ``file:`` URI was dropped by ``urlsplit``, so another folder was used)."""

from __future__ import annotations

import os

import pytest

from andrea_diag.errors import BadArgument
from andrea_diag.given_checks import check_project, mlflow_uri


@pytest.mark.parametrize("wandb", [True, False])
def test_a_project_of_a_lone_surrogate_is_not_utf8_text(wandb: bool) -> None:
    with pytest.raises(BadArgument, match="is not UTF-8 text"):
        check_project(os.fsdecode(b"caf\xe9"), wandb)
    check_project("café", wandb)  # UTF-8 text outside ASCII stays a name


@pytest.mark.parametrize("store", ["file:/tmp/ml\nruns", "ml\x1bruns", "/tmp/a\tb"])
def test_a_store_with_a_control_character_is_refused_not_parsed(store: str) -> None:
    with pytest.raises(BadArgument, match="holds control characters"):
        mlflow_uri(store)
    assert mlflow_uri("/tmp/mlruns").startswith("file://")
