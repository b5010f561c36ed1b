"""The package's import graph keeps its layers (ARCHITECTURE.md, issue 23 item 3).

Every ``import`` of every module is read with ``ast``, function-local and ``TYPE_CHECKING``
ones included (they hide a cycle, they do not remove it), and the tests assert:

- no cycle between modules, nor between units (a subpackage, or a top-level module);
- each unit imports only units of its own layer or below, bottom to top:
  config/errors/stats -> data/model/clip -> record -> train/probes/monitor -> experiments
  -> report -> commands.

The tests read source files only: nothing is imported, so they take a second.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "andrea_diag"

# layer of each unit, bottom (0) to top. A unit is a subpackage or a top-level module; a dotted
# entry overrides its package's layer for one module (the longest matching name wins).
LAYERS: dict[str, int] = {
    # 0: config, errors, stats, and the standard-library-only leaves they are made of
    "config": 0,
    "errors": 0,
    "stats": 0,
    "fields": 0,  # the config's CLI metadata
    "field_types": 0,  # the Python types of the config's fields, checked where given
    "presets": 0,  # sizes and recipes, re-exported by config
    "config_choices": 0,  # the config's closed choices (Literal types) and their check
    "probe_config": 0,
    "clip_params": 0,  # the clip modes' parameters: a part of RunConfig, so below clip
    "injections": 0,  # --inject's kinds and parser: a part of RunConfig
    "tables": 0,  # column names of the stats tables, shared by experiments and report
    "rundir": 0,  # the one reader/writer of run-directory files (data's cache uses it too)
    "signals": 0,
    "host_memory": 0,  # the memory free, for the size checks of rundir, data and train
    "table_width": 0,  # the column caps of the run dir's table readers
    "optional_deps": 0,  # the optional extras' imports: absent or broken, one line
    "given_checks": 0,  # the rules for what a caller gives (paths, sink names, stores)
    "surrogates": 0,  # lone surrogates in a run's JSON, replaced as it is read
    "out_place": 0,  # where a command's output may land: never among others' records
    # 1: data, model, clip, and the device they run on
    "": 1,  # andrea_diag/__init__.py re-exports the clip API
    "data": 1,
    "model": 1,
    "clip": 1,
    "device": 1,
    "telemetry": 1,
    "factories": 1,  # builds the model and the sources (--model / --data)
    "integrations.hf_model": 1,  # a Hugging Face model built like model.py's, for factories
    # 2: the run directory
    "record": 2,
    "jsonl": 2,
    "jsonl_read": 2,  # the JSONL tables' reader, with its size, width and memory bounds
    "runlock": 2,
    "runread": 2,
    "summary_check": 2,  # summary.json against the run's own metrics table and config
    "sweep_table": 2,  # sweep.csv as the sweep page and the ladder read it
    "runs": 2,
    "tensorboard": 2,  # exports a run directory (and monitor writes one live)
    "sinks": 2,
    # 3: training and its probes
    "train": 3,
    "probes": 3,
    "monitor": 3,
    "monitor_checks": 3,  # SpikeMonitor's argument checks
    "monitor_clip": 3,  # what after_clip records from the clip it is given
    "monitor_resume": 3,  # its resume read-back (runread)
    "monitor_config": 3,  # the config.json SpikeMonitor writes, and its probes' settings
    "integrations": 3,  # HF Trainer / Lightning callbacks over monitor
    # 4: experiments, and the benchmarks that drive the trainer like one
    "experiments": 4,
    "bench": 4,
    # 5, 6
    "report": 5,
    "commands": 6,
    "cli": 6,
}


def _modules() -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package's __init__)."""
    out = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return out


MODULES = _modules()


