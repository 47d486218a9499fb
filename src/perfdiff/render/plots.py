"""Pictures beside the report (matplotlib, no display): the two runs' cycle-time
distributions, their cycle times cycle by cycle, the top suspects' own time per cycle and the
context metrics that changed, over time.  Small deterministic PNGs, linked from the Markdown
by relative path so they show when the folder is attached to a ticket.

matplotlib is the optional extra `perfdiff[plot]`; without it `write_plots` raises
PlotsUnavailable and the report says how to get them.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from perfdiff.analyze.result import ComparisonResult
from perfdiff.analyze.records import Trace
from perfdiff.parallel import Parallel, Standby
from perfdiff.ranks.records import RankAnalysis
from perfdiff.render.names import shorten_set

DPI = 80
SIZE_IN = (7.0, 3.2)
MAX_POINTS = 20_000  # points drawn per run and line (evenly thinned beyond): small files
COLORS = ("#1f77b4", "#d62728")  # normal, abnormal


class PlotsUnavailable(RuntimeError):
    """matplotlib is not installed."""


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display; the same pixels everywhere
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise PlotsUnavailable("plots need matplotlib: pip install 'perfdiff[plot]'") from exc
    return plt


def _thin(x: np.ndarray) -> np.ndarray:
    return x if len(x) <= MAX_POINTS else x[np.linspace(0, len(x) - 1, MAX_POINTS).astype(np.int64)]


def _ms(us: np.ndarray) -> np.ndarray:
    return np.asarray(us, dtype=np.float64) / 1e3


# The pictures of panels, one a trace of a kind: (trace kind, title, x label).
_PANELS = {"suspects": ("function", "Top suspects: own time per cycle", "cycle"),
           "context": ("metric", "Context metrics that changed, over time", "s since the first cycle")}
_FIGURES = ("cycles", "timeline", *_PANELS)  # the report's order


def start_painter() -> Standby | None:
    """A process forked now that readies matplotlib (0.3-0.5 s) while this one goes on with
    the comparison; hand it to `write_plots`, which then draws there, or close it.  None where
    this process cannot fork."""
    return Standby.fork(_ready_to_draw, "the process drawing the pictures")


def _ready_to_draw() -> None:
    """Import matplotlib and draw one small figure into memory: the first figure drawn in a
    process also loads the font, the renderer and the PNG writer."""
    import io

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(1.0, 1.0), dpi=DPI)
    ax.plot([0.0, 1.0], [0.0, 1.0])
    ax.set_title("·", fontsize=7, y=1.0)
    fig.savefig(io.BytesIO(), format="png", dpi=DPI, metadata={"Software": None})
    plt.close(fig)


def write_plots(result: ComparisonResult, folder: Path, stem: str, parallel: Parallel | None = None,
                painter: Standby | None = None) -> list[str]:
    """Write the report's pictures into `folder` as `stem`.*.png; returns their file names.

    In `painter` (start_painter) where given.  Each picture is drawn in a forked worker where
    `parallel` (default: all cores) has cores to spare: they are independent, and a picture
    takes tens of ms of matplotlib."""
    if painter is not None:
        return painter.call(write_plots, result, folder, stem, parallel)
    _pyplot()  # imported before the workers fork, which inherit it (and raises without it)
    kinds = {t.kind for t in result.analysis.traces}
    names = [f for f in _FIGURES if f not in _PANELS or _PANELS[f][0] in kinds]
    # Handed out the largest first (the panels), so that two workers finish together.
    order = sorted(names, key=lambda f: f not in _PANELS)
    par = parallel or Parallel()
    drawn = dict(zip(order, par.start_map(_draw, order, shared=(result, folder, stem), large=len(order) > 1).result(),
                     strict=True))
    return [drawn[f] for f in names]


def _draw(shared: tuple[ComparisonResult, Path, str], figure: str) -> str:
    """Draw one of the report's pictures (a name of _FIGURES); returns its file name."""
    result, folder, stem = shared
    plt = _pyplot()
    c = result.analysis
    runs = tuple(zip((("normal", c.normal), ("abnormal", c.abnormal)), COLORS, strict=True))
    if figure == "cycles":
        fig, ax = _figure(plt, 1, 1, SIZE_IN, _ONE)
        for (label, r), color in runs:
            x = np.sort(_ms(r.dur_us))
            y = np.arange(1, len(x) + 1) / max(len(x), 1)
            # From 0 at the shortest cycle: a step that starts at 1/n reads as cycles missing.
            x, y = np.concatenate([x[:1], _thin(x)]), np.concatenate([[0.0], _thin(y)])
            ax.step(x, y, where="post", color=color, label=f"{label} ({r.n_cycles:,} cycles)")
        return _save(fig, ax, plt, folder / f"{stem}.cycles.png", "Cycle-time distribution (ECDF)",
                     "cycle time (ms)", "share of cycles ≤ x")
    if figure == "timeline":
        fig, ax = _figure(plt, 1, 1, SIZE_IN, _ONE)
        for (label, r), color in runs:
            y = _ms(r.dur_us)
            ax.plot(_thin(np.arange(len(y))), _thin(y), color=color, linewidth=0.8, label=label)
        return _save(fig, ax, plt, folder / f"{stem}.timeline.png", "Cycle time, cycle by cycle", "cycle",
                     "cycle time (ms)")
    kind, title, xlabel = _PANELS[figure]
    return _panels(plt, [t for t in c.traces if t.kind == kind], folder / f"{stem}.{figure}.png", title, xlabel)


