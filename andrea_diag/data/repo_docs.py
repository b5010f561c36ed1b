"""The ``repo-docs`` source's reader: installed packages' READMEs, then stdlib API listings.

    >>> from andrea_diag.data.repo_docs import repo_docs
    >>> docs, origin = repo_docs(target_bytes=20_000)
    >>> origin.startswith("installed package docs")
    True

How the pinned ``repo-docs`` text (:mod:`andrea_diag.data.pinned`) was frozen
(``bench/freeze_sources.py``); a run reads it only where no pinned file exists. The listings are
made the same way on every machine: defaults whose repr depends on the process become ``...``
and object addresses are dropped.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import re
import warnings

# The toolkit's own dependencies first (always installed with it), then their usual companions.
# Missing ones are skipped; `origin` lists what was used.
DOC_PACKAGES = (
    "torch", "numpy", "pandas", "pyarrow", "plotly", "typer", "rich", "tokenizers",
    "nvidia-ml-py", "click", "markdown-it-py", "pygments", "pytest", "hypothesis",
    "pytest-benchmark", "huggingface-hub", "narwhals", "packaging", "python-dateutil",
    "filelock", "fsspec", "jinja2", "sympy", "networkx",
)  # fmt: skip
# Stdlib modules whose docstrings become API listings. Pure, side-effect-free imports only
# (no tkinter/turtle/antigravity); the order is fixed so the bytes are too.
DOC_MODULES = (
    "argparse", "collections", "json", "os", "pathlib", "re", "string", "textwrap", "itertools",
    "functools", "typing", "dataclasses", "logging", "subprocess", "shutil", "tempfile", "csv",
    "datetime", "decimal", "fractions", "statistics", "random", "math", "heapq", "bisect",
    "array", "struct", "io", "contextlib", "abc", "enum", "copy", "pickle", "sqlite3",
    "http.client", "urllib.parse", "zipfile", "tarfile", "gzip", "hashlib", "hmac", "secrets",
    "base64", "calendar", "difflib", "unicodedata", "locale", "gettext", "threading", "queue",
    "asyncio", "socket", "select", "signal", "unittest", "doctest", "pdb", "timeit",
    "traceback", "warnings", "inspect", "ast", "dis", "operator", "weakref", "glob", "fnmatch",
    "configparser", "xml.etree.ElementTree", "html", "mimetypes", "uuid", "ipaddress", "sched",
    "platform", "types", "numbers", "cmath", "zlib", "codecs", "pprint", "reprlib", "shelve",
    "tokenize", "keyword", "optparse", "getopt", "fileinput", "filecmp", "stat", "lzma", "bz2",
    "plistlib", "colorsys", "graphlib", "contextvars", "concurrent.futures", "multiprocessing",
    "selectors", "smtplib", "ftplib", "imaplib", "poplib", "xmlrpc.client", "cmd", "shlex",
)  # fmt: skip
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")  # reprs like <object at 0x7f..> differ per process


def _package_readmes() -> tuple[list[str], list[str]]:
    docs, used = [], []
    for name in DOC_PACKAGES:
        try:
            meta = importlib.metadata.metadata(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        body = (meta.get_payload() or meta.get("Description") or "").strip()  # type: ignore[attr-defined]
        if len(body) < 200:  # a one-line summary is not documentation
            continue
        docs.append(f"# {meta['Name']} {meta['Version']}\n\n{body}\n")
        used.append(f"{meta['Name']}=={meta['Version']}")
    return docs, used


def _first_paragraph(doc: str) -> str:
    return doc.strip().split("\n\n")[0].replace("\n", " ")


_LITERALS = (int, float, complex, str, bytes, bool, type(None))


def _plain_default(value: object) -> object:
    """Defaults whose repr depends on process state (``sys.stdout`` is a different object under
    a test runner, an object repr may carry an address) become ``...``: same bytes everywhere."""
    if isinstance(value, _LITERALS) or (
        isinstance(value, tuple) and all(isinstance(v, _LITERALS) for v in value)
    ):
        return value
    return ...


def _signature(obj: object) -> str:
    try:
        sig = inspect.signature(obj)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "(...)"
    params = [
        p.replace(default=_plain_default(p.default)) if p.default is not p.empty else p
        for p in sig.parameters.values()
    ]
    return _ADDRESS.sub("", str(sig.replace(parameters=params, return_annotation=sig.empty)))


def _module_listing(module_name: str) -> str | None:
    """A list-structured API page for one module: intro, then one bullet per public name."""
    # Reading docstrings of deprecated aliases (typing.io, ...) warns; the text is what we want.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return _module_listing_unchecked(module_name)


def _module_listing_unchecked(module_name: str) -> str | None:
    try:
        mod = importlib.import_module(module_name)
    except Exception:  # an interpreter built without e.g. sqlite3: skip, sha256 records it
        return None
    lines = [f"## Module `{module_name}`", "", (inspect.getdoc(mod) or "").strip(), ""]
    members = sorted(
        (n, o)
        for n, o in vars(mod).items()
        if not n.startswith("_") and getattr(o, "__module__", None) == mod.__name__
    )
    funcs = [(n, o) for n, o in members if inspect.isroutine(o)]
    classes = [(n, o) for n, o in members if inspect.isclass(o)]
    if funcs:
        lines += ["### Functions", ""]
        for n, o in funcs:
            # Functions keep their whole docstring, indented under the bullet: nested lists
            # and parameter tables are the "list-structured" shape this source stands for.
            doc = (inspect.getdoc(o) or "").strip()
            lines.append(f"- `{n}{_signature(o)}`")
            lines += [f"    {d}".rstrip() for d in doc.splitlines()]
        lines.append("")
    for n, cls in classes:
        lines += [f"### class `{n}`", "", _first_paragraph(inspect.getdoc(cls) or ""), ""]
        for mn, mo in sorted(vars(cls).items()):
            if mn.startswith("_") or not callable(mo):
                continue
            doc = inspect.getdoc(mo) or ""
            lines.append(f"- `{n}.{mn}{_signature(mo)}`: {_first_paragraph(doc)}".rstrip(": "))
        lines.append("")
    return _ADDRESS.sub("", "\n".join(lines))


def repo_docs(target_bytes: int) -> tuple[tuple[str, ...], str]:
    """Real documentation up to ``target_bytes``: the documents and their origin line."""
    docs, used = _package_readmes()
    total = sum(len(d.encode("utf-8")) for d in docs)
    n_modules = 0
    for name in DOC_MODULES:
        if total >= target_bytes:
            break
        page = _module_listing(name)
        if page:
            docs.append(page)
            total += len(page.encode("utf-8"))
            n_modules += 1
    if total > target_bytes:  # trim the last page so the size stays near the target
        over = total - target_bytes
        docs[-1] = (
            docs[-1]
            .encode("utf-8")[: max(0, len(docs[-1].encode()) - over)]
            .decode("utf-8", "ignore")
        )
    origin = f"installed package docs ({', '.join(used)}) + {n_modules} stdlib module API listings"
    return tuple(d for d in docs if d.strip()), origin
