"""Save benchmark results as a PNG bar plot with matplotlib (shared by every benchmark)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display needed

import matplotlib.pyplot as plt
from matplotlib.ticker import FuncFormatter


def bar_plot(
    path: Path,
    title: str,
    labels: Sequence[str],
    values: Sequence[float],
    ylabel: str,
    targets: Sequence[float | None] | None = None,
) -> Path:
    """Draw one bar per label (with an optional dashed target line per bar); return ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(labels)), 4.5))
    bars = ax.bar(labels, values, color="#4C72B0")
    ax.bar_label(bars, labels=[f"{v:,.0f}" for v in values], padding=3)
    for bar, target in zip(bars, targets or [None] * len(labels), strict=True):
        if target is not None:
            x0, width = bar.get_x(), bar.get_width()
            ax.hlines(target, x0, x0 + width, colors="#C44E52", linestyles="dashed")
    if targets and any(t is not None for t in targets):
        ax.plot([], [], color="#C44E52", linestyle="dashed", label="target")
        ax.legend(loc="upper right")
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.0f}"))
    ax.margins(y=0.3)  # head room for the value labels and the legend
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def grouped_bar_plot(
    path: Path,
    title: str,
    panels: Sequence[tuple[str, Sequence[str], dict[str, Sequence[float]], float | None]],
) -> Path:
    """Draw one panel per ``(ylabel, groups, series, target)``: bars per series within groups.

    ``series`` maps a legend label to one value per group (NaN: no bar); ``target`` draws a
    dashed horizontal line. Returns ``path``.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    widest = max(len(groups) * max(1, len(series)) for _y, groups, series, _t in panels)
    fig, axes = plt.subplots(
        1, len(panels), figsize=(max(7.0, 0.55 * widest) * len(panels), 4.8), squeeze=False
    )
    for ax, (ylabel, groups, series, target) in zip(axes[0], panels, strict=True):
        width = 0.8 / max(1, len(series))
        for i, (label, values) in enumerate(series.items()):
            xs = [g + i * width for g in range(len(groups))]
            bars = ax.bar(xs, values, width, label=label)
            ax.bar_label(
                bars,
                labels=[f"{v:,.2f}" if abs(v) < 10 else f"{v:,.0f}" for v in values],
                padding=2,
                fontsize=7,
            )
        ax.set_xticks([g + width * (len(series) - 1) / 2 for g in range(len(groups))])
        ax.set_xticklabels(groups)
        if target is not None:
            ax.axhline(target, color="#C44E52", linestyle="dashed", label="target")
        ax.axhline(0, color="black", linewidth=0.6)
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=8)
        ax.margins(y=0.15)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def cdf_plot(
    path: Path,
    title: str,
    panels: dict[str, dict[str, tuple[Sequence[float], Sequence[float]]]],
) -> Path:
    """Draw one panel per title: one CDF line per label, ``(values, fractions)``, log x.

    ``panels`` maps a panel title to ``{label: (values, fractions)}``. Returns ``path``.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    cols = min(2, max(1, len(panels)))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.5 * cols, 4.2 * rows), squeeze=False)
    for ax, (panel, lines) in zip(axes.flat, panels.items(), strict=False):
        for label, (xs, ys) in lines.items():
            if xs:
                ax.step(xs, ys, where="post", label=label)
        ax.set_xscale("log")
        ax.set_title(panel, fontsize=10)
        ax.set_xlabel("latency ms (log)")
        ax.set_ylabel("fraction of records")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


Series = dict[str, tuple[Sequence[float], Sequence[float]]]


def line_plot(
    path: Path,
    title: str,
    panels: Sequence[tuple[str, str, Series, Series]],
    *,
    log2_x: bool = True,
) -> Path:
    """Draw one panel per ``(xlabel, ylabel, series, references)`` (x axis log-2 if ``log2_x``).

    ``series`` maps a label to ``(xs, ys)`` drawn as lines with markers; ``references``
    the same, drawn dashed (a bound to compare with). Returns ``path``.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4.5), squeeze=False)
    for ax, (xlabel, ylabel, series, references) in zip(axes[0], panels, strict=True):
        for label, (xs, ys) in series.items():
            ax.plot(xs, ys, marker="o", label=label)
        for label, (xs, ys) in references.items():
            ax.plot(xs, ys, linestyle="dashed", color="#C44E52", label=label)
        if log2_x:
            ax.set_xscale("log", base=2)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.axhline(0, color="black", linewidth=0.6)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