def plot_pngs(result: ComparisonResult, stem: str = "report") -> dict[str, bytes]:
    """The report's pictures as PNG bytes by the file name write_plots gives them (for a report
    that embeds them: perfdiff.render.html), drawn in a temporary folder."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="perfdiff-plots-") as d:
        return {name: (Path(d) / name).read_bytes() for name in write_plots(result, Path(d), stem)}


def write_rank_plots(a: RankAnalysis, folder: Path, stem: str) -> list[str]:
    """The rank table as a picture, `stem`.ranks.png: each rank's median cycle and, where the
    runs have collectives, its wait in them per cycle, both runs, in ms; the abnormal run's
    culprit marked.  Ranks are numbered as in the report (the normal run's)."""
    plt = _pyplot()
    rows = sorted(a.rows, key=lambda r: r.rank)
    x = np.array([r.rank for r in rows], dtype=np.float64)
    panels = [("median_n_us", "median_a_us", "median cycle (ms)")]
    if any(np.isfinite(r.wait_n_us) or np.isfinite(r.wait_a_us) for r in rows):
        panels.append(("wait_n_us", "wait_a_us", "wait in collectives\nper cycle (ms)"))
    # One panel where no rank ran a collective: still a column of axes.
    fig, axes = _figure(plt, len(panels), 1, (SIZE_IN[0], 0.7 + 2.2 * len(panels)), _RANKS, sharex=True,
                        squeeze=False)
    marker = "o" if len(rows) <= 64 else None  # dots while one can count them
    for ax, (key_n, key_a, ylabel) in zip(axes[:, 0], panels, strict=True):
        for (label, key), color in zip((("normal", key_n), ("abnormal", key_a)), COLORS, strict=True):
            y = _ms(np.array([getattr(r, key) for r in rows], dtype=np.float64))
            ax.plot(x, y, color=color, marker=marker, markersize=3, linewidth=0.8, label=label)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    culprit = a.stragglers[1].culprit
    if culprit is not None:
        rank = {p.abnormal.rank: p.rank for p in a.pairs}.get(culprit, culprit)
        for ax in axes[:, 0]:
            ax.axvline(rank, color="0.4", linestyle="--", linewidth=0.8)
        # Above the plot, where no run's line can be.
        axes[0, 0].annotate(f"culprit: rank {rank}", (rank, 1.0), xycoords=("data", "axes fraction"),
                            xytext=(0, 2), textcoords="offset points", ha="center", va="bottom", fontsize=7,
                            color="0.3", annotation_clip=False)
    axes[-1, 0].set_xlabel("rank", fontsize=8)
    axes[-1, 0].xaxis.get_major_locator().set_params(integer=True)  # no rank 0.5
    _legend(fig, axes[0, 0], 8)
    fig.suptitle("Per rank: median cycle and wait in collectives", fontsize=9)
    return [_write(fig, plt, folder / f"{stem}.ranks.png")]


def _label(text: str) -> str:
    """A user string as plain text in matplotlib (no mathtext between dollar signs)."""
    return text.replace("$", r"\$")


def _panels(plt, traces: list[Trace], path: Path, title: str, xlabel: str) -> str:
    """One small panel per trace, two per row, both runs in each; returns the file name."""
    rows = (len(traces) + 1) // 2
    fig, axes = _figure(plt, rows, 2, (SIZE_IN[0], 0.7 + 2.1 * rows), _PANEL)
    # Panels of names alike keep what tells them apart; no tags, which no list here explains.
    names = shorten_set([t.name for t in traces], 44, tags=False)
    for ax, t in zip(axes.flat, traces, strict=False):
        unit, scale = t.unit, 1.0
        if unit == "µs" and max(np.max(t.y_n, initial=0.0), np.max(t.y_a, initial=0.0)) >= 2e3:
            unit, scale = "ms", 1e-3
        for (label, x, y), color in zip((("normal", t.x_n, t.y_n), ("abnormal", t.x_a, t.y_a)), COLORS, strict=True):
            ax.plot(_thin(np.asarray(x, dtype=np.float64)), _thin(np.asarray(y, dtype=np.float64) * scale),
                    color=color, linewidth=0.7, label=label)
        ax.set_title(_label(f"{names[t.name]} · {t.device}"), fontsize=7, y=1.0)  # y given: placed without measuring the ticks
        ax.set_ylabel(_label(unit), fontsize=7)
        ax.set_xlabel(xlabel, fontsize=7)
        ax.tick_params(labelsize=6)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(traces):]:
        ax.set_visible(False)
    _legend(fig, axes.flat[0], 7)
    fig.suptitle(title, fontsize=9)
    return _write(fig, plt, path)


