"""Static images of the report's charts (PNG or SVG) beside the HTML, for a paper or a PR.

    andrea-diag report runs/cascade-tiny-x --png        # runs/cascade-tiny-x/report-<chart>.png

Drawn by kaleido (plotly's own image exporter, version 1 or later) in an installed Chrome or
Chromium: the system one when there is one on PATH (Debian's ``chromium`` works), or the one
``BROWSER_PATH`` names, or one fetched with kaleido's ``kaleido_get_chrome``. kaleido 1.x is
about 0.6 MB downloaded (3 MB installed); 0.2.x bundled its own Chromium (an 80 MB wheel) and
plotly 6.1+ no longer drives it. Measured: see docs/integrations.md, "TensorBoard export and
static figures".

kaleido is called directly, not through ``plotly.io.write_images``, for two reasons: plotly's
call cannot turn MathJax off, so the browser would fetch it from a CDN (the HTML page has it off
too, and offline machines must work); and plotly's batch call collects a failed chart's error
and returns, where ``cancel_on_error=True`` makes it one error here. plotly.js itself comes
from the installed plotly package, so nothing is downloaded.
"""

from __future__ import annotations

import os
import re
import stat
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

from andrea_diag.errors import UserError
from andrea_diag.report.safe import figure_dict
from andrea_diag.rundir import atomic_write_bytes

FORMATS = ("png", "svg")
WIDTH = 1100  # px; the HTML page is at most 1400 px wide, so the charts keep their proportions
DEFAULT_HEIGHT = 420  # every figure sets its own height; this is for one that does not
SCALE = 1.0  # 1 px per layout px keeps a 2-arm line chart near 100 KB as PNG
INSTALL_HINT = 'pip install "kaleido>=1" (the "figures" extra, about 3 MB installed)'
BROWSER_HINT = (
    "install Chromium (Debian/Ubuntu: apt-get install chromium) or Chrome, set BROWSER_PATH to "
    "one, or fetch one with kaleido_get_chrome"
)


def figure_slug(section: str) -> str:
    """The section's name as it appears in div ids and image file names ("Gradient norm" ->
    "gradient-norm")."""
    return re.sub(r"[^a-z0-9]+", "-", section.lower()).strip("-")


def image_paths(html_path: Path, sections: list[str], fmt: str) -> list[Path]:
    """Where each chart's image goes: ``<html stem>-<section>.<fmt>`` beside the page."""
    return [html_path.with_name(f"{html_path.stem}-{figure_slug(s)}.{fmt}") for s in sections]


def _kaleido(html_path: Path) -> Any:
    """The kaleido module (1.x), or a UserError saying the page was written but no images."""
    try:
        import kaleido
    except ImportError:
        raise UserError(
            f"{html_path} was written, but static images need kaleido", hint=INSTALL_HINT
        ) from None
    version = metadata.version("kaleido")
    if int(version.split(".")[0]) < 1:
        raise UserError(
            f"{html_path} was written, but kaleido {version} is too old for images here",
            hint=INSTALL_HINT,
        )
    return kaleido


def write_images(figures: list[tuple[str, Any]], html_path: Path, formats: list[str]) -> list[Path]:
    """Write every (section, plotly figure) in every format beside ``html_path``, in one browser
    session; returns the files. UserError when kaleido or a browser is missing or fails.

    kaleido writes into a private temp folder, never to the run: it opens its path and writes
    into it, through a hard link planted there (``ln /elsewhere RUN/report-<chart>.svg``) as
    through a symlink. Each image then reaches its place as the page does: a fresh temp file in
    the same folder and a rename (``atomic_write_bytes``), which replaces any link."""
    bad = [f for f in formats if f not in FORMATS]
    if bad:
        raise UserError(f"unknown image format {bad[0]!r}", hint=f"one of: {', '.join(FORMATS)}")
    kaleido = _kaleido(html_path)
    paths = [p for fmt in formats for p in image_paths(html_path, [s for s, _ in figures], fmt)]
    for path in paths:  # before the browser starts: a folder or a FIFO there is one line
        _check_target(path)
    with tempfile.TemporaryDirectory(prefix="andrea-diag-images-") as scratch:
        specs = []
        for fmt in formats:
            for _, fig in figures:
                height = fig.layout.height or DEFAULT_HEIGHT
                opts = {"format": fmt, "width": WIDTH, "height": height, "scale": SCALE}
                drawn = Path(scratch) / f"{len(specs)}.{fmt}"
                specs.append({"fig": figure_dict(fig), "path": drawn, "opts": opts})
        _draw(kaleido, specs, html_path)
        for spec, path in zip(specs, paths, strict=True):
            atomic_write_bytes(path, spec["path"].read_bytes())
    return paths


def _check_target(path: Path) -> None:
    """Refuse an image path that holds something a rename should not replace (a folder, a
    FIFO); a link or a regular file there is replaced, never written through."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as e:
        raise UserError(f"cannot look at {path} ({e.strerror or e})") from None
    if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        raise UserError(f"{path} is not a regular file", hint="refusing to write an image there")


def _draw(kaleido: Any, specs: list[dict[str, Any]], html_path: Path) -> None:
    """Draw every spec to its ``path`` in one browser session, or one UserError."""
    from kaleido.errors import BrowserFailedError, ChromeNotFoundError, KaleidoError

    try:
        kaleido.write_fig_from_object_sync(specs, kopts={"mathjax": False}, cancel_on_error=True)
    except ChromeNotFoundError:
        raise UserError(
            f"{html_path} was written, but no Chrome or Chromium was found to draw images",
            hint=BROWSER_HINT,
        ) from None
    except (BrowserFailedError, KaleidoError, OSError, TimeoutError) as exc:
        raise UserError(
            f"{html_path} was written, but the browser could not draw the images ({exc})",
            hint=BROWSER_HINT,
        ) from None
