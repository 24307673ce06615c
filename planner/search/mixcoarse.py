"""Coarser pools for the exact pricing of :mod:`planner.search.mixexact` where its table is too large (s20b).

Contract: :func:`coarse(unit, max_cells)` returns the unit with its pools merged along the finest of three
partitions whose usage table fits ``max_cells`` (:func:`planner.search.mixexact.table_cells`): none (the unit
itself), the pools of one GPU type in one region merged across its zones, the pools of one GPU type merged.
Pools of different types are never merged: the LP would let one type's GPUs stand in for another's, far looser
than the Lagrangian pricing the unit keeps otherwise (on small two-type clusters the all-in-one bound was
1.65-4.3 x below the exact one). The exact LP over the merged unit's usage table is a relaxation of the unit's
(docs/PLANNER.md 7.2 item 10): group a plan's pipelines by their chains' usage per merged pool, u'_j = sum over
the pools p in part j of u_p; the per-pool constraints sum n u_p <= cap_p, summed over part j, give
sum n u'_j <= sum_{p in j} cap_p (the merged pool's count), and a chain of a plan uses at most cap_p of each
pool and S x the part's largest TP, so at most the merged table's range; the merged table's cell (k, v, u') is
the smallest fill over every chain of that class, level and merged usage, so the merged count of a chain's cell
is >= its own (7.2 item 7 with the merged pools). Every node floor proven on the merged LP (weak duality at any
prices y >= 0) therefore holds for the unit.

With the plans of one GPU-type set R (:mod:`planner.search.mixcouple`), a merged pool is kept when any of its
pools is (:func:`keep`): a plan of R uses no pool of another type, so its chains' usage of a merged pool with
no R pool is 0 (the zero slice), and one with an R pool is kept whole (every column: a superset).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from planner.plan import region_of
from planner.search.mixtab import MixUnit


@dataclass(frozen=True)
class Coarse:
    """``unit`` with pool p of the original merged into pool ``part[p]`` (``how``: "pools", "regions" or
    "types")."""

    unit: MixUnit
    part: np.ndarray
    how: str


def merge_pools(unit: MixUnit, part: np.ndarray) -> MixUnit:
    """``unit`` with pool p merged into ``part[p]`` (0..n - 1, every index used): each group's pool becomes its
    part and a part's count is the sum of its pools' counts."""
    grp = unit.grp
    n = int(part.max()) + 1
    caps = np.zeros(n, dtype=grp.caps.dtype)
    np.add.at(caps, part, grp.caps)
    return replace(unit, grp=replace(grp, pool=part[grp.pool].astype(grp.pool.dtype), caps=caps))


def partitions(unit: MixUnit) -> list[tuple[str, np.ndarray]]:
    """The candidate partitions of the pools, finest first: none ("pools"), the pools of one GPU type in one
    region merged ("regions"), those of one type merged ("types"); a partition equal to a finer one is left
    out, and a pool with no group stays alone."""
    grp = unit.grp
    n_p = len(grp.caps)
    names: dict[int, tuple[str, str]] = {}
    for g, name in enumerate(grp.names):
        names.setdefault(int(grp.pool[g]), (name[0], name[1]))
    out = [("pools", np.arange(n_p))]
    for how, key in (("regions", lambda t, z: (t, region_of(z))), ("types", lambda t, z: t)):
        labels: dict[object, int] = {}
        part = np.array([labels.setdefault(key(*names[p]) if p in names else ("pool", p), len(labels))
                         for p in range(n_p)])
        if len(labels) < int(out[-1][1].max()) + 1:
            out.append((how, part))
    return out


def coarse(unit: MixUnit, max_cells: int) -> Coarse | None:
    """The finest partition of :func:`partitions` whose usage table fits ``max_cells`` (None: not even one)."""
    from planner.search.mixexact import table_cells
    for how, part in partitions(unit):
        one = unit if how == "pools" else merge_pools(unit, part)
        if table_cells(one) <= max_cells:
            return Coarse(one, part, how)
    return None


def keep(c: Coarse, kept: np.ndarray) -> np.ndarray:
    """[merged pools] kept: any of its pools is in ``kept`` [P] (the module docstring)."""
    out = np.zeros(len(c.unit.grp.caps), dtype=bool)
    out[c.part[kept]] = True
    return out
