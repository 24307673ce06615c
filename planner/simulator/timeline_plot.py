"""Draw an event timeline as a Gantt chart (matplotlib, optional extra ``[plot]``); a spinner on a terminal
while it draws (planner.progress)."""
from __future__ import annotations

import json
from pathlib import Path

from planner.errors import InputError
from planner.plan import Plan
from planner.textio import atomic_write_text
from planner.progress import status
from planner.simulator.events import Timeline

COLOURS = {"fwd": "#4C72B0", "bwd": "#DD8452", "p2p_fwd": "#55A868", "p2p_bwd": "#8FD19E",
           "sync": "#C44E52", "update": "#8172B3"}


def require_matplotlib():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise InputError("drawing needs matplotlib: pip install -e \".[plot]\"") from None
    return plt


def _rows(timeline: Timeline) -> list[str]:
    devices = sorted({e.device for e in timeline.events if not e.device.startswith("link")},
                     key=lambda d: tuple(int(x[1:]) for x in d.split("/")))
    links = sorted({e.device for e in timeline.events if e.device.startswith("link")})
    return devices + links


def draw_timeline(timeline: Timeline, plan: Plan, path: str | Path, title: str = "") -> None:
    with status(f"drawing {path}"):
        _draw(timeline, plan, path, title)


def _draw(timeline: Timeline, plan: Plan, path: str | Path, title: str) -> None:
    plt = require_matplotlib()
    rows = _rows(timeline)
    index = {r: i for i, r in enumerate(rows)}
    fig, ax = plt.subplots(figsize=(12, 0.35 * len(rows) + 1.6))
    for e in timeline.events:
        ax.barh(index[e.device], e.end_s - e.start_s, left=e.start_s, height=0.8, color=COLOURS[e.kind],
                edgecolor="none")
    labels = []
    for r in rows:
        if r.startswith("link"):
            labels.append(r)
            continue
        s, j = (int(x[1:]) for x in r.split("/"))
        rep = plan.stages[s].replicas[j]
        mark = " <- bottleneck" if s == timeline.bottleneck_stage else ""
        labels.append(f"stage {s} rep {j} ({rep.gpu_type} tp{rep.tp} {rep.zone}){mark}")
    ax.set_yticks(range(len(rows)), labels, fontsize=7)
    for tick, r in zip(ax.get_yticklabels(), rows):
        if "bottleneck" in tick.get_text():
            tick.set_color("#C44E52")
    ax.invert_yaxis()
    ax.set_xlabel("seconds")
    ax.set_title(f"{title}  one iteration: {timeline.makespan_s:.4f} s".strip())
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLOURS.values()]
    ax.legend(handles, ["forward", "backward", "p2p activation", "p2p gradient", "gradient sync", "optimizer"],
              loc="upper center", bbox_to_anchor=(0.5, -0.12 - 0.1 / max(1, len(rows) / 8)), ncol=6, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_timeline_json(timeline: Timeline, closed_form_s: float, path: str | Path) -> None:
    data = timeline.to_dict()
    data["closed_form_iteration_s"] = closed_form_s
    atomic_write_text(Path(path), json.dumps(data) + "\n")
