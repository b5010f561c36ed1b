"""The checkout's root must not shadow an installed package.

``python -m pytest`` (the README's test command) and ``python -m andrea_diag`` put the working
directory first on ``sys.path``, so any folder at the root is importable by its name. The CUDA
sources once sat in ``kernels/``; transformers 5.25 added the Hugging Face ``kernels`` package
as a dependency and imports it when it is installed, got our folder instead, and every
``--hf-config`` and Trainer test failed on a fresh clone. The sources now live in ``csrc/``.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Folders that are ours to import (andrea_diag) or are never imported by name.
OURS = {"andrea_diag"}


def _importable_root_names() -> set[str]:
    """Names ``import NAME`` would take from the root ahead of an installed package: regular
    packages (a folder with ``__init__.py``) and ``.py`` files. A plain folder (``docs/``,
    ``build/``) is only a namespace package, which any installed regular package outranks."""
    names = set()
    for entry in ROOT.iterdir():
        if entry.name.startswith(".") or not entry.name.split(".")[0].isidentifier():
            continue
        if entry.is_dir() and (entry / "__init__.py").is_file():
            names.add(entry.name)
        elif entry.suffix == ".py":
            names.add(entry.stem)
    return names


def test_no_root_folder_takes_the_import_name_of_an_installed_distribution() -> None:
    installed = set(importlib.metadata.packages_distributions())
    names = (d.metadata["Name"] for d in importlib.metadata.distributions())
    installed |= {n.replace("-", "_").lower() for n in names if n}  # a broken dist-info: None
    shadowing = sorted((_importable_root_names() - OURS) & installed)
    assert not shadowing, f"root folders shadow installed packages: {shadowing}"


def test_the_cuda_sources_are_found_in_csrc_and_no_kernels_folder_is_back() -> None:
    from andrea_diag.clip.cuda import kernel_dir

    # Hugging Face's package is installed only where transformers pulls it in: the folder
    # itself is refused here, so the regression shows on every machine
    assert not (ROOT / "kernels").exists()
    assert kernel_dir() == ROOT / "csrc" and (kernel_dir() / "clip.cu").is_file()
