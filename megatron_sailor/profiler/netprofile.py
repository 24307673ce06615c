"""Network profiler: point-to-point and all-reduce time versus message size, fitted to
``time = latency + bytes / bandwidth``, written in the planner's network format.

Point-to-point: rank 0 ping-pongs with every other rank (one-way time = round trip / 2, median of the
repeats). Pairs are classified by host name (``socket.gethostname()`` of each rank, or the launcher's
``SAILOR_NODE_NAME``): same host -> the intra-node link (the GPU catalog's ``intra_node_*`` fields),
different hosts -> ``class_links.inter_node``. On a single host the inter-node class is written with the
loopback measurement (that is what "nodes" emulated on this machine talk over) and the file says so.
All-reduce over all ranks is measured as the runtime's gradient sync performs it (pack into a fresh flat
buffer, all-reduce, copy back) and fitted too (algorithm bandwidth).
With ``rounds`` R > 1 (``sailor-profile --rounds R``) every round runs every (peer, size) ping-pong block
and then every all-reduce size block once (same warm-up, repeats and order as a single round), and each
(peer, size) / size value is the median over rounds (:func:`median_by_size`, as across peers) of
each round's median, so a burst of load from other processes bends one round of a size, not the fit.
R = 1 is the profiler as it always was. Every rank runs the same loops, so all ranks enter the same
barriers and all-reduces in the same order.
The fitting and aggregation functions are pure (no torch) and unit-tested.
"""
from __future__ import annotations

import os
import socket
import statistics
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence


DEFAULT_SIZES = tuple(4 ** k for k in range(5, 14))     # 1 KiB .. 64 MiB (gradient buffers are large)


@dataclass(frozen=True)
class LinkFit:
    latency_s: float
    bw_bytes_per_s: float

    def time_s(self, nbytes: float) -> float:
        return self.latency_s + nbytes / self.bw_bytes_per_s

    def to_json(self) -> dict[str, float]:
        return {"bw_bytes_per_s": self.bw_bytes_per_s, "latency_s": self.latency_s}


def fit_latency_bandwidth(sizes: Sequence[float], times: Sequence[float]) -> LinkFit:
    """Least-squares ``t = a + n / bw`` with ``a >= 0`` and ``bw > 0``, weighting points by 1/t so small
    messages (latency) count as much as large ones (bandwidth). A negative intercept is refitted through
    the origin; a non-positive slope (flat times) means the bandwidth is not visible: the largest size over
    its time bounds it."""
    if len(sizes) != len(times) or len(sizes) < 2:
        raise ValueError("need at least two (size, time) points of equal count")
    if any(t <= 0 for t in times) or any(n < 0 for n in sizes):
        raise ValueError("times must be positive and sizes non-negative")
    w = [1.0 / (t * t) for t in times]                    # relative-error least squares
    sw = sum(w)
    mx = sum(wi * n for wi, n in zip(w, sizes)) / sw
    my = sum(wi * t for wi, t in zip(w, times)) / sw
    var = sum(wi * (n - mx) ** 2 for wi, n in zip(w, sizes))
    slope = sum(wi * (n - mx) * (t - my) for wi, n, t in zip(w, sizes, times)) / var if var else 0.0
    intercept = my - slope * mx
    if slope <= 0:
        big = max(range(len(sizes)), key=lambda i: sizes[i])
        return LinkFit(latency_s=max(0.0, min(times)), bw_bytes_per_s=max(sizes[big], 1.0) / times[big])
    if intercept < 0:
        slope = sum(wi * n * t for wi, n, t in zip(w, sizes, times)) / sum(wi * n * n for wi, n in zip(w, sizes))
        intercept = 0.0
    return LinkFit(latency_s=intercept, bw_bytes_per_s=1.0 / slope)


def ring_allreduce_link(fit: LinkFit, world: int) -> LinkFit:
    """Per-link latency and bandwidth implied by a ring all-reduce fit over ``world`` ranks
    (``2(n-1)`` steps of ``bytes/n``): useful to compare with the point-to-point fit."""
    if world < 2:
        return fit
    steps = 2 * (world - 1)
    return LinkFit(latency_s=fit.latency_s / steps, bw_bytes_per_s=fit.bw_bytes_per_s * steps / world)


def classify_pairs(hosts: Sequence[str]) -> dict[int, str]:
    """Peer rank -> 'intra' or 'inter' relative to rank 0."""
    return {r: ("intra" if hosts[r] == hosts[0] else "inter") for r in range(1, len(hosts))}


def median_by_size(series: Sequence[Sequence[float]]) -> list[float]:
    """Element-wise median of several pairs' time series (same sizes)."""
    return [statistics.median(col) for col in zip(*series)]