def _targets(module: str, is_pkg: bool, node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    """The package's modules that one import statement loads (a name imported from a package
    is that submodule when one exists, else the package itself)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:  # relative: from the module's own package, up level - 1
            here = module.split(".") if is_pkg else module.split(".")[:-1]
            here = here[: len(here) - (node.level - 1)]
            base = ".".join([*here, *([base] if base else [])])
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
    for name in names:
        if name != PACKAGE and not name.startswith(PACKAGE + "."):
            continue
        while name not in MODULES:  # `import andrea_diag.x.y` of a name inside a module
            name = name.rsplit(".", 1)[0]
        yield name


@functools.cache
def _imports_of(module: str, path: Path, is_pkg: bool) -> frozenset[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = {
        t
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for t in _targets(module, is_pkg, node)
    }
    return frozenset(found - {module})


def import_graph(modules: dict[str, tuple[Path, bool]] = MODULES) -> dict[str, set[str]]:
    """Module -> the package's modules it imports, at any depth of its source."""
    return {m: set(_imports_of(m, path, is_pkg)) for m, (path, is_pkg) in modules.items()}


def unit(module: str) -> str:
    """The LAYERS entry that owns ``module``: its longest dotted prefix there."""
    rel = module.removeprefix(PACKAGE).removeprefix(".")
    parts = rel.split(".") if rel else []
    for n in range(len(parts), -1, -1):
        name = ".".join(parts[:n])
        if name in LAYERS:
            return name
    raise AssertionError(f"{module} has no layer: add it to LAYERS in {__file__}")


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def unit_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for a, targets in graph.items():
        out.setdefault(unit(a), set()).update(unit(b) for b in targets if unit(b) != unit(a))
    return out


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{a} (layer {LAYERS[unit(a)]}) imports {b} (layer {LAYERS[unit(b)]})"
        for a, targets in graph.items()
        for b in targets
        if LAYERS[unit(b)] > LAYERS[unit(a)]
    )


def test_no_module_imports_itself_back_through_other_modules() -> None:
    assert cycles(import_graph()) == []


def test_no_package_or_top_level_module_imports_itself_back() -> None:
    assert cycles(unit_graph(import_graph())) == []


def test_every_module_imports_only_its_own_layer_or_below() -> None:
    assert layer_violations(import_graph()) == []


def test_every_module_has_a_layer() -> None:
    for module in MODULES:
        assert unit(module) in LAYERS


def _with_line(module: str, line: str, tmp_path: Path) -> dict[str, set[str]]:
    """The import graph with one more line at the end of ``module`` (indented: in a function)."""
    path, is_pkg = MODULES[f"{PACKAGE}.{module}"]
    copy = tmp_path / path.name
    body = f"def later():\n{line}\n" if line.startswith(" ") else f"{line}\n"
    copy.write_text(path.read_text() + "\n\n" + body)
    return import_graph({**MODULES, f"{PACKAGE}.{module}": (copy, is_pkg)})


@pytest.mark.parametrize(
    ("module", "line", "unit_cycle"),
    [
        ("experiments.cascade", "from andrea_diag.report import render_cascade", True),
        ("experiments.sweep", "    from andrea_diag.report.sweep_page import render_sweep", True),
        ("config", "    from andrea_diag.clip.modes import clip_modes", False),
        ("data.batches", "from ..train import loop", True),
        ("record", "import andrea_diag.commands.run", True),
    ],
)
def test_an_import_from_a_higher_layer_is_caught_even_inside_a_function(
    module: str, line: str, unit_cycle: bool, tmp_path: Path
) -> None:
    graph = _with_line(module, line, tmp_path)
    assert layer_violations(graph), f"{line!r} in {module} was not caught"
    assert bool(cycles(unit_graph(graph))) is unit_cycle


def test_a_cycle_inside_one_layer_is_caught(tmp_path: Path) -> None:
    # rundir imports errors; errors importing rundir back is no layer violation, but a cycle
    graph = _with_line("errors", "    from andrea_diag.rundir import read_json", tmp_path)
    assert layer_violations(graph) == layer_violations(import_graph())
    assert ["andrea_diag.errors", "andrea_diag.rundir"] in cycles(graph)
    assert ["errors", "rundir"] in cycles(unit_graph(graph))
