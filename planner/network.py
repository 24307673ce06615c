"""Network model: time to move a message between two GPUs, and egress prices between zones.

A :class:`Link` is ``latency_s + bytes / bandwidth(bytes)``. The bandwidth is either constant or a Sailor-style
fit ``GB/s = a*u^2 + b*u + c`` with ``u = log2(bytes / 1e6)`` (1 GB = 1e9 B), capped at the stored peak
``max_bw_bytes_per_s`` (the highest bandwidth measured, B/s) and held at its vertex beyond the vertex of a
concave fit. A fit that is negative, zero or non-finite at a size the simulator asks for is refused
(:class:`InputError` naming the link and the size), never clamped silently. See docs/SIMULATOR.md,
"Network fits".

Link classes: intra-node (Sailor's per-type fit by node size, else the GPU catalog), inter-node in one zone
(same or different GPU types), across zones of one region, across regions. Two kinds of link:

- *per GPU pair* (``shared=False``; class links from defaults or a network file, e.g. one NIC per GPU):
  concurrent transfers between two nodes each get the full bandwidth;
- *per node pair* (``shared=True``; Sailor's fits, keyed by both nodes' sizes): one NIC per node, so k
  concurrent transfers between the two nodes share it (each sees 1/k).

With fitted (zone, type, node size) entries loaded, a pair the file lacks is an error naming the missing
(zone, type, node size) endpoints; the reverse direction is used when only it is present.
"""
from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Mapping

from planner.errors import InputError
from planner.hardware import GPUCatalog
from planner.plan import region_of