def aggregate_network_rounds(p2p_rounds: Sequence[Mapping[int, Sequence[float]]],
                             allreduce_rounds: Sequence[Sequence[float]]) -> tuple[dict[int, list[float]], list[float]]:
    """Per peer and size, and per all-reduce size: the median over rounds of each round's value
    (:func:`median_by_size` over the rounds' series). One round gives its own values back."""
    first_p2p = {peer: len(series) for peer, series in p2p_rounds[0].items()} if p2p_rounds else {}
    first_ar = len(allreduce_rounds[0]) if allreduce_rounds else 0
    if any({peer: len(s) for peer, s in r.items()} != first_p2p for r in p2p_rounds) \
            or any(len(s) != first_ar for s in allreduce_rounds):
        raise ValueError("every round must have the same peers and sizes")
    return ({peer: median_by_size([r[peer] for r in p2p_rounds]) for peer in first_p2p},
            median_by_size(allreduce_rounds) if first_ar else [])


def planner_intra_link(intra: LinkFit | None, allreduce: LinkFit | None, hosts: Sequence[str]) -> LinkFit | None:
    """The intra-node link to give the planner. It times point-to-point transfers AND ring all-reduces with
    one link; on one host the all-reduce is the harder test (on CPU/gloo it is bound by the reduction and
    copies, several times slower than a p2p fit predicts), so the link implied by the measured all-reduce
    is used when every rank is on this host; otherwise the point-to-point fit."""
    if allreduce is not None and len(set(hosts)) == 1 and len(hosts) >= 2:
        return ring_allreduce_link(allreduce, len(hosts))
    return intra


def network_document(name: str, intra: LinkFit | None, inter: LinkFit | None, hosts: Sequence[str],
                     allreduce: LinkFit | None) -> dict[str, Any]:
    """The planner's network file (``megatron-sailor-network/1``)."""
    single_host = len(set(hosts)) == 1
    link = inter if inter is not None else planner_intra_link(intra, allreduce, hosts)
    notes = [f"measured by sailor-profile on {len(hosts)} rank(s), hosts {sorted(set(hosts))}"]
    if single_host:
        notes.append("single host: inter_node is the loopback link (nodes emulated on this machine), as implied "
                     "by the measured all-reduce when there is one")
    if intra is not None:
        notes.append(f"intra-node p2p {intra.bw_bytes_per_s / 1e9:.3f} GB/s + {intra.latency_s * 1e6:.1f} us "
                     "(also written to the GPU catalog entry)")
    if allreduce is not None:
        notes.append(f"all-reduce over {len(hosts)} ranks: {allreduce.bw_bytes_per_s / 1e9:.3f} GB/s algorithm "
                     f"bandwidth + {allreduce.latency_s * 1e6:.1f} us")
    doc: dict[str, Any] = {"format": "megatron-sailor-network/1", "name": name, "description": "; ".join(notes),
                           "class_links": {}}
    if link is not None:
        doc["class_links"]["inter_node"] = link.to_json()
    return doc


# ---- measurement (torch.distributed; run on every rank) ------------------------------------------------
def host_name() -> str:
    return os.environ.get("SAILOR_NODE_NAME") or socket.gethostname()


