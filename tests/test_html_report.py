"""`compare --html`: one self-contained HTML file, the Markdown report's first screen, its
pictures embedded, names as text; read by html.parser, and rendered in a headless Chromium
where one is installed."""
from __future__ import annotations

import html
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from conftest import EXAMPLES, run_cli

import perfdiff
from perfdiff.errors import InputError

from test_escaping import _run as hostile_run

CHROMIUM = next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p), None)


class Page(HTMLParser):
    """The parts of a page the tests read: every tag with its attributes, the text of each
    block (li, p, td, th, h1, h2), the rows of each table."""

    BLOCKS = ("li", "p", "td", "th", "h1", "h2", "h3", "summary", "title")

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.blocks: list[tuple[str, str]] = []
        self.tables: list[list[list[str]]] = []
        self._open: list[tuple[str, list[str]]] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        if tag in self.BLOCKS:
            self._open.append((tag, []))

    def handle_endtag(self, tag: str) -> None:
        if self._open and self._open[-1][0] == tag:
            _, parts = self._open.pop()
            text = " ".join("".join(parts).split())
            self.blocks.append((tag, text))
            if tag in ("td", "th"):
                self.tables[-1][-1].append(text)
            if self._open:  # an inline block's text is its parent's too
                self._open[-1][1].append(text)

    def handle_data(self, data: str) -> None:
        if self._open:
            self._open[-1][1].append(data)


def md_cells(line: str) -> list[str]:
    """A Markdown table row's cells as a reader sees them: unescaped."""
    cells = re.split(r"(?<!\\)\|", line.strip())[1:-1]
    return [" ".join(html.unescape(re.sub(r"\\(.)", r"\1", c)).split()) for c in cells]


def test_html_is_the_markdown_report_self_contained() -> None:
    comp = perfdiff.compare(EXAMPLES / "cpufreq" / "normal", EXAMPLES / "cpufreq" / "abnormal")
    text, md = comp.to_html(), comp.to_markdown(plots=["report.cycles.png"])
    page = Page(text)
    assert text.startswith("<!DOCTYPE html>")
    # Nothing fetched: no script, no external style, every picture a data: URI.
    tags = {t for t, _ in page.tags}
    assert not tags & {"script", "link", "iframe", "object", "embed"}
    imgs = [a for t, a in page.tags if t == "img"]
    assert len(imgs) == 4 and all(str(a["src"]).startswith("data:image/png;base64,iVBOR") for a in imgs)
    assert not any(str(v).startswith(("http:", "https:", "//", "file:")) for _, a in page.tags for v in a.values())
    # Links to the pictures go to them in the page.
    ids = {a.get("id") for a in imgs}
    hrefs = [a["href"] for t, a in page.tags if t == "a"]
    assert hrefs and all(h[1:] in ids for h in hrefs)
    # The first screen is the Markdown's: the verdict's lines, then the top table, cell by cell.
    verdict_md = md.split("**Verdict:**", 1)[1].split("\n\n", 2)[1].splitlines()
    lis = [t for tag, t in page.blocks if tag == "li"]
    for line in verdict_md:
        plain = " ".join(html.unescape(re.sub(r"\\(.)", r"\1", line[2:].replace("**", ""))).split())
        assert plain in lis
    assert "host CPU clock reduced: CPU clock 85.86 → 22.50 %" in lis[0]
    top_md = next(b for b in md.split("## 1.")[1].split("\n\n") if b.startswith("| # |")).splitlines()
    top_html = page.tables[1]
    assert top_html[0] == md_cells(top_md[0]) and top_html[1:] == [md_cells(x) for x in top_md[2:]]
    assert top_html[0][3] == "τ (pp of A cycle)"
    # The template's collapsible sections stay collapsible.
    assert ("summary", "All 14 rows, every column") in page.blocks


def test_names_are_text_not_tags(tmp_path: Path) -> None:
    a, b = hostile_run(tmp_path / "a", 1, 1.0), hostile_run(tmp_path / "b", 2, 1.4)
    text = perfdiff.compare(a, b).to_html(plots=False)
    assert "<script>" not in text and "alert(1)</script>" not in text
    page = Page(text)
    assert not {t for t, _ in page.tags} & {"script"}
    cells = [t for tag, t in page.blocks if tag == "td"]
    assert any("<script>alert(1)</script>" in c for c in cells)  # shown, as text
    assert any("kernel|with|pipes" in c for c in cells)


def test_cli_compare_and_render_write_html(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    n, a = EXAMPLES / "contention" / "normal", EXAMPLES / "contention" / "abnormal"
    out, js = tmp_path / "r.html", tmp_path / "r.json"
    code, _, err = run_cli(["compare", n, a, "-o", tmp_path / "r.md", "--json", js, "--html", out, "--no-plots"],
                           capsys)
    assert code == 0, err
    page = Page(out.read_text(encoding="utf-8"))
    assert any(t.startswith("host CPU contention: runq") for tag, t in page.blocks if tag == "li")
    assert not [t for t, _ in page.tags if t == "img"]
    again = tmp_path / "again.html"
    code, _, err = run_cli(["render", js, "-o", tmp_path / "again.md", "--html", again, "--no-plots"], capsys)
    assert code == 0, err
    assert again.read_text(encoding="utf-8") == out.read_text(encoding="utf-8")


def test_without_markdown_it_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "markdown_it", None)  # as if not installed
    comp = perfdiff.compare(EXAMPLES / "contention" / "normal", EXAMPLES / "contention" / "abnormal")
    with pytest.raises(InputError, match=r"perfdiff\[html\]"):
        comp.to_html(plots=False)
    n, a = EXAMPLES / "contention" / "normal", EXAMPLES / "contention" / "abnormal"
    code, _, err = run_cli(["compare", n, a, "--html", tmp_path / "r.html"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "markdown-it-py" in err
    assert not (tmp_path / "r.html").exists()


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium installed (chromium, chromium-browser, google-chrome)")
def test_a_headless_browser_renders_the_verdict(tmp_path: Path) -> None:
    """Chromium (the distribution's package) loads the file: the rendered DOM holds the verdict
    and the top table, and a screenshot of the first screen is drawn."""
    comp = perfdiff.compare(EXAMPLES / "cpufreq" / "normal", EXAMPLES / "cpufreq" / "abnormal")
    page = tmp_path / "report.html"
    page.write_text(comp.to_html(), encoding="utf-8")
    args = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,1000"]
    dom = subprocess.run([*args, "--dump-dom", page.as_uri()], capture_output=True, text=True, check=True).stdout
    rendered = Page(dom)
    assert any(t.startswith("host CPU clock reduced:") for tag, t in rendered.blocks if tag == "li")
    assert rendered.tables[1][1][1] == "Scheduler.get_next_batch_to_run"
    shot = tmp_path / "shot.png"
    subprocess.run([*args, f"--screenshot={shot}", page.as_uri()], capture_output=True, check=True)
    data = shot.read_bytes()
    assert data.startswith(b"\x89PNG") and len(data) > 20_000  # a page drawn, not a blank one
