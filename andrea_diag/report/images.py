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

import re
from importlib import metadata
from pathlib import Path
from typing import Any

from andrea_diag.errors import UserError

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
    session; returns the files. UserError when kaleido or a browser is missing or fails."""
    bad = [f for f in formats if f not in FORMATS]
    if bad:
        raise UserError(f"unknown image format {bad[0]!r}", hint=f"one of: {', '.join(FORMATS)}")
    kaleido = _kaleido(html_path)
    from kaleido.errors import BrowserFailedError, ChromeNotFoundError, KaleidoError

    specs, paths = [], []
    for fmt in formats:
        for path, (_, fig) in zip(
            image_paths(html_path, [s for s, _ in figures], fmt), figures, strict=True
        ):
            height = fig.layout.height or DEFAULT_HEIGHT
            opts = {"format": fmt, "width": WIDTH, "height": height, "scale": SCALE}
            specs.append({"fig": fig.to_dict(), "path": path, "opts": opts})
            paths.append(path)
    for path in paths:  # kaleido opens the path itself: never through a link out of the run
        if path.is_symlink():
            path.unlink()
        elif path.exists() and not path.is_file():
            raise UserError(
                f"{path} is not a regular file", hint="refusing to write an image there"
            )
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
    return paths
