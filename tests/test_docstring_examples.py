"""Every module docstring's usage block still runs against the code (issue 23 item 8).

Docstrings open with an example of the module's use. These checks keep them honest without
running training: each ``from andrea_diag... import X`` line (plain or ``>>>``) imports, each
``X.attr`` used on a later line of the same docstring exists, and each ``andrea-diag ...``
command line names a real command and only real options (``tests/cli_lines.py``).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path

import pytest
from cli_lines import cli_lines, problems

PACKAGE = Path(__file__).resolve().parent.parent / "andrea_diag"
IMPORT = re.compile(
    r"^\s*(?:>>>\s*)?from\s+(andrea_diag[\w.]*)\s+import\s+([\w\s,()]+?)\s*(?:#.*)?$"
)


def _docstrings() -> dict[str, str]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text()), clean=False)
        if doc:
            out[str(path.relative_to(PACKAGE.parent))] = doc
    return out


DOCS = _docstrings()


def _import_problems(doc: str) -> list[str]:
    bad, names = [], {}
    for line in doc.splitlines():
        m = IMPORT.match(line)
        if not m:
            continue
        try:
            mod = importlib.import_module(m.group(1))
        except ImportError as e:
            bad.append(f"{line.strip()!r}: {e}")
            continue
        for name in re.split(r"[\s,()]+", m.group(2).strip()):
            if name and not hasattr(mod, name):
                try:  # a submodule: ``from andrea_diag.clip import cuda``
                    importlib.import_module(f"{m.group(1)}.{name}")
                except ImportError:
                    bad.append(f"{line.strip()!r}: {m.group(1)} has no {name}")
                    continue
            if name:
                names[name] = getattr(mod, name, None) or importlib.import_module(
                    f"{m.group(1)}.{name}"
                )
    for name, obj in names.items():  # ``Name.attr`` on any line: the attribute exists
        for attr in re.findall(rf"(?<![\w.]){re.escape(name)}\.(\w+)", doc):
            if not hasattr(obj, attr):
                bad.append(f"{name}.{attr} does not exist")
    return bad


def _code_lines(doc: str) -> list[ast.AST]:
    """The docstring's lines that parse as Python (``>>>`` prompts stripped): its usage block."""
    out = []
    for line in doc.splitlines():
        src = re.sub(r"^\s*(>>>|\.\.\.)?\s*", "", line)
        if "(" not in src:
            continue
        try:
            out.append(ast.parse(src))
        except SyntaxError:
            continue
    return out


def _call_problems(module: str, doc: str) -> list[str]:
    """Calls of the module's own names (or imported ones) bind to their real signatures."""
    mod = importlib.import_module(
        module.removesuffix(".py").replace("/", ".").removesuffix(".__init__")
    )
    space = dict(vars(mod))
    for line in doc.splitlines():
        m = IMPORT.match(line)
        if m:
            imported = importlib.import_module(m.group(1))
            for name in re.split(r"[\s,()]+", m.group(2).strip()):
                if name and hasattr(imported, name):
                    space[name] = getattr(imported, name)
    bad, instances = [], {}  # ``x = Class(...)``: later ``x.method(...)`` is checked too
    for tree in _code_lines(doc):
        for node in ast.walk(tree):
            if (isinstance(node, ast.Assign) and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Call)
                    and isinstance(node.value.func, ast.Name)
                    and inspect.isclass(space.get(node.value.func.id))):  # fmt: skip
                instances[node.targets[0].id] = space[node.value.func.id]
        for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
            f = call.func
            if (
                isinstance(f, ast.Attribute)
                and isinstance(f.value, ast.Name)
                and f.value.id in instances
            ):
                cls = instances[f.value.id]
                if not hasattr(cls, f.attr):
                    bad.append(f"{cls.__name__} has no {f.attr}")
                    continue
                obj = getattr(cls, f.attr)
                if inspect.isfunction(obj):  # a plain method: bind ``self`` too
                    call = ast.Call(
                        func=f, args=[ast.Constant(None), *call.args], keywords=call.keywords
                    )
            elif isinstance(f, ast.Name) and f.id in space:
                obj = space[f.id]
            elif (
                isinstance(f, ast.Attribute)
                and isinstance(f.value, ast.Name)
                and f.value.id in space
            ):
                obj = getattr(space[f.value.id], f.attr, None)
                if obj is None:
                    bad.append(f"{ast.unparse(f)} does not exist")
                    continue
            else:
                continue
            if any(isinstance(a, ast.Starred) for a in call.args) or any(
                k.arg is None for k in call.keywords
            ):
                continue
            try:
                sig = inspect.signature(obj)
            except (TypeError, ValueError):
                continue
            try:
                sig.bind(*call.args, **{k.arg: k.value for k in call.keywords})
            except TypeError as e:
                bad.append(f"{ast.unparse(call)}: {e}")
    return bad


@pytest.mark.parametrize("module", sorted(DOCS))
def test_every_call_in_the_docstring_matches_its_signature(module: str) -> None:
    assert not _call_problems(module, DOCS[module])


@pytest.mark.parametrize("module", sorted(DOCS))
def test_every_import_and_name_in_the_docstring_exists(module: str) -> None:
    assert not _import_problems(DOCS[module])


@pytest.mark.parametrize("module", sorted(m for m in DOCS if cli_lines(DOCS[m])))
def test_every_command_line_in_the_docstring_parses(module: str) -> None:
    assert not [p for line in cli_lines(DOCS[module]) for p in problems(line)]


def test_the_checks_can_fail() -> None:
    assert _import_problems("    from andrea_diag.config import NoSuchThing")
    assert _import_problems("    from andrea_diag.config import RunConfig\n    RunConfig.nope")
    assert problems("andrea-diag cascade --no-such-flag 1")
    assert problems("andrea-diag no-such-command")
    assert not problems("andrea-diag cascade --size tiny --steps 3")
    doc = "    from andrea_diag.config import RunConfig\n    RunConfig(no_such_field=1)"
    assert _call_problems("andrea_diag/config.py", doc)
    doc = (
        "    from andrea_diag.config import RunConfig\n    c = RunConfig()\n    c.resolve(1, 2, 3)"
    )
    assert _call_problems("andrea_diag/config.py", doc)
