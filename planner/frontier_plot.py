"""Draw the cost / throughput frontier (matplotlib, optional extra ``[plot]``); a spinner on a terminal while
it draws (planner.progress)."""
from __future__ import annotations

from pathlib import Path

from planner.frontier import Frontier
from planner.progress import status
from planner.simulator.timeline_plot import require_matplotlib


def draw_frontier(fr: Frontier, path: str | Path, title: str = "") -> None:
    with status(f"drawing {path}"):
        _draw(fr, path, title)


def _draw(fr: Frontier, path: str | Path, title: str) -> None:
    plt = require_matplotlib()
    fig, ax = plt.subplots(figsize=(10, 6.5))
    others = [p for p in fr.points if not p.on_front]
    ax.scatter([p.cost_per_iteration_usd for p in others], [p.throughput_iters_per_s for p in others], s=14,
               color="#B0B0B0", label="other candidates", zorder=2)
    front = fr.front()
    ax.plot([p.cost_per_iteration_usd for p in front], [p.throughput_iters_per_s for p in front], "-o", ms=5,
            color="#4C72B0", label="Pareto front", zorder=3)
    for p in front:
        ax.annotate(p.label, (p.cost_per_iteration_usd, p.throughput_iters_per_s), fontsize=6,
                    xytext=(4, -8), textcoords="offset points", color="#303030")
    for p in fr.points:
        if p.chosen:
            ax.scatter([p.cost_per_iteration_usd], [p.throughput_iters_per_s], s=180, marker="*", color="#C44E52",
                       zorder=5, label=f"chosen: {p.label}")
    if fr.baseline is not None:
        b = fr.baseline
        ax.scatter([b.cost_per_iteration_usd], [b.throughput_iters_per_s], s=90, marker="s", color="#DD8452",
                   zorder=4, label=b.label)
    if fr.min_throughput_iters_per_s is not None:
        ax.axhline(fr.min_throughput_iters_per_s, color="#55A868", ls="--", lw=1,
                   label=f"min throughput {fr.min_throughput_iters_per_s:g} it/s")
    if fr.max_cost_per_iter_usd is not None:
        ax.axvline(fr.max_cost_per_iter_usd, color="#8172B3", ls="--", lw=1,
                   label=f"max cost ${fr.max_cost_per_iter_usd:g}/iter")
    ax.set_xlabel("$ / iteration")
    ax.set_ylabel("iterations / s")
    ax.set_title(title or "throughput vs cost")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