@dataclass(frozen=True)
class Link:
    """A link between two GPUs: per GPU pair, or per node pair (``shared``: concurrent transfers share it)."""

    max_bw_bytes_per_s: float
    latency_s: float = 0.0
    fit_gb_per_s: tuple[float, float, float] | None = None  # a, b, c of the log2-size quadratic
    min_bw_bytes_per_s: float | None = None
    shared: bool = False          # True: the bandwidth of a node pair, shared by concurrent transfers
    label: str = ""               # names the link in errors, e.g. "us-central1-a/A100-40/4 -> ..."

    def __post_init__(self) -> None:
        if not (math.isfinite(self.max_bw_bytes_per_s) and self.max_bw_bytes_per_s > 0) or \
                not (math.isfinite(self.latency_s) and self.latency_s >= 0):
            raise InputError(f"link {self.label or ''} bandwidth must be > 0 and latency >= 0, got "
                             f"{self.max_bw_bytes_per_s!r} B/s, {self.latency_s!r} s".replace("link  ", "link "))
        if self.fit_gb_per_s is not None and (len(self.fit_gb_per_s) != 3 or
                                              not all(math.isfinite(x) for x in self.fit_gb_per_s)):
            raise InputError(f"link {self.label}: fit coefficients must be 3 finite numbers, "
                             f"got {self.fit_gb_per_s!r}")

    def fit_value_gb_per_s(self, nbytes: float) -> float:
        """The raw fit at this size (held at the vertex of a concave fit), before the peak cap."""
        if self.fit_gb_per_s is None:
            return self.max_bw_bytes_per_s / 1e9
        a, b, c = self.fit_gb_per_s
        u = math.log2(max(nbytes, 1.0) / 1e6)
        if a < 0:
            u = min(u, -b / (2 * a))
        return a * u * u + b * u + c

    def valid_from_bytes(self) -> float:
        """The smallest message size the fit is valid for (:meth:`check_size` refuses smaller ones); 0 without a
        fit."""
        if self.fit_gb_per_s is None:
            return 0.0
        return 2.0 ** (_valid_from(self.fit_gb_per_s, self.max_bw_bytes_per_s, self.min_bw_bytes_per_s) / 4)

    def check_size(self, nbytes: float) -> None:
        """Refuse a fit that is not a positive finite bandwidth at a size the model uses, or a size below the
        fit's valid range (where its time would fall as the message grows)."""
        v = self.fit_value_gb_per_s(nbytes)
        name = self.label or str(self.fit_gb_per_s)
        if not (math.isfinite(v) and v > 0):
            raise InputError(f"network fit {name}: bandwidth {v!r} GB/s at a {nbytes:.0f}-byte message (must be "
                             f"> 0); the fit is not valid at the sizes this plan sends")
        start = self.valid_from_bytes()
        if nbytes < start:
            raise InputError(f"network fit {name}: a {nbytes:.0f}-byte message is below the fit's valid range "
                             f"(>= {start:.0f} bytes; smaller sizes would transfer faster than larger ones)")

    def bandwidth_bytes_per_s(self, nbytes: float) -> float:
        """The fitted bandwidth at this size, capped at the peak (a 1%-of-peak floor guards tiny sizes)."""
        hi = self.max_bw_bytes_per_s
        lo = self.min_bw_bytes_per_s if self.min_bw_bytes_per_s is not None else hi * 0.01
        if self.fit_gb_per_s is None:
            return hi
        return min(hi, max(lo, self.fit_value_gb_per_s(nbytes) * 1e9))

    def _raw_transfer_s(self, nbytes: float) -> float:
        return nbytes / self.bandwidth_bytes_per_s(nbytes)

    def time_s(self, nbytes: float) -> float:
        """``latency + bytes / bandwidth``, made non-decreasing in ``nbytes`` from the fit's valid start on:
        the largest raw transfer time over the sizes from that start to ``nbytes`` (:func:`_envelope` on the
        size grid, :func:`_turns` between grid points).

        Total at every size (the search's vectorised mirror relies on that); :meth:`checked_time_s` is the
        one the simulator uses at the sizes a plan sends."""
        if nbytes <= 0:
            return 0.0
        raw = self._raw_transfer_s(nbytes)
        if self.fit_gb_per_s is None:
            return self.latency_s + raw
        grid = _envelope(self.fit_gb_per_s, self.max_bw_bytes_per_s, self.min_bw_bytes_per_s)
        i = min(len(grid) - 1, max(0, int(math.floor(math.log2(max(nbytes, 1.0)) * 4))))
        sizes, peaks = _turns(self.fit_gb_per_s, self.max_bw_bytes_per_s, self.min_bw_bytes_per_s)
        j = bisect_right(sizes, nbytes) - 1
        return self.latency_s + (max(raw, grid[i], peaks[j]) if j >= 0 else max(raw, grid[i]))

    def checked_time_s(self, nbytes: float) -> float:
        """:meth:`time_s`, refusing a fit that is not positive and finite at ``nbytes``."""
        if nbytes > 0:
            self.check_size(nbytes)
        return self.time_s(nbytes)

    def scaled(self, factor: float) -> "Link":
        """The same link with ``factor`` x the bandwidth (e.g. 1/k when k transfers share it)."""
        fit = None if self.fit_gb_per_s is None else tuple(x * factor for x in self.fit_gb_per_s)
        lo = None if self.min_bw_bytes_per_s is None else self.min_bw_bytes_per_s * factor
        return Link(self.max_bw_bytes_per_s * factor, self.latency_s, fit, lo,  # type: ignore[arg-type]
                    self.shared, self.label)


@dataclass(frozen=True)
class Endpoint:
    """One side of a link: GPU type, zone and the GPUs per node of its node (0: the catalog's node size)."""

    gpu_type: str
    zone: str
    node_gpus: int = 0


# Defaults per link class (per GPU pair): bandwidth B/s, latency s.
DEFAULT_CLASS_LINKS: dict[str, Link] = {
    "inter_node": Link(12.5e9, 20e-6),      # 100 Gb/s NIC share
    "cross_zone": Link(6.0e9, 500e-6),
    "cross_region": Link(1.25e9, 20e-3),
}

PairKey = tuple[str, str, int, str, str, int]   # (src zone, src gpu, src node size, dst zone, dst gpu, dst size)


