"""The one place where a value becomes HTML: format, then escape; links only to checked names.

    from andrea_diag.report.safe import esc, href, Html, script_json, figure_html
    f"<td>{esc(value)}</td>"                  # any type: None -> "-", 0.1234 -> "0.123", list -> text
    f"<td>{esc(lr, fmt='.3g')}</td>"          # a format spec; a value it does not fit is shown as text
    f"<a href='{href(cell, 'report.html')}'>" # ./<cell>/report.html, the cell a plain name
    Html("<b>x</b>")                          # markup built here from escaped parts: esc leaves it

Every page reads run directories someone else made (``rundir.py``), so every value is escaped
*after* formatting, whatever its type (``fmt()`` of a list gives its text, which is then
escaped). Two more things a grep for an attack would find are neutralised, though a browser
would not run them once escaped: ``javascript:``/``vbscript:`` (the colon becomes ``&#58;``)
and ``on<event>=`` (the ``=`` becomes ``&#61;``); the page reads the same. JSON embedded in a
``<script>`` has ``<``, ``>``, ``&``, ``=``, ``/`` and U+2028/9 as ``\\uXXXX`` escapes, so no
value can end the element or start one.

plotly draws a figure's text (trace names, legend, axis, subplot and colour-bar titles,
annotations, tick and hover labels) as its own pseudo-HTML, where ``<a href>`` is a link and
``<span style>`` restyles: :func:`figure_dict` is every figure as plotly.js and kaleido read it,
its strings through :func:`plotly_text`, so a name from a run dir is drawn as the text it is.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from andrea_diag.errors import HIDDEN, visible
from andrea_diag.report.arms import fmt as _fmt
from andrea_diag.rundir import check_component

_SCHEME = re.compile(r"(?i)(javascript|vbscript|livescript)(\s*):")
_HANDLER = re.compile(r"(?i)\b(on[a-z]+)(\s*)=")
# What a page shows as an escape (``\\u202e``, ``\\x1b``), never as itself: a bidi override or
# isolate reorders the text after it (an arm named "\\u202elabolg" reads as "global", and the
# sentence after it runs backwards), a zero-width space or BOM makes two names look alike, and a
# control character is drawn as nothing. errors.unsafe's set, less HTML's own white space; and
# a lone surrogate (a folder named in another encoding, read as "\udcff"), which no page can
# hold: UTF-8 has no bytes for it, so the page was never written.
_HIDDEN = re.compile(f"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f{HIDDEN}\ud800-\udfff]")
_JSON_SWAP = (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("=", "\\u003d"),
              ("\u2028", "\\u2028"), ("\u2029", "\\u2029"))  # fmt: skip


# The toolkit's own figures use these (hovertemplates: "<br>", "<extra></extra>"), kept as tags
# by plotly_text; without attributes they can break a line or set bold, never link or restyle.
_PLOTLY_TAG = re.compile(r"&lt;(/?(?:br|b|i|em|sub|sup|extra)\s*/?)&gt;", re.IGNORECASE)


class Html(str):
    """Markup assembled in this package from escaped parts: :func:`esc` passes it through."""


def neutralise(text: str) -> str:
    """Escaped text with ``javascript:`` and ``onerror=`` made inert for any later reader."""
    text = _SCHEME.sub(r"\1\2&#58;", text)
    return _HANDLER.sub(r"\1\2&#61;", text)


def esc(value: Any, fmt: str | Callable[[Any], str] | None = None) -> Html:
    """``value`` formatted (``fmt``: a format spec such as ``".3g"``, a function, or the
    report's compact :func:`~andrea_diag.report.arms.fmt`), then HTML-escaped."""
    if isinstance(value, Html):
        return value
    try:
        if callable(fmt):
            text = fmt(value)
        elif fmt and isinstance(value, (int, float)) and not isinstance(value, bool):
            text = format(value, fmt)
        else:
            text = _fmt(value)
    except (TypeError, ValueError, OverflowError):
        text = _fmt(value)  # a value the format does not fit is shown as it is
    if not isinstance(text, str):
        text = str(text)
    return Html(neutralise(html.escape(shown_text(text), quote=True)))


def shown_text(text: str) -> str:
    """``text`` with every character of :data:`_HIDDEN` as its visible escape."""
    return _HIDDEN.sub(lambda m: visible(m.group()), text)  # a lone surrogate too: \\udcff


def join(parts: list[Any], sep: str = ", ") -> Html:
    """``sep``-joined escaped values (a list from a run dir as text)."""
    return Html(esc(sep).join(esc(p) for p in parts))


def href(*names: str) -> Html:
    """A relative URL ``./a/b`` from plain names: each is checked (one path component, not
    ``..``) and percent-encoded, so no name can make it a ``javascript:`` or absolute URL."""
    parts = [quote(check_component(n, "link target"), safe="") for n in names]
    return Html(html.escape("./" + "/".join(parts), quote=True))


def script_json(obj: Any) -> str:
    """``obj`` as JSON safe to place inside a ``<script>`` element."""
    return json_safe(json.dumps(obj, default=str))


def json_safe(text: str) -> str:
    """JSON text with every character that could end or open an element escaped (``\\u``)."""
    for unsafe, safe in _JSON_SWAP:
        text = text.replace(unsafe, safe)
    return _SCHEME.sub(r"\1\2\\u003a", text)


def plotly_text(text: str) -> str:
    """``text`` as plotly draws it literally: ``&``, ``<`` and ``>`` as entities (plotly decodes
    them after reading its tags, so ``<a href=...>`` is shown, not linked), the attribute-less
    tags of ``_PLOTLY_TAG`` (``<br>``, ``<b>``, ``<sub>``, ...) kept; a character that would
    reorder or hide the text (:data:`_HIDDEN`) shown as its escape, as :func:`esc` shows it."""
    text = shown_text(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _PLOTLY_TAG.sub(r"<\1>", text)


def plotly_safe(obj: Any, key: str = "") -> Any:
    """Every string in a figure's JSON (``key``: the one holding it) through :func:`plotly_text`.

    All strings, not only the ones known to come from a run dir: a run's names reach figures
    inside the toolkit's own text (``f"{label}: mixture"``, subplot titles, hover text, the
    categories of a heatmap's axis) through a dozen figure builders, and marking them at each
    would leave the next builder to remember it. The toolkit's markup survives as the tags
    re-allowed above. d3 format strings (``tickformat``, ``hoverformat``) are left as they are:
    never drawn as text, ``<`` and ``>`` are alignments there."""
    if isinstance(obj, str):
        return obj if key.endswith("format") else plotly_text(obj)
    if isinstance(obj, dict):
        return {k: plotly_safe(v, str(k)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [plotly_safe(v, key) for v in obj]
    return obj


def figure_dict(fig: Any) -> dict[str, Any]:
    """A plotly figure as the JSON dict plotly.js reads (``data``, ``layout``), every string
    through :func:`plotly_safe`: for the page (:func:`figure_html`) and for kaleido's images."""
    import plotly.io as pio

    return plotly_safe(json.loads(pio.to_json(fig, validate=False, pretty=False, engine="json")))


def figure_html(fig: Any, div_id: str, config: dict[str, Any]) -> Html:
    """A plotly figure as a ``<div>`` + ``<script>`` without the bundle (linked once per page),
    in the form ``plotly.io.to_html`` writes.

    The figure's JSON (trace names, hover text, titles: values from run dirs) is
    :func:`figure_dict`, made safe for the ``<script>`` by :func:`json_safe`."""
    check_component(div_id, "figure id")
    fig_json = figure_dict(fig)
    ident = script_json(div_id)
    data, layout = script_json(fig_json.get("data", [])), script_json(fig_json.get("layout", {}))
    return Html(
        f'<div style="height:100%; width:100%;"><div id="{esc(div_id)}" class="plotly-graph-div" style="height:100%; '
        'width:100%;"></div>\n<script type="text/javascript">\n'
        "window.PLOTLYENV=window.PLOTLYENV || {};\n"
        f"if (document.getElementById({ident})) {{ Plotly.newPlot({ident}, {data}, "
        f"{layout}, {script_json(config)}); }}\n</script></div>"
    )
