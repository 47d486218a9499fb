"""Pictures beside the report (matplotlib, no display): the two runs' cycle-time
distributions, and their cycle times cycle by cycle.  Small deterministic PNGs, linked from
the Markdown by relative path so they show when the folder is attached to a ticket.

matplotlib is the optional extra `perfdiff[plot]`; without it `write_plots` raises
PlotsUnavailable and the report says how to get them.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from perfdiff.analyze import Analysis

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


def write_plots(c: Analysis, folder: Path, stem: str) -> list[str]:
    """Write the report's pictures into `folder` as `stem`.*.png; returns their file names."""
    plt = _pyplot()
    runs = tuple(zip((("normal", c.normal), ("abnormal", c.abnormal)), COLORS, strict=True))

    fig, ax = plt.subplots(figsize=SIZE_IN, dpi=DPI)
    for (label, r), color in runs:
        x = np.sort(_ms(r.dur_us))
        y = np.arange(1, len(x) + 1) / max(len(x), 1)
        ax.step(_thin(x), _thin(y), where="post", color=color, label=f"{label} ({r.n_cycles:,} cycles)")
    ecdf = _save(fig, ax, plt, folder / f"{stem}.cycles.png", "Cycle-time distribution (ECDF)",
                 "cycle time (ms)", "share of cycles ≤ x", "lower right")

    fig, ax = plt.subplots(figsize=SIZE_IN, dpi=DPI)
    for (label, r), color in runs:
        y = _ms(r.dur_us)
        ax.plot(_thin(np.arange(len(y))), _thin(y), color=color, linewidth=0.8, label=label)
    timeline = _save(fig, ax, plt, folder / f"{stem}.timeline.png", "Cycle time, cycle by cycle", "cycle",
                     "cycle time (ms)", "upper right")
    return [ecdf, timeline]


def _save(fig, ax, plt, path: Path, title: str, xlabel: str, ylabel: str, legend: str) -> str:
    """Label, lay out and write one figure; returns its file name."""
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(loc=legend, fontsize=8)
    fig.tight_layout()
    # No software or date metadata: the same input gives the same bytes.
    fig.savefig(path, dpi=DPI, metadata={"Software": None})
    plt.close(fig)
    return path.name