@dataclass(frozen=True)
class _Margins:
    """Room around and between a figure's axes, in inches: for the labels and titles a
    figure of its kind has (the runs' legend under them included)."""

    left: float
    right: float
    top: float
    bottom: float
    wspace: float = 0.0  # between columns
    hspace: float = 0.0  # between rows


# Fixed margins, not matplotlib's constrained layout: that lays a figure out by drawing it
# twice more, about half of its time, for labels whose size is known here.
_ONE = _Margins(left=0.72, right=0.15, top=0.32, bottom=0.78)
_PANEL = _Margins(left=0.62, right=0.12, top=0.48, bottom=0.72, wspace=0.62, hspace=0.62)
_RANKS = _Margins(left=0.92, right=0.12, top=0.42, bottom=0.74, hspace=0.12)


def _figure(plt, rows: int, cols: int, size_in: tuple[float, float], m: _Margins, sharex: bool = False,
            squeeze: bool = True):
    """A figure of `rows` x `cols` axes (a 2-D array, or one axes for 1 x 1 where `squeeze`)
    laid out with `m`."""
    fig, axes = plt.subplots(rows, cols, figsize=size_in, dpi=DPI, squeeze=False, sharex=sharex)
    w, h = size_in
    ax_w = (w - m.left - m.right - (cols - 1) * m.wspace) / cols
    ax_h = (h - m.top - m.bottom - (rows - 1) * m.hspace) / rows
    fig.subplots_adjust(left=m.left / w, right=1 - m.right / w, top=1 - m.top / h, bottom=m.bottom / h,
                        wspace=m.wspace / ax_w, hspace=m.hspace / ax_h)
    return (fig, axes[0, 0]) if squeeze and rows == cols == 1 else (fig, axes)


def _legend(fig, ax, size: int) -> None:
    """The runs' legend under the plots, outside them: inside, it hid a run's peak."""
    fig.legend(*ax.get_legend_handles_labels(), loc="lower center", bbox_to_anchor=(0.5, 0.005), ncol=2,
               fontsize=size, frameon=False)


def _save(fig, ax, plt, path: Path, title: str, xlabel: str, ylabel: str) -> str:
    """Label, lay out and write one figure; returns its file name."""
    ax.set_title(title, y=1.0)  # y given: placed without measuring the ticks
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    _legend(fig, ax, 8)
    return _write(fig, plt, path)


def _write(fig, plt, path: Path) -> str:
    """Write and close a figure; returns its file name."""
    # No software or date metadata: the same input gives the same bytes.
    fig.savefig(path, dpi=DPI, metadata={"Software": None})
    plt.close(fig)
    return path.name
