"""Pictures beside the report: valid, small, deterministic PNGs linked by relative path;
none with --no-plots; a clear note without matplotlib."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import EXAMPLES, run_cli

PAIR = (EXAMPLES / "cpufreq" / "normal", EXAMPLES / "cpufreq" / "abnormal")
PNG = b"\x89PNG\r\n\x1a\n"


def test_plots_are_linked_valid_small_and_deterministic(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for run in ("one", "two"):
        (tmp_path / run).mkdir()
        code, _, err = run_cli(["compare", *PAIR, "-o", tmp_path / run / "r.md"], capsys)
        assert code == 0, err
    md = (tmp_path / "one" / "r.md").read_text()
    linked = re.findall(r"\]\(([^)]+\.png)\)", md)
    assert set(linked) == {"r.cycles.png", "r.timeline.png", "r.suspects.png", "r.context.png"}
    for name in set(linked):
        data = (tmp_path / "one" / name).read_bytes()
        assert data.startswith(PNG) and len(data) < 200_000
        assert data == (tmp_path / "two" / name).read_bytes()  # the same input, the same bytes


def test_no_plots_writes_none(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["compare", *PAIR, "-o", tmp_path / "r.md", "--no-plots"], capsys)
    assert code == 0, err
    assert not list(tmp_path.glob("*.png")) and ".png" not in (tmp_path / "r.md").read_text()


def test_without_matplotlib_the_report_says_how_to_get_plots(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError("No module named 'matplotlib'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    code, _, err = run_cli(["compare", *PAIR, "-o", tmp_path / "r.md"], capsys)
    assert code == 0, err
    assert "Pictures: plots need matplotlib: pip install 'perfdiff\\[plot\\]'" in (tmp_path / "r.md").read_text()
    assert not list(tmp_path.glob("*.png"))


def test_suspects_and_context_panels_follow_the_analysis() -> None:
    """The suspects' panels are the significant functions of the table, in its order; the
    context panels the significant context metrics; a null pair has neither."""
    import perfdiff

    c = perfdiff.compare(*PAIR)
    a = c.analysis
    suspects = [t for t in a.traces if t.kind == "function"]
    firsts = []
    for r in a.details:
        f = a.functions[r.func]
        if f.q_t <= a.alpha and (f.name, f.device) not in firsts:
            firsts.append((f.name, f.device))
    assert [(t.name, t.device) for t in suspects] == firsts[:4]
    assert len(suspects[0].y_n) == a.normal.n_cycles and len(suspects[0].y_a) == a.abnormal.n_cycles
    assert abs(suspects[0].y_a.mean() - a.functions[a.details[0].func].t_a_us) < 1e-6 * suspects[0].y_a.mean()
    context = {t.name for t in a.traces if t.kind == "metric"}
    assert "cpu_frequency" in context
    null = perfdiff.compare(PAIR[0], PAIR[0])
    assert null.analysis.traces == ()


def test_a_dollar_in_a_name_is_plain_text(tmp_path: Path) -> None:
    """Names are user data: '$' must not switch matplotlib into mathtext."""
    import numpy as np

    from perfdiff.analyze.records import Trace
    from perfdiff.render.plots import _panels, _pyplot

    x = np.arange(3.0)
    t = Trace("function", r"op$\\nosuch{x}$ & $a_{$", "GPU 0", "µs", x, x, x, x * 2)
    assert _panels(_pyplot(), [t], tmp_path / "p.png", "t", "cycle") == "p.png"
    assert (tmp_path / "p.png").read_bytes().startswith(PNG)


def test_panels_of_names_alike_have_titles_apart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two suspects whose names differ only in a template argument in the middle get two
    panel titles, each with the argument that tells them apart."""
    import numpy as np

    from perfdiff.analyze.records import Trace
    from perfdiff.render import plots

    x = np.arange(3.0)
    kernel = "void gemm_kernel<" + "float, " * 8 + "{}>(" + "const float*, " * 8 + "int)"
    traces = [Trace("function", kernel.format(k), "GPU 0", "µs", x, x, x, x * 2) for k in ("2ul", "5ul")]
    titles: list[str] = []
    plt = plots._pyplot()
    real_subplots = plt.subplots

    def subplots(*a, **k):
        fig, axes = real_subplots(*a, **k)
        for ax in axes.flat:
            monkeypatch.setattr(ax, "set_title", lambda s, **_: titles.append(s))
        return fig, axes

    monkeypatch.setattr(plt, "subplots", subplots)
    plots._panels(plt, traces, tmp_path / "p.png", "t", "cycle")
    assert len(titles) == 2 and titles[0] != titles[1]
    assert "2ul" in titles[0] and "5ul" in titles[1]


