"""Event-level simulation of one iteration: 1F1B per pipeline, p2p transfers, gradient sync, optimizer step.

Every stage replica is a device executing its operations in 1F1B order (``w = min(S-s-1, m)`` warm-up
forwards, then one-forward-one-backward, then the remaining backwards). An operation starts when its device
is free and its input has arrived: a forward needs the previous stage's forward of the same micro-batch
plus one transfer, a backward the next stage's backward plus one transfer (and its own forward). Transfers
run on the link between the two replicas (one at a time per link and direction); with blocking p2p the
transfer also holds the sending and the receiving device. After the last backward each stage's gradient
sync runs (after a global barrier when the runtime has one), then the optimizer step.

The makespan equals the closed-form time of :mod:`planner.simulator.time` on uniform plans; on uneven or
heterogeneous plans the event simulation also captures stalls the closed form averages away (see
docs/SIMULATOR.md, "Timeline").
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from planner.plan import Plan
from planner.simulator.settings import SimContext
from planner.simulator.stage import ReplicaCosts, all_replica_costs
from planner.simulator.time import p2p_seconds, stage_sync


@dataclass(frozen=True)
class Event:
    device: str          # "s{stage}/r{replica}" for GPUs, "link s{a}>s{b}/r{j}" for one link direction
    stage: int
    replica: int
    kind: str            # fwd, bwd, p2p_fwd, p2p_bwd, sync, update
    microbatch: int      # -1 for sync / update
    start_s: float
    end_s: float


@dataclass(frozen=True)
class Timeline:
    events: tuple[Event, ...]
    makespan_s: float
    bottleneck_stage: int

    def to_dict(self) -> dict:
        return {"makespan_s": self.makespan_s, "bottleneck_stage": self.bottleneck_stage,
                "events": [asdict(e) for e in self.events]}


def one_f_one_b_order(num_stages: int, s: int, m: int) -> list[tuple[str, int]]:
    """The (kind, micro-batch) sequence stage ``s`` executes under 1F1B."""
    warm = min(num_stages - s - 1, m)
    order = [("fwd", i) for i in range(warm)]
    for i in range(m - warm):
        order += [("fwd", warm + i), ("bwd", i)]
    order += [("bwd", i) for i in range(m - warm, m)]
    return order


class _PipelineSim:
    """Discrete-event simulation of one pipeline's 1F1B schedule."""

    def __init__(self, costs: list[ReplicaCosts], p2p_s: list[float], m: int, j: int, ctx: SimContext):
        self.costs, self.p2p, self.m, self.j = costs, p2p_s, m, j
        self.blocking = ctx.settings.p2p_blocking
        self.overhead = ctx.settings.per_microbatch_overhead_s
        self.events: list[Event] = []
        S = len(costs)
        self.dev_free = [0.0] * S
        self.link_free = {(b, d): 0.0 for b in range(S - 1) for d in ("fwd", "bwd")}
        self.done: dict[tuple[str, int, int], float] = {}   # (kind, stage, mb) -> compute end
        self.arrive: dict[tuple[str, int, int], tuple[float, float]] = {}  # input transfer (start, end)

    def _transfer(self, kind: str, src: int, dst: int, mb: int, ready: float) -> None:
        b = min(src, dst)
        start = max(ready, self.link_free[(b, kind)])
        end = start + self.p2p[b]
        self.link_free[(b, kind)] = end
        if self.blocking:           # the sender is held for the whole send
            self.dev_free[src] = max(self.dev_free[src], end)
        link = f"link s{src}>s{dst}/r{self.j}"   # one resource per direction (full-duplex links)
        self.events.append(Event(link, b, self.j, f"p2p_{kind}", mb, start, end))
        self.arrive[(kind, dst, mb)] = (start, end)

    def _start(self, kind: str, s: int, mb: int) -> float | None:
        """Earliest start of the compute of (kind, s, mb), or None if its input is not produced yet.

        With blocking p2p the receiver is also held for one transfer time (its receive), which can begin
        as soon as the transfer begins and the device is free; otherwise compute waits for arrival.
        """
        S = len(self.costs)
        deps: list[float] = []
        if kind == "bwd":
            own = self.done.get(("fwd", s, mb))
            if own is None:
                return None
            deps.append(own)
        needs_input = (kind == "fwd" and s > 0) or (kind == "bwd" and s < S - 1)
        if not needs_input:
            return max(deps + [self.dev_free[s]])
        got = self.arrive.get((kind, s, mb))
        if got is None:
            return None
        t0, t1 = got
        if self.blocking:
            recv_start = max([self.dev_free[s], t0] + deps)
            boundary = s - 1 if kind == "fwd" else s
            return max(recv_start + self.p2p[boundary], t1)
        return max(deps + [self.dev_free[s], t1])

    def run(self) -> None:
        S = len(self.costs)
        queues = [one_f_one_b_order(S, s, self.m) for s in range(S)]
        pos = [0] * S
        while any(pos[s] < len(queues[s]) for s in range(S)):
            best = None   # the startable op with the earliest start (ties: lowest stage)
            for s in range(S):
                if pos[s] >= len(queues[s]):
                    continue
                kind, mb = queues[s][pos[s]]
                start = self._start(kind, s, mb)
                if start is not None:
                    if best is None or start < best[0]:
                        best = (start, s, kind, mb)
            if best is None:
                raise RuntimeError("1F1B event simulation deadlocked (bug)")
            start, s, kind, mb = best
            c = self.costs[s]
            dur = (c.fwd_s if kind == "fwd" else c.bwd_s) + self.overhead / 2
            end = start + dur
            self.dev_free[s] = end
            self.done[(kind, s, mb)] = end
            self.events.append(Event(f"s{s}/r{self.j}", s, self.j, kind, mb, start, end))
            pos[s] += 1
            if kind == "fwd" and s < S - 1:
                self._transfer("fwd", s, s + 1, mb, end)
            elif kind == "bwd" and s > 0:
                self._transfer("bwd", s, s - 1, mb, end)


