"""Rendering: the only place that words, rounds and escapes.

`render_markdown` (the report, Jinja2), `to_json` (its versioned JSON twin), `cycles_csv`
(every cycle's duration), `finding_text` / `notice_text` (sentences); perfdiff.render.html the
report as one self-contained HTML file (markdown-it-py, the optional extra perfdiff[html]).
"""
from perfdiff.render.cycles_csv import cycles_csv
from perfdiff.render.json_report import FORMAT, FORMAT_VERSION, read_comparison_json, to_json
from perfdiff.render.markdown import build_view, render_markdown
from perfdiff.render.wording import finding_text, notice_text

__all__ = ["FORMAT", "FORMAT_VERSION", "build_view", "cycles_csv", "finding_text", "notice_text",
           "read_comparison_json", "render_markdown", "to_json"]
