"""Pipelines a (type, TP) pool can hold at a pipeline depth: per zone ``count // (S * tp)``, memoised per cluster.

Contract: :func:`caps_for` lists (zone, the most pipelines of S stages at TP ``tp``) for every zone holding
type g with room for one, zones in order; :func:`task_dmax` is the largest total pipeline count of any row
of a task (its pools' capacity, at most the micro-batch count N).
"""
from __future__ import annotations

from typing import Any

from planner.cluster import ClusterSpec


_CAPS: dict[tuple[int, str, int, int], tuple[ClusterSpec, tuple[tuple[str, int], ...]]] = {}
_DMAX: dict[tuple, tuple[ClusterSpec, int]] = {}
MAX_ENTRIES = 65536


def _known(table: dict, key: tuple, cluster: ClusterSpec) -> Any:
    """The answer memoised in ``table`` under ``key`` (whose first item is ``id(cluster)``) for this very cluster
    object, else None: by identity (hashing a many-pool cluster costs more than the answer; each entry keeps its
    cluster, so an id is never reused)."""
    hit = table.get(key)
    return hit[1] if hit is not None and hit[0] is cluster else None


def _keep(table: dict, key: tuple, cluster: ClusterSpec, out: Any) -> Any:
    """Memoise ``out`` for :func:`_known` (the table cleared when it grows past :data:`MAX_ENTRIES`)."""
    if len(table) > MAX_ENTRIES:
        table.clear()
    table[key] = (cluster, out)
    return out


def caps_for(cluster: ClusterSpec, g: str, tp: int, s_num: int) -> tuple[tuple[str, int], ...]:
    """(zone, max pipelines) of every zone holding type g, memoised per cluster (:func:`_known`)."""
    key = (id(cluster), g, tp, s_num)
    out = _known(_CAPS, key, cluster)
    if out is None:
        out = _keep(_CAPS, key, cluster, tuple((p.zone, p.count // (s_num * tp))
                                               for p in sorted(cluster.pools, key=lambda p: p.zone)
                                               if p.gpu_type == g and p.count // (s_num * tp) > 0))
    return out


def task_dmax(cluster: ClusterSpec, combo, s_num: int, n_mb: int) -> int:
    """The largest total pipeline count of any row of a task: its pools' capacity, at most N; memoised per
    cluster (the task bounds ask it of every combo many times)."""
    key = (id(cluster), combo, s_num, n_mb)
    out = _known(_DMAX, key, cluster)
    if out is None:
        out = _keep(_DMAX, key, cluster, int(min(n_mb, sum(c for g, t in combo
                                                            for _, c in caps_for(cluster, g, t, s_num)))))
    return out
