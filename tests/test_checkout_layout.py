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
    """Names ``import NAME`` would find at the root: folders (packages or PEP 420 namespace
    packages alike) and ``.py`` files, skipping dot-folders and metadata folders."""
    names = set()
    for entry in ROOT.iterdir():
        if entry.name.startswith(".") or entry.name.endswith(".egg-info"):
            continue
        if entry.is_dir() and entry.name.isidentifier():
            names.add(entry.name)
        elif entry.suffix == ".py" and entry.stem.isidentifier():
            names.add(entry.stem)
    return names


def test_no_root_folder_takes_the_import_name_of_an_installed_distribution() -> None:
    installed = set(importlib.metadata.packages_distributions())
    installed |= {
        d.metadata["Name"].replace("-", "_").lower() for d in importlib.metadata.distributions()
    }
    shadowing = sorted((_importable_root_names() - OURS) & installed)
    assert not shadowing, f"root folders shadow installed packages: {shadowing}"


def test_the_cuda_sources_are_found_in_csrc() -> None:
    from andrea_diag.clip.cuda import kernel_dir

    assert (kernel_dir() / "clip.cu").is_file()
    assert kernel_dir().name in {
        "csrc",
        "kernels",
    }  # the checkout's csrc/, or the wheel's andrea_diag/kernels
