"""Pipelines a (type, TP) pool can hold at a pipeline depth: per zone ``count // (S * tp)``, memoised per cluster.

Contract: :func:`caps_for` lists (zone, the most pipelines of S stages at TP ``tp``) for every zone holding
type g with room for one, zones in order; :func:`task_dmax` is the largest total pipeline count of any row
of a task (its pools' capacity, at most the micro-batch count N).
"""
from __future__ import annotations

from planner.cluster import ClusterSpec


_CAPS: dict[tuple[int, str, int, int], tuple[ClusterSpec, tuple[tuple[str, int], ...]]] = {}


def caps_for(cluster: ClusterSpec, g: str, tp: int, s_num: int) -> tuple[tuple[str, int], ...]:
    """(zone, max pipelines) of every zone holding type g. Memoised by the cluster object's identity (hashing a
    many-pool cluster costs more than the answer; the entry keeps its cluster, so an id is never reused)."""
    key = (id(cluster), g, tp, s_num)
    hit = _CAPS.get(key)
    if hit is not None and hit[0] is cluster:
        return hit[1]
    if len(_CAPS) > 65536:
        _CAPS.clear()
    out = tuple((p.zone, p.count // (s_num * tp)) for p in sorted(cluster.pools, key=lambda p: p.zone)
                if p.gpu_type == g and p.count // (s_num * tp) > 0)
    _CAPS[key] = (cluster, out)
    return out


_DMAX: dict[tuple, tuple[ClusterSpec, int]] = {}


def task_dmax(cluster: ClusterSpec, combo, s_num: int, n_mb: int) -> int:
    """The largest total pipeline count of any row of a task: its pools' capacity, at most N. Memoised as
    :func:`caps_for` (the task bounds ask it of every combo many times)."""
    key = (id(cluster), combo, s_num, n_mb)
    hit = _DMAX.get(key)
    if hit is not None and hit[0] is cluster:
        return hit[1]
    if len(_DMAX) > 65536:
        _DMAX.clear()
    out = int(min(n_mb, sum(c for g, t in combo for _, c in caps_for(cluster, g, t, s_num))))
    _DMAX[key] = (cluster, out)
    return out