def test_legends_stand_outside_the_data_and_ecdfs_start_at_zero(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A legend inside the axes hid the abnormal run's peak (HTA's pair, cycle 5): every
    figure's legend is the figure's, under its plots; an ECDF starts at 0, not at 1/n."""
    import perfdiff
    from perfdiff.parallel import Parallel
    from perfdiff.render import plots

    figures = []
    real_write = plots._write

    def keep(fig, plt, path):
        figures.append((path.name, [ax for ax in fig.axes if ax.get_visible()], list(fig.legends)))
        return real_write(fig, plt, path)

    monkeypatch.setattr(plots, "_write", keep)
    plots.write_plots(perfdiff.compare(*PAIR).result, tmp_path, "r", Parallel.serial())  # _write is patched in this process
    assert {name for name, _, _ in figures} == {"r.cycles.png", "r.timeline.png", "r.suspects.png", "r.context.png"}
    for name, axes, legends in figures:
        assert len(legends) == 1 and all(ax.get_legend() is None for ax in axes), name
        assert [t.get_text() for t in legends[0].get_texts()][1].startswith("abnormal"), name
    ecdf = next(axes for name, axes, _ in figures if name == "r.cycles.png")[0]
    assert all(line.get_ydata()[0] == 0.0 for line in ecdf.get_lines())


def test_links_to_pictures_survive_any_report_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`-o "r#1 (x).md"` linked "r#1 (x).cycles.png" as written: "#" began a fragment and ")"
    ended the link.  The targets are percent-encoded and name the files written."""
    from urllib.parse import unquote

    code, _, err = run_cli(["compare", *PAIR, "-o", tmp_path / "r#1 (x).md"], capsys)
    assert code == 0, err
    md = (tmp_path / "r#1 (x).md").read_text()
    targets = re.findall(r"\]\(([^)\s]+\.png)\)", md)
    assert targets and all("#" not in t and "(" not in t and " " not in t for t in targets)
    assert all((tmp_path / unquote(t)).is_file() for t in targets)


def test_pictures_drawn_in_workers_are_the_pictures_drawn_here(tmp_path: Path) -> None:
    """Each picture is drawn in a forked worker where there are cores: the same files, the
    same bytes as drawn one after the other in this process."""
    import perfdiff
    from perfdiff.parallel import Parallel
    from perfdiff.render import plots

    result = perfdiff.compare(*PAIR).result
    (tmp_path / "here").mkdir()
    (tmp_path / "forked").mkdir()
    here = plots.write_plots(result, tmp_path / "here", "r", Parallel.serial())
    forked = plots.write_plots(result, tmp_path / "forked", "r", Parallel(cores=2))
    assert here == forked == ["r.cycles.png", "r.timeline.png", "r.suspects.png", "r.context.png"]
    for name in here:
        assert (tmp_path / "here" / name).read_bytes() == (tmp_path / "forked" / name).read_bytes()


def _boxes(fig) -> list[tuple[str, object]]:
    """The extents of what a reader reads on a figure: titles, axis labels, tick labels, the legend."""
    r = fig.canvas.get_renderer()
    out = [("suptitle", fig._suptitle.get_window_extent(r))] if fig._suptitle is not None else []
    for i, ax in enumerate(a for a in fig.axes if a.get_visible()):
        for what, text in (("title", ax.title), ("xlabel", ax.xaxis.label), ("ylabel", ax.yaxis.label),
                           ("xoffset", ax.xaxis.offsetText), ("yoffset", ax.yaxis.offsetText)):
            if text.get_text():
                out.append((f"{what} {i}", text.get_window_extent(r)))
        for k, axis in enumerate(("x", "y")):
            lo, hi = sorted(getattr(ax, f"get_{axis}lim")())
            ticks = [t.get_window_extent(r) for t in getattr(ax, f"get_{axis}ticklabels")()
                     if t.get_text() and lo <= t.get_position()[k] <= hi]  # drawn: in the view
            out += [(f"{axis}ticks {i}", b) for b in ticks]
    return out + [("legend", leg.get_window_extent(r)) for leg in fig.legends]


