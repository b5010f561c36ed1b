"""All of the real text, not just the default ~1 MB a source, for long GPU runs.

The default sources are already real text where the toolkit's data packages are installed
(andrea_diag/data/real_sources.py). Runs that want every byte (4.2 MB of King James Bible,
13 MB of conversations) write them out whole and pass them as overrides:

    python bench/prepare_realtext.py OUT          # from the installed packages
    andrea-diag sweep ... --source gutenberg=OUT/gutenberg --source hermes3-general=OUT/hermes3-general

Fallback where the PyPI packages cannot be installed: Debian's packages (pilots 3 and 4 in
MISSION.md), read here with ``dpkg-deb`` (and an amd64 host to run ``bible``); nothing is
downloaded by this script:

    apt-get download bible-kjv bible-kjv-text fortunes-min    # into DL
    pip download --no-deps chatterbot-corpus -d DL
    python bench/prepare_realtext.py DL OUT

- ``gutenberg``: the King James Bible (Project Gutenberg e-text #10, as Debian ships it), printed
  by the package's own ``bible`` program, verse labels stripped, one document per book;
- ``hermes3-general``: chatterbot-corpus English conversations as User/Assistant turns, plus
  the classic fortunes, one document per conversation file / fortune file.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import yaml


def kjv_books(dl: Path, work: Path) -> dict[str, str]:
    for deb in dl.glob("bible-kjv*.deb"):
        subprocess.run(["dpkg-deb", "-x", str(deb), str(work)], check=True)
    out = subprocess.run(
        [str(work / "usr/bin/bible"), "-f", "-p", str(work / "usr/lib"), "-m", "40000",
         "gen1:1-rev22:21"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    books: dict[str, list[str]] = {}
    for line in out.splitlines():
        m = re.match(r"^(\w+?)(\d+):(\d+) (.*)$", line)
        if m:
            books.setdefault(m.group(1), []).append(m.group(4).strip())
    return {b: " ".join(v) + "\n" for b, v in books.items()}


def conversations(dl: Path, work: Path) -> dict[str, str]:
    [wheel] = list(dl.glob("chatterbot_corpus-*.whl"))
    zipfile.ZipFile(wheel).extractall(work / "cb")
    docs = {}
    for f in sorted((work / "cb/chatterbot_corpus/data/english").glob("*.yml")):
        data = yaml.safe_load(f.read_text(encoding="utf-8")) or {}
        turns = []
        for conv in data.get("conversations") or []:
            lines = [
                f"{'User' if i % 2 == 0 else 'Assistant'}: {str(t).strip()}"
                for i, t in enumerate(conv)
            ]
            turns.append("\n".join(lines))
        docs[f"chat-{f.stem}"] = "\n\n".join(turns) + "\n"
    for deb in dl.glob("fortunes-min*.deb"):
        subprocess.run(["dpkg-deb", "-x", str(deb), str(work)], check=True)
    for f in sorted((work / "usr/share/games/fortunes").glob("*")):
        if f.suffix == "" and f.is_file():
            docs[f"fortunes-{f.name}"] = f.read_text(encoding="utf-8", errors="replace")
    return docs


def write(out: Path, name: str, docs: dict[str, str]) -> None:
    """One .txt file per document, numbered so a folder override reads them in this order."""
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    for i, (doc, text) in enumerate(docs.items()):
        (folder / f"{i:03d}-{doc}.txt").write_text(text, encoding="utf-8")
    size = sum(len(t.encode()) for t in docs.values())
    print(f"{folder}: {len(docs)} documents, {size / 1e6:.2f} MB")


def from_installed(out: Path) -> None:
    """Every document of the installed data packages (the same readers as the defaults)."""
    from andrea_diag.data.real_sources import RealText, real_text

    for name in ("gutenberg", "hermes3-general"):
        got = real_text(name, None)  # None: no byte target, all of it
        if not isinstance(got, RealText):
            sys.exit(f"{name}: {got}; install the toolkit's dependencies or use the Debian path")
        print(f"{name}: {got.origin}")
        write(out, name, {f"doc{i:05d}": d for i, d in enumerate(got.documents)})


def main(dl: Path, out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        write(out, "gutenberg", kjv_books(dl, work))
        write(out, "hermes3-general", conversations(dl, work))


if __name__ == "__main__":
    if len(sys.argv) == 2:
        from_installed(Path(sys.argv[1]))
    elif len(sys.argv) == 3:
        main(Path(sys.argv[1]), Path(sys.argv[2]))
    else:
        sys.exit("usage: python bench/prepare_realtext.py [DEBIAN_DOWNLOAD_DIR] OUT_DIR")