def simulate_events(plan: Plan, ctx: SimContext) -> Timeline:
    """The event timeline of one iteration of ``plan``."""
    costs = all_replica_costs(plan, ctx)
    S, D = plan.num_stages, plan.dp_degree
    events: list[Event] = []
    last_bwd = [[0.0] * D for _ in range(S)]
    for j, m in enumerate(plan.microbatch_counts):
        sim = _PipelineSim([costs[s][j] for s in range(S)], p2p_seconds(plan, ctx, j), m, j, ctx)
        sim.run()
        events += sim.events
        for s in range(S):
            last_bwd[s][j] = sim.dev_free[s]
    barrier = max(max(row) for row in last_bwd)
    sync_end = []
    for s in range(S):
        sc = stage_sync(plan, ctx, s, costs[s])
        start = barrier if ctx.settings.dp_sync_waits_for_all else max(last_bwd[s])
        end = start + sc.time_s
        if sc.time_s > 0:
            events += [Event(f"s{s}/r{j}", s, j, "sync", -1, start, end) for j in range(D)]
        sync_end.append(end)
    for s in range(S):
        for j in range(D):
            c = costs[s][j]
            events.append(Event(f"s{s}/r{j}", s, j, "update", -1, sync_end[s], sync_end[s] + c.update_s))
    makespan = max(e.end_s for e in events)
    busy = [max(sum(e.end_s - e.start_s for e in events if e.stage == s and e.replica == j
                    and e.kind in ("fwd", "bwd")) for j in range(D)) for s in range(S)]
    bottleneck = max(range(S), key=lambda s: busy[s])
    events.sort(key=lambda e: (e.start_s, e.device))
    return Timeline(tuple(events), makespan, bottleneck)