def test_every_label_stands_inside_its_figure_and_apart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pictures are laid out with fixed margins (matplotlib's constrained layout took half
    of their drawing time): no title, axis label, tick label or legend is cut by the figure's
    edge or lies on another's, also with wide tick labels and two rows of panels."""
    import numpy as np

    import perfdiff
    from perfdiff.analyze.records import Trace
    from perfdiff.parallel import Parallel
    from perfdiff.render import plots

    seen: list[str] = []
    real_write = plots._write

    def check(fig, plt, path):
        fig.canvas.draw()
        edge = fig.bbox
        boxes = _boxes(fig)
        for name, b in boxes:
            assert edge.x0 <= b.x0 and b.x1 <= edge.x1 + 1 and edge.y0 <= b.y0 and b.y1 <= edge.y1 + 1, \
                (path.name, name)
        for i, (n1, b1) in enumerate(boxes):
            for n2, b2 in boxes[i + 1:]:
                if n1.split()[0] != n2.split()[0] or n1 != n2 and "ticks" not in n1:
                    assert not b1.overlaps(b2), (path.name, n1, n2)
        seen.append(path.name)
        return real_write(fig, plt, path)

    monkeypatch.setattr(plots, "_write", check)
    plots.write_plots(perfdiff.compare(*PAIR).result, tmp_path, "r", Parallel.serial())
    x = np.arange(300.0)
    wide = [Trace("metric", f"host_mem_used_{k}", "Host", "B", x, 3.2e10 + x * 1e6, x, 3.3e10 + x * 1e6)
            for k in range(3)]
    plots._panels(plots._pyplot(), wide, tmp_path / "wide.png", "t", "s since the first cycle")
    assert sorted(seen) == ["r.context.png", "r.cycles.png", "r.suspects.png", "r.timeline.png", "wide.png"]


def test_pictures_asked_for_are_drawn_by_a_process_started_beside_the_analysis(tmp_path: Path) -> None:
    """compare(pictures=True) starts the process that draws them at once, so matplotlib's
    import overlaps loading and comparing: this process never imports matplotlib, and the
    pictures are those drawn here."""
    import subprocess
    import sys

    from perfdiff.parallel import Parallel
    from perfdiff.render import plots

    script = ("import sys, perfdiff\n"
              f"c = perfdiff.compare({str(PAIR[0])!r}, {str(PAIR[1])!r}, pictures=True)\n"
              "assert 'matplotlib' not in sys.modules\n"
              f"print(c.write_plots({str(tmp_path / 'painted')!r}, 'r'))\n"
              "assert 'matplotlib' not in sys.modules\n")
    (tmp_path / "painted").mkdir()
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    painted = eval(out)  # noqa: S307 - the list of names printed above
    import perfdiff

    (tmp_path / "here").mkdir()
    here = plots.write_plots(perfdiff.compare(*PAIR).result, tmp_path / "here", "r", Parallel.serial())
    assert painted == here
    for name in here:
        assert (tmp_path / "here" / name).read_bytes() == (tmp_path / "painted" / name).read_bytes()


def test_the_painter_starts_before_the_runs_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """compare(pictures=True) forks the painter first, so matplotlib's import overlaps the
    loading too, not only the analysis."""
    from perfdiff import api
    from perfdiff.parallel import Parallel
    from perfdiff.render import plots

    seen: list[str] = []
    start, load = plots.start_painter, api._load_side

    def started():
        seen.append("painter")
        return start()

    def loading(*args, **kwargs):
        seen.append("load")
        return load(*args, **kwargs)

    monkeypatch.setattr(plots, "start_painter", started)
    monkeypatch.setattr(api, "_load_side", loading)
    comp = api.compare(*PAIR, pictures=True, parallel=Parallel.serial())
    assert seen == ["painter", "load", "load"]
    assert comp._painter is not None
    comp._painter.close()


def test_a_process_that_reads_a_result_imports_no_scipy(tmp_path: Path) -> None:
    """The painter unpickles the comparison's result and draws it without importing scipy
    (perfdiff computes without it too; a plotting library's import of it would cost the
    painter 0.1-0.4 s)."""
    import pickle
    import subprocess
    import sys

    import perfdiff

    (tmp_path / "result.pickle").write_bytes(pickle.dumps(perfdiff.compare(*PAIR).result))
    script = ("import pickle, sys\n"
              "from perfdiff.render import plots\n"
              f"r = pickle.loads(open({str(tmp_path / 'result.pickle')!r}, 'rb').read())\n"
              "assert r.analysis.functions\n"
              "print(sorted(m for m in sys.modules if m.startswith('scipy')))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_painter_not_asked_for_pictures_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    """The painter compare(pictures=True) started ends when the comparison fails, and when its
    result is dropped without drawing: no process is left behind."""
    import gc

    import psutil

    import perfdiff
    from perfdiff import api
    from perfdiff.errors import InputError

    def started() -> set[int]:
        return {c.pid for c in psutil.Process().children() if c.status() != psutil.STATUS_ZOMBIE}

    before = started()
    comp = perfdiff.compare(*PAIR, pictures=True)
    assert len(started() - before) == 1
    del comp
    gc.collect()
    assert started() == before

    def nothing_in_common(*_a, **_k):
        raise InputError("nothing in common")

    monkeypatch.setattr(api, "_check_in_common", nothing_in_common)
    with pytest.raises(InputError):
        perfdiff.compare(*PAIR, pictures=True)
    assert started() == before
