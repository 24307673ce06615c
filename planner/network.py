"""Network model: time to move a message between two GPUs, and egress prices between zones.

A :class:`Link` is ``latency_s + bytes / bandwidth(bytes)``. The bandwidth is either constant or a Sailor-style
fit ``GB/s = a*u^2 + b*u + c`` with ``u = log2(bytes / 1e6)``; the fit is clamped to
``[min_bw_bytes_per_s, max_bw_bytes_per_s]`` so it is never negative and never above the measured peak, and
below the size where the fit peaks-from-the-left the bandwidth is not allowed to *rise* for smaller
messages (the fit's behaviour at tiny sizes is extrapolation). Time is therefore positive and
non-decreasing in the message size.

Link classes, from fast to slow: intra-node (from the GPU catalog), inter-node in one zone, across zones of
one region, across regions. Defaults are conservative public-cloud figures; a network file overrides them
per link class and per (zone, gpu type) pair. Sailor's ``multizone_bandwidths_het.json`` is imported by
:mod:`planner.sailor_data`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Mapping

from planner.errors import InputError
from planner.hardware import GPUCatalog
from planner.plan import region_of


@dataclass(frozen=True)
class Link:
    """A point-to-point link between one pair of GPUs."""

    max_bw_bytes_per_s: float
    latency_s: float = 0.0
    fit_gb_per_s: tuple[float, float, float] | None = None  # a, b, c of the log2-size quadratic
    min_bw_bytes_per_s: float | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.max_bw_bytes_per_s) and self.max_bw_bytes_per_s > 0) or \
                not (math.isfinite(self.latency_s) and self.latency_s >= 0):
            raise InputError(f"link bandwidth must be > 0 and latency >= 0, got "
                             f"{self.max_bw_bytes_per_s!r} B/s, {self.latency_s!r} s")

    def bandwidth_bytes_per_s(self, nbytes: float) -> float:
        """The fitted bandwidth at this size, clamped; a concave fit is held at its peak beyond the vertex."""
        hi = self.max_bw_bytes_per_s
        lo = self.min_bw_bytes_per_s if self.min_bw_bytes_per_s is not None else hi * 0.01
        if self.fit_gb_per_s is None:
            return hi
        a, b, c = self.fit_gb_per_s
        u = math.log2(max(nbytes, 1.0) / 1e6)
        if a < 0:
            u = min(u, -b / (2 * a))
        return min(hi, max(lo, (a * u * u + b * u + c) * 1e9))

    def _raw_transfer_s(self, nbytes: float) -> float:
        return nbytes / self.bandwidth_bytes_per_s(nbytes)

    def time_s(self, nbytes: float) -> float:
        """``latency + bytes / bandwidth``, made non-decreasing in ``nbytes`` (running max over sizes)."""
        if nbytes <= 0:
            return 0.0
        raw = self._raw_transfer_s(nbytes)
        if self.fit_gb_per_s is None:
            return self.latency_s + raw
        grid = _envelope(self.fit_gb_per_s, self.max_bw_bytes_per_s, self.min_bw_bytes_per_s)
        i = min(len(grid) - 1, max(0, int(math.floor(math.log2(max(nbytes, 1.0)) * 4))))
        return self.latency_s + max(raw, grid[i])

    def scaled(self, factor: float) -> "Link":
        """The same link with ``factor`` x the bandwidth (e.g. 1/k when k transfers share it)."""
        fit = None if self.fit_gb_per_s is None else tuple(x * factor for x in self.fit_gb_per_s)
        lo = None if self.min_bw_bytes_per_s is None else self.min_bw_bytes_per_s * factor
        return Link(self.max_bw_bytes_per_s * factor, self.latency_s, fit, lo)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Endpoint:
    gpu_type: str
    zone: str


# Defaults per link class (per GPU pair): bandwidth B/s, latency s.
DEFAULT_CLASS_LINKS: dict[str, Link] = {
    "inter_node": Link(12.5e9, 20e-6),      # 100 Gb/s NIC share
    "cross_zone": Link(6.0e9, 500e-6),
    "cross_region": Link(1.25e9, 20e-3),
}


@dataclass
class NetworkModel:
    """Links between GPUs and egress prices between zones."""

    catalog: GPUCatalog
    class_links: dict[str, Link] = field(default_factory=lambda: dict(DEFAULT_CLASS_LINKS))
    # (src_zone, src_gpu, dst_zone, dst_gpu) -> aggregate-link table {concurrent pairs: Link}
    pair_links: dict[tuple[str, str, str, str], dict[int, Link]] = field(default_factory=dict)
    egress_usd_per_gb: dict[tuple[str, str], float] = field(default_factory=dict)
    default_egress_usd_per_gb: tuple[float, float] = (0.01, 0.02)  # (same region, other region)
    name: str = "default"

    def link_class(self, a: Endpoint, b: Endpoint, same_node: bool = False) -> str:
        if same_node:
            return "intra_node"
        if a.zone == b.zone:
            return "inter_node"
        if region_of(a.zone) == region_of(b.zone):
            return "cross_zone"
        return "cross_region"

    def link(self, a: Endpoint, b: Endpoint, *, same_node: bool = False, concurrent: int = 1) -> Link:
        """The link one of ``concurrent`` simultaneous GPU pairs sees between two nodes."""
        if same_node:
            g = self.catalog.get(a.gpu_type)
            return Link(g.intra_node_bw_bytes_per_s, g.intra_node_latency_s)
        table = self.pair_links.get((a.zone, a.gpu_type, b.zone, b.gpu_type))
        if table is None:
            table = self.pair_links.get((b.zone, b.gpu_type, a.zone, a.gpu_type))
        if table:
            # Sailor's tables give the aggregate bandwidth of k concurrent pairs between two nodes.
            keys = sorted(table)
            k = min((x for x in keys if x >= concurrent), default=keys[-1])
            return table[k].scaled(1.0 / max(1, concurrent))
        base = self.class_links[self.link_class(a, b)]
        return base

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
                            self.default_egress_usd_per_gb, self.name)


@lru_cache(maxsize=256)
def _envelope(fit: tuple[float, float, float], hi: float, lo: float | None) -> tuple[float, ...]:
    """Running max of the raw transfer time on a grid of sizes 2**(i/4) bytes, i = 0..160 (1 B to 1 TB)."""
    link = Link(hi, 0.0, fit, lo)
    out, best = [], 0.0
    for i in range(161):
        best = max(best, link._raw_transfer_s(2.0 ** (i / 4)))
        out.append(best)
    return tuple(out)
