"""The metrics schema (andrea_diag/metrics.py): every recorded column is declared once, with its
owner and kind; probes and the evaluator declare exactly what the schema gives them; the
namespaced names round-trip. The probe driver's refusal of undeclared writes is pinned in
test_probe_driver.py; a fresh tiny cascade's columns in test_cascade.py."""

from __future__ import annotations

import ast
import json
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from andrea_diag import metrics
from andrea_diag.config import SOURCE_NAMES, RunConfig
from andrea_diag.model import GPT, param_group_of
from andrea_diag.probes import LayerGradNormProbe, LockInProbe, OptStateProbe, SpikeProbe
from andrea_diag.train.evaluation import HeldOutEvaluator

REPO = Path(__file__).resolve().parent.parent
GOLDEN = REPO / "tests" / "golden" / "cascade_tiny_metrics.json"  # 7 arms, adaptive ones too
REPORT_TABLES = sorted((REPO / "reports").glob("**/metrics.parquet"))


def _layers() -> list[str]:
    model = GPT(RunConfig(size="tiny").model)
    return sorted({".".join(param_group_of(n)) for n, _ in model.named_parameters()})


def _members(col: metrics.Column) -> list[str]:
    values = {"source": list(SOURCE_NAMES), "layer": _layers()}
    return [col.name_for(v) for v in values[col.variable]] if col.variable else [col.name]


def test_every_column_of_the_golden_tiny_cascade_is_declared_with_its_kind() -> None:
    golden = json.loads(GOLDEN.read_text())
    assert {"none", "global", "zclip", "skip"} <= set(golden)
    for arm, columns in golden.items():
        assert metrics.undeclared(columns) == [], arm
        for name, values in columns.items():
            kind = metrics.lookup(name).kind
            present = [
                v for v in values if v is not None and not (type(v) is float and math.isnan(v))
            ]
            wrong = {type(v).__name__ for v in present if type(v) is not kind}
            assert not wrong, f"{arm}.{name}: declared {kind.__name__}, recorded {wrong}"


@pytest.mark.skipif(not REPORT_TABLES, reason="no published reports in this checkout")
def test_every_column_of_the_published_reports_is_declared() -> None:
    for table in REPORT_TABLES:
        columns = pd.read_parquet(table).columns  # reads the whole table: they are small
        assert metrics.undeclared(columns) == [], table.relative_to(REPO)


def test_each_probe_and_the_evaluator_declare_exactly_the_columns_the_schema_gives_them() -> None:
    for cls in (SpikeProbe, OptStateProbe, LayerGradNormProbe, LockInProbe):
        assert set(cls.columns) == set(metrics.owned_by(cls.name)), cls.name
        assert len(cls.columns) == len(set(cls.columns)), cls.name
    assert set(HeldOutEvaluator.columns) == set(metrics.owned_by(metrics.EVALUATOR))
    owners = {c.owner for c in metrics.SCHEMA}
    assert owners == {metrics.LOOP, metrics.EVALUATOR, "spikes", "optstate", "layers", "lockin"}


def test_names_and_namespaced_names_round_trip_and_are_unique() -> None:
    names = [n for col in metrics.SCHEMA for n in _members(col)]
    tags = [metrics.namespaced(n) for n in names]
    assert len(set(names)) == len(names) and len(set(tags)) == len(tags)
    for name, tag in zip(names, tags, strict=True):
        assert tag is not None and "/" in tag, name
        assert metrics.on_disk(tag) == name, (name, tag)
    assert metrics.namespaced("clip_coef") == "clip/coef"
    assert metrics.namespaced("loss") == "loss/train"
    assert metrics.namespaced("loss_gutenberg") == "loss/source/gutenberg"
    assert metrics.namespaced("eval_loss_repo-docs") == "eval/loss/repo-docs"
    assert metrics.namespaced("m_norm") == "optstate/m_norm"
    assert metrics.namespaced("not_a_column") is None and metrics.on_disk("misc/x") is None


def test_a_fixed_name_is_never_read_as_a_member_of_a_pattern() -> None:
    # loss_z, loss_excess and loss_scale are no sources: the findings bug of issue 23
    assert metrics.lookup("loss_z") is metrics.LOSS_Z
    assert metrics.lookup("loss_scale") is metrics.LOSS_SCALE
    assert metrics.lookup("loss_hermes3-general") is metrics.LOSS_SOURCE
    columns = [*json.loads(GOLDEN.read_text())["none"], "loss_scale"]
    assert sorted(metrics.members(metrics.LOSS_SOURCE, columns)) == sorted(SOURCE_NAMES)
    assert sorted(metrics.members(metrics.LAYER_M, columns)) == _layers()


def test_a_user_probe_column_in_a_schema_pattern_is_refused_naming_the_pattern() -> None:
    # loss_aux would be read back as the loss of a source named "aux" (report, exports)
    mine = metrics.Column("loss_aux", "aux", float, "aux/loss", "my probe's auxiliary loss")
    ours = metrics.Column("aux/loss_aux", "aux", float, "aux/loss_aux", "the same, renamed")
    cols = metrics.ProbeColumns("aux", (mine, ours))
    with pytest.raises(metrics.ColumnCollision) as err:
        cols.check("loss_aux")
    said = str(err.value)
    assert "pattern 'loss_{source}' reserves for the loop (its source 'aux')" in said
    assert "even when declared" in said and "e.g. 'aux/loss_aux'" in said
    cols.check("aux/loss_aux")  # the suggested name is the probe's own
    assert cols.allowed == {"aux/loss_aux"}


def test_a_pattern_needs_the_same_variable_in_its_name_and_tag() -> None:
    with pytest.raises(ValueError, match="same variable"):
        metrics.Column("x_{source}", "loop", float, "x/total", "a per-source column, no tag var")


def test_the_schema_is_a_leaf_module() -> None:
    tree = ast.parse((REPO / "andrea_diag" / "metrics.py").read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
                for a in n.names}  # fmt: skip
    imported |= {n.module.split(".")[0] for n in ast.walk(tree)
                 if isinstance(n, ast.ImportFrom) and n.module}  # fmt: skip
    assert imported <= {"__future__", "functools", "re", "collections", "dataclasses"}
    code = "import sys, andrea_diag.metrics; assert 'torch' not in sys.modules, 'torch'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