@dataclass
class NetworkModel:
    """Links between GPUs and egress prices between zones."""

    catalog: GPUCatalog
    class_links: dict[str, Link] = field(default_factory=lambda: dict(DEFAULT_CLASS_LINKS))
    # fitted node-pair links (Sailor's multizone file), keyed by both endpoints' (zone, type, node size)
    pair_links: dict[PairKey, Link] = field(default_factory=dict)
    egress_usd_per_gb: dict[tuple[str, str], float] = field(default_factory=dict)
    default_egress_usd_per_gb: tuple[float, float] = (0.01, 0.02)  # (same region, other region)
    name: str = "default"
    # fitted intra-node links (Sailor's intra_node file): (gpu type, GPUs in the group) -> Link
    intra_links: dict[tuple[str, int], Link] = field(default_factory=dict)
    source: str | None = None     # the file the fitted pair links came from (named in errors)

    def link_class(self, a: Endpoint, b: Endpoint, same_node: bool = False) -> str:
        if same_node:
            return "intra_node"
        if a.zone == b.zone:
            return "inter_node"
        if region_of(a.zone) == region_of(b.zone):
            return "cross_zone"
        return "cross_region"

    def node_gpus(self, e: Endpoint) -> int:
        return e.node_gpus or self.catalog.get(e.gpu_type).gpus_per_node

    def intra_link(self, gpu_type: str, group_gpus: int) -> Link:
        """The link inside one node for a group of ``group_gpus`` GPUs (Sailor's fit if loaded)."""
        fitted = self.intra_links.get((gpu_type, max(2, group_gpus)))
        if fitted is not None:
            return fitted
        g = self.catalog.get(gpu_type)
        return Link(g.intra_node_bw_bytes_per_s, g.intra_node_latency_s)

    def fitted_pair(self, a: Endpoint, b: Endpoint) -> Link:
        """Sailor's node-pair link a -> b (the reverse entry if only it exists); names a missing pair."""
        na, nb = self.node_gpus(a), self.node_gpus(b)
        link = self.pair_links.get((a.zone, a.gpu_type, na, b.zone, b.gpu_type, nb))
        if link is None:
            link = self.pair_links.get((b.zone, b.gpu_type, nb, a.zone, a.gpu_type, na))
        if link is None:
            raise InputError(f"network '{self.name}' has no link between (zone {a.zone}, {a.gpu_type}, "
                             f"{na} GPUs/node) and (zone {b.zone}, {b.gpu_type}, {nb} GPUs/node)",
                             source=self.source)
        return link

    def link(self, a: Endpoint, b: Endpoint, *, same_node: bool = False, concurrent: int = 1) -> Link:
        """The link one of ``concurrent`` simultaneous transfers sees between the two endpoints' nodes."""
        if same_node:
            return self.intra_link(a.gpu_type, self.node_gpus(a))
        if self.pair_links:
            base = self.fitted_pair(a, b)
        else:
            base = self.class_links[self.link_class(a, b)]
        return base.scaled(1.0 / concurrent) if base.shared and concurrent > 1 else base

    def egress_usd_per_byte(self, src_zone: str, dst_zone: str) -> float:
        if src_zone == dst_zone:
            return 0.0
        price = self.egress_usd_per_gb.get((src_zone, dst_zone))
        if price is None:
            same_region = region_of(src_zone) == region_of(dst_zone)
            price = self.default_egress_usd_per_gb[0 if same_region else 1]
        return price / 1e9

    def with_class_links(self, overrides: Mapping[str, Link]) -> "NetworkModel":
        unknown = sorted(set(overrides) - set(DEFAULT_CLASS_LINKS))
        if unknown:
            raise InputError(f"unknown link class(es) {unknown}; known: {sorted(DEFAULT_CLASS_LINKS)}")
        links = dict(self.class_links)
        links.update(overrides)
        return NetworkModel(self.catalog, links, dict(self.pair_links), dict(self.egress_usd_per_gb),
                            self.default_egress_usd_per_gb, self.name, dict(self.intra_links), self.source)


_GRID = 161   # sizes 2**(i/4) bytes, i = 0..160 (1 B to 1 TB)


_GRID_BYTES = tuple(2.0 ** (i / 4) for i in range(_GRID))
_GRID_U = tuple(math.log2(max(x, 1.0) / 1e6) for x in _GRID_BYTES)     # Link.fit_value_gb_per_s's u at each


