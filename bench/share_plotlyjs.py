"""Rewrite published pages that inline plotly.js to link one shared copy per reports/ folder.

    python3 bench/share_plotlyjs.py reports/gpu-sweep reports/adaptive-h200 reports/bench-kernels

Each page's embedded bundle (``<script>/** plotly.js vX ... </script>``) is replaced by
``<script src='<relative path>/plotly.min.js'>``, and the bundle is written once at the folder's
root, as ``--plotly shared`` does for new pages (andrea_diag/report/plotlyjs.py). Pages stay
offline; a page moved out of its folder then needs the bundle. Refuses to mix two versions.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

MARK = "/**\n* plotly.js v"


def share(folder: Path) -> None:
    bundle_path = folder / "plotly.min.js"
    bundle: str | None = bundle_path.read_text("utf-8") if bundle_path.is_file() else None
    for page in sorted(folder.rglob("*.html")):
        s = page.read_text("utf-8")
        i = s.find(MARK)
        if i < 0:
            continue
        start = s.rfind("<script", 0, i)
        end = s.find("</script>", i)
        js = s[s.find(">", start) + 1 : end]
        if bundle is None:
            bundle = js
            bundle_path.write_text(js, "utf-8")
        elif js != bundle:
            sys.exit(f"{page}: a different plotly.js than {bundle_path}")
        rel = Path(os.path.relpath(bundle_path, page.parent)).as_posix()
        page.write_text(
            s[:start] + f"<script type='text/javascript' src='{rel}'>" + s[end:], "utf-8"
        )
        print(f"{page}: {len(s) / 1e6:.1f} MB -> {page.stat().st_size / 1e6:.2f} MB")


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        share(Path(arg))