def _ping_pong(peer: int, nbytes: int, warmup: int, repeats: int, device: Any) -> list[float]:
    import time

    import torch
    import torch.distributed as dist
    buf = torch.zeros(max(1, nbytes // 4), dtype=torch.float32, device=device)
    rank = dist.get_rank()
    out = []
    for i in range(warmup + repeats):
        if rank == 0:
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            dist.send(buf, dst=peer)
            dist.recv(buf, src=peer)
            if device.type == "cuda":
                torch.cuda.synchronize()
            if i >= warmup:
                out.append((time.perf_counter() - start) / 2)
        else:
            dist.recv(buf, src=0)
            dist.send(buf, dst=0)
    return out


def _allreduce(nbytes: int, warmup: int, repeats: int, device: Any) -> list[float]:
    """All-reduce the way the runtime's gradient sync does it (megatron_sailor/runtime/grad_sync.py): pack the
    gradients into a freshly allocated flat buffer (``torch.cat``), all-reduce it, copy the result back."""
    import time

    import torch
    import torch.distributed as dist
    grads = [torch.zeros(max(1, nbytes // 8), dtype=torch.float32, device=device) for _ in range(2)]
    out = []
    for i in range(warmup + repeats):
        dist.barrier()
        start = time.perf_counter()
        buf = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(buf)
        offset = 0
        for g in grads:
            g.copy_(buf[offset:offset + g.numel()])
            offset += g.numel()
        if device.type == "cuda":
            torch.cuda.synchronize()
        if i >= warmup:
            out.append(time.perf_counter() - start)
    return out


def _sharded_vs_allreduce(nbytes: int, warmup: int, repeats: int, device: Any) -> tuple[float, float]:
    """Median seconds of (reduce-scatter + all-gather, all-reduce) of one flat fp32 buffer of about ``nbytes``:
    the calls the distributed optimizer makes (megatron_sailor/runtime/shard_comm.py) against the all-reduce
    they replace, alternating block by block so both see the same load."""
    import time

    import torch
    import torch.distributed as dist
    world = dist.get_world_size()
    per = max(1, nbytes // 4 // world)
    buf = torch.zeros(per * world, dtype=torch.float32, device=device)
    seg = torch.zeros(per, dtype=torch.float32, device=device)
    sharded, plain = [], []
    for i in range(warmup + repeats):
        for out, call in ((sharded, lambda: (dist.reduce_scatter_tensor(seg, buf),
                                             dist.all_gather_into_tensor(buf, seg))),
                          (plain, lambda: dist.all_reduce(buf))):
            dist.barrier()
            start = time.perf_counter()
            call()
            if device.type == "cuda":
                torch.cuda.synchronize()
            if i >= warmup:
                out.append(time.perf_counter() - start)
    return statistics.median(sharded), statistics.median(plain)


def sharded_collective_scale(sharded_s: float, allreduce_s: float) -> float:
    """``RuntimeSettings.sharded_collective_scale`` from one measurement: how much slower reduce-scatter +
    all-gather ran than the all-reduce (the ring model prices them alike); never below 1, and held at the
    constants file's limit of 1000 (a measurement that far off says the backend is broken, not slow)."""
    return min(1000.0, max(1.0, sharded_s / allreduce_s)) if allreduce_s > 0 else 1.0


@dataclass
class NetworkResult:
    hosts: list[str]
    sizes: list[int]
    p2p_s: dict[int, list[float]]          # peer -> one-way seconds per size, median over rounds (rank 0 only)
    allreduce_s: list[float]               # per size, median over rounds
    intra: LinkFit | None
    inter: LinkFit | None
    allreduce: LinkFit | None
    p2p_rounds: list[dict[int, list[float]]] = field(default_factory=list)   # each round's medians (rank 0)
    allreduce_rounds: list[list[float]] = field(default_factory=list)
    sharded_s: float | None = None        # reduce-scatter + all-gather of the largest size (None: one rank)
    sharded_allreduce_s: float | None = None   # the all-reduce of the same buffer, measured alongside


def _measure_round(sizes: Sequence[int], warmup: int, repeats: int, device: Any
                   ) -> tuple[dict[int, list[float]], list[float]]:
    """One round: every (peer, size) ping-pong block (peer-major), then every all-reduce size block; the
    median of each block's repeats. Every rank runs it, entering the same barriers in the same order."""
    import torch.distributed as dist
    world = dist.get_world_size()
    p2p: dict[int, list[float]] = {}
    for peer in range(1, world):
        series = []
        for n in sizes:
            if dist.get_rank() in (0, peer):
                samples = _ping_pong(peer, n, warmup, repeats, device)
                series.append(statistics.median(samples) if samples else 0.0)
            dist.barrier()
        p2p[peer] = series
    ar = [statistics.median(_allreduce(n, warmup, repeats, device)) for n in sizes] if world > 1 else []
    return p2p, ar


def profile_network(sizes: Sequence[int] = DEFAULT_SIZES, warmup: int = 2, repeats: int = 5,
                    rounds: int = 1) -> NetworkResult:
    """Measure on every rank of an initialised process group, ``rounds`` rounds round-robin (see the module
    docstring); the fits are meaningful on rank 0."""
    import torch
    import torch.distributed as dist
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    world = dist.get_world_size()
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    hosts: list[Any] = [None] * world
    dist.all_gather_object(hosts, host_name())
    p2p_rounds, ar_rounds = [], []
    for _ in range(rounds):
        p2p_round, ar_round = _measure_round(sizes, warmup, repeats, device)
        p2p_rounds.append(p2p_round)
        ar_rounds.append(ar_round)
    p2p, ar = aggregate_network_rounds(p2p_rounds, ar_rounds)
    sh = _sharded_vs_allreduce(max(sizes), warmup, repeats, device) if world > 1 else (None, None)
    if dist.get_rank() != 0:
        return NetworkResult(list(hosts), list(sizes), {}, ar, None, None, None)
    classes = classify_pairs(hosts)
    fits: dict[str, LinkFit | None] = {}
    for cls in ("intra", "inter"):
        peers = [r for r, c in classes.items() if c == cls]
        fits[cls] = fit_latency_bandwidth(sizes, median_by_size([p2p[r] for r in peers])) if peers else None
    return NetworkResult(hosts=list(hosts), sizes=list(sizes), p2p_s=p2p, allreduce_s=ar, intra=fits["intra"],
                         inter=fits["inter"], allreduce=fit_latency_bandwidth(sizes, ar) if ar else None,
                         p2p_rounds=p2p_rounds, allreduce_rounds=ar_rounds, sharded_s=sh[0],
                         sharded_allreduce_s=sh[1])