@lru_cache(maxsize=256)
def _grid_values(fit: tuple[float, float, float], hi: float, lo: float | None
                 ) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(the raw fit in GB/s, the raw transfer time) at every grid size ``2 ** (i / 4)``: the expressions of
    :meth:`Link.fit_value_gb_per_s` and :meth:`Link._raw_transfer_s` (through :meth:`Link.bandwidth_bytes_per_s`)
    on a ``Link(hi, 0.0, fit, lo)``, inlined: the same operations on the same numbers in the same order (``u``
    from the same ``math.log2`` expression, tabulated once), so the same floats, nan included."""
    Link(hi, 0.0, fit, lo)      # its checks, as before
    a, b, c = fit
    lo_bw = lo if lo is not None else hi * 0.01
    vertex = -b / (2 * a) if a < 0 else 0.0
    values, raws = [], []
    for x, u in zip(_GRID_BYTES, _GRID_U):
        if a < 0:
            u = min(u, vertex)
        v = a * u * u + b * u + c
        values.append(v)
        raws.append(x / min(hi, max(lo_bw, v * 1e9)))
    return tuple(values), tuple(raws)


@lru_cache(maxsize=1024)
def _valid_from(fit: tuple[float, float, float], hi: float, lo: float | None) -> int:
    """Grid index from which a fit is valid: inside the last run of sizes where it is positive, the size of
    least transfer time (below it the fitted time would *fall* as messages grow: the fit's extrapolation)."""
    values, raws = _grid_values(fit, hi, lo)
    j = _GRID - 1
    while j >= 0 and values[j] > 0:
        j -= 1
    run = range(j + 1, _GRID)
    if not run:
        return _GRID
    return min(run, key=raws.__getitem__)


@lru_cache(maxsize=256)
def _envelope(fit: tuple[float, float, float], hi: float, lo: float | None) -> tuple[float, ...]:
    """Transfer time on the size grid; from the fit's valid start on, its running max (never faster for
    more bytes). Below the valid start the raw (floored) time, with nothing carried into the valid range."""
    raws = _grid_values(fit, hi, lo)[1]
    start = _valid_from(fit, hi, lo)
    out, best = list(raws[:start]), 0.0
    for raw in raws[start:]:
        best = max(best, raw)
        out.append(best)
    return tuple(out)


@lru_cache(maxsize=256)
def _turns(fit: tuple[float, float, float], hi: float, lo: float | None) -> tuple[tuple[float, ...],
                                                                                tuple[float, ...]]:
    """(sizes, running max of the raw transfer time at them): the points from the fit's valid start on where
    the raw time ``x / bw(x)`` can have a local maximum between two grid points, so that :meth:`Link.time_s`
    is the largest raw time over *every* size from the start to ``x``, not only over grid points.

    With u = log2(x / 1e6) and the fit q(u) in GB/s, ``ln raw = u ln 2 - ln bw(u) + const`` is continuous and
    smooth except where q meets the clip bounds (``lo``, ``hi``) or, concave, its vertex (beyond which bw is
    held). Where bw is clipped or held, raw grows like x (no interior extremum); where bw = q, an interior
    extremum has q'(u) = ln2 q(u), i.e. ``ln2 a u^2 + (ln2 b - 2a) u + ln2 c - b = 0``. The supremum of raw over
    an interval is attained at its ends, at such roots or at the kinks, so these points (at most seven) with the
    grid points and ``x`` itself give it exactly (up to the rounding of the roots)."""
    a, b, c = fit
    link = Link(hi, 0.0, fit, lo)
    lo_bw = (lo if lo is not None else hi * 0.01) / 1e9
    us: list[float] = []
    for qa, qb, qc in ((math.log(2) * a, math.log(2) * b - 2 * a, math.log(2) * c - b),
                       (a, b, c - lo_bw), (a, b, c - hi / 1e9)):
        us += _roots(qa, qb, qc)
    if a < 0:
        us.append(-b / (2 * a))
    start = 2.0 ** (_valid_from(fit, hi, lo) / 4)
    sizes = sorted({x for u in us if -40.0 < u < 40.0 for x in [1e6 * 2.0 ** u] if x >= start})
    peaks, best = [], 0.0
    for x in sizes:
        best = max(best, link._raw_transfer_s(x))
        peaks.append(best)
    return tuple(sizes), tuple(peaks)


def _roots(a: float, b: float, c: float) -> list[float]:
    """Real roots of ``a u^2 + b u + c`` (a linear or constant one when a = 0)."""
    if a == 0:
        return [-c / b] if b != 0 else []
    disc = b * b - 4 * a * c
    if disc < 0:
        return []
    r = math.sqrt(disc)
    return [(-b - r) / (2 * a), (-b + r) / (2 * a)]
