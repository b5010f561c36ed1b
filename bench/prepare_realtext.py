"""Real text for GPU runs, from Debian and PyPI packages (pilots 3 and 4 in MISSION.md).

    apt-get download bible-kjv bible-kjv-text fortunes-min    # into DL
    pip download --no-deps chatterbot-corpus -d DL
    python bench/prepare_realtext.py DL OUT
    andrea-diag sweep ... --source gutenberg=OUT/gutenberg --source hermes3-general=OUT/hermes3-general

- ``gutenberg``: the King James Bible (Project Gutenberg e-text #10, as Debian ships it), printed
  by the package's own ``bible`` program, verse labels stripped, one document per book;
- ``hermes3-general``: chatterbot-corpus English conversations as User/Assistant turns, plus
  the classic fortunes, one document per conversation file / fortune file.

Runs here (it needs ``dpkg-deb`` and an amd64 host to run ``bible``); nothing is downloaded.
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


def main(dl: Path, out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name, docs in (("gutenberg", kjv_books(dl, work)),
                           ("hermes3-general", conversations(dl, work))):  # fmt: skip
            folder = out / name
            folder.mkdir(parents=True, exist_ok=True)
            for i, (doc, text) in enumerate(docs.items()):
                (folder / f"{i:03d}-{doc}.txt").write_text(text, encoding="utf-8")
            size = sum(len(t.encode()) for t in docs.values())
            print(f"{folder}: {len(docs)} documents, {size / 1e6:.2f} MB")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python bench/prepare_realtext.py DOWNLOAD_DIR OUT_DIR")
    main(Path(sys.argv[1]), Path(sys.argv[2]))
