"""The HTML report: one self-contained file to attach to a ticket.

It is the Markdown report's own text (render_markdown, from the same ComparisonResult), turned
into HTML by markdown-it-py (CommonMark with tables; the optional extra `perfdiff[html]`), so
its first screen is the Markdown's: the verdict, then the top table.  Its pictures are embedded
as data: URIs, its style is inline; it has no script and fetches nothing.  Raw HTML in the
Markdown is not passed through (every name was escaped already; a name is text, never a tag):
only the template's own collapsible sections (`<details>`) are restored.
"""
from __future__ import annotations

import base64
import html
import re
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import unquote

from perfdiff.analyze.result import ComparisonResult
from perfdiff.errors import InputError
from perfdiff.render.markdown import render_markdown

STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1b1f23;
       max-width: 1200px; margin: 1.5em auto; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.25em; border-bottom: 1px solid #d0d7de; padding-bottom: .2em; }
table { border-collapse: collapse; margin: .6em 0; display: block; overflow-x: auto; max-width: 100%; }
th, td { border: 1px solid #d0d7de; padding: .25em .5em; text-align: left; vertical-align: top; }
th { background: #f6f8fa; } tr:nth-child(2n) td { background: #fbfcfd; }
code { background: #f6f8fa; padding: 0 .25em; border-radius: 3px; }
blockquote { margin: .6em 0; padding: .2em 1em; border-left: 4px solid #d29922; background: #fff8e5; }
img { max-width: 100%; height: auto; display: block; margin: .6em 0; }
details { margin: .6em 0; } summary { cursor: pointer; color: #0969da; }
"""

# The template's collapsible sections, as markdown-it renders them without raw HTML.
_OPEN = re.compile(r"<p>&lt;details&gt;&lt;summary&gt;(.*?)&lt;/summary&gt;</p>")
_CLOSE = re.compile(r"<p>&lt;/details&gt;</p>")


def _parser() -> Any:
    try:
        from markdown_it import MarkdownIt
    except ImportError:
        raise InputError("--html needs markdown-it-py: pip install 'perfdiff[html]'") from None
    # No raw HTML, no typographer: the Markdown's text as written, its tables as tables.
    return MarkdownIt("commonmark", {"html": False}).enable("table")


def _walk(tokens: list[Any]) -> Iterator[Any]:
    for t in tokens:
        yield t
        if t.children:
            yield from _walk(t.children)


def _anchor(name: str) -> str:
    """The id of a picture: "plot-cycles" for report.cycles.png."""
    parts = name.rsplit(".", 2)
    return "plot-" + re.sub(r"[^A-Za-z0-9_-]", "-", parts[-2] if len(parts) == 3 else name)


def render_html(result: ComparisonResult, *, top: int = 25, plots: Mapping[str, bytes] | None = None,
                plots_note: str | None = None) -> str:
    """The HTML report of `result`; `plots`: the pictures (file name → PNG bytes) the Markdown
    would link beside it, embedded here; `plots_note`: why there are none.  InputError where
    markdown-it-py is not installed."""
    md = _parser()
    pngs = dict(plots or {})
    text = render_markdown(result, top=top, plots=list(pngs), plots_note=plots_note)
    tokens = md.parse(text)
    for t in _walk(tokens):
        if t.type == "image":
            name = unquote(str(t.attrGet("src") or ""))
            if name in pngs:
                t.attrSet("src", "data:image/png;base64," + base64.b64encode(pngs[name]).decode("ascii"))
                t.attrSet("id", _anchor(name))
        elif t.type == "link_open":
            name = unquote(str(t.attrGet("href") or ""))
            if name in pngs:  # "Pictures: [cycle-time distribution](…)" goes to the picture below
                t.attrSet("href", "#" + _anchor(name))
    body = md.renderer.render(tokens, md.options, {})
    body = _CLOSE.sub("</details>", _OPEN.sub(r"<details><summary>\1</summary>", body))
    c = result.analysis
    title = html.escape(f"perfdiff: {c.normal.name} (normal) vs {c.abnormal.name} (abnormal)")
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            # Nothing is fetched: no script, no external style, pictures inline.
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; img-src data:; "
            "style-src 'unsafe-inline'\">\n"
            f"<title>{title}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n{body}</body>\n</html>\n")
