"""The production check that the search's vectorised evaluator and the simulator agree.

The search scores plans with numpy expressions of :mod:`planner.simulator.formulas`; every plan it returns
is rebuilt (:func:`planner.search.build.build_plan`) and simulated (:func:`planner.simulator.simulate`), and
the two iteration times, $/iteration, GPU counts and every GPU's peak memory (the search's vectorised memory
of that replica's (type, TP) table with min(S - s, m) micro-batches in flight: :func:`search_replica_peaks`)
must agree within relative ``REL_TOL``. A disagreement is
a bug in the planner, never bad input: it raises :class:`planner.errors.InternalError` (the CLIs print one
``internal error:`` line and exit with status 3).
"""
from __future__ import annotations

import math

from planner.errors import InternalError
from planner.plan import Plan
from planner.search.build import build_plan
from planner.search.space import Candidate
from planner.search.tables import TypeTable, build_type_table, stage_peak_bytes
from planner.simulator import Estimate, simulate
from planner.simulator.settings import SimContext
from planner.simulator.sync_modes import with_sync_modes, written_mode

REL_TOL = 1e-9


def search_replica_peaks(ctx: SimContext, cand: Candidate, plan: Plan) -> list[list[float]]:
    """``[stage][replica]`` peak bytes of one GPU as the search's evaluator computes them for ``plan``."""
    tables: dict[tuple[str, int], TypeTable] = {}
    rows: dict[tuple, list[float]] = {}
    counts = [st.num_layers for st in plan.stages]
    s_num = len(counts)
    lcms = [math.lcm(*(r.tp for r in st.replicas)) for st in plan.stages]
    out = []
    for s, st in enumerate(plan.stages):
        peaks = []
        for j, rep in enumerate(st.replicas):
            m = min(plan.microbatch_counts[j], s_num)
            shards = tuple(x // rep.tp for x in lcms) if cand.distributed_optimizer else None
            key = (rep.gpu_type, rep.tp, m, shards)
            if key not in rows:
                tkey = (rep.gpu_type, rep.tp)
                if tkey not in tables:
                    tables[tkey] = build_type_table(ctx, rep.gpu_type, rep.tp, cand.mbs, cand.precision)
                rows[key] = stage_peak_bytes(ctx, tables[tkey], counts, cand.precision, cand.optimizer,
                                             cand.recompute, m, cand.tie_embeddings,
                                             cand.num_pipelines if shards else None, shards).tolist()
            peaks.append(rows[key][s])
        out.append(peaks)
    return out


def check_candidate(cand: Candidate, plan: Plan, est: Estimate, rel_tol: float = REL_TOL,
                    peaks: list[list[float]] | None = None) -> None:
    """Raise InternalError unless ``est`` (the simulator on ``plan``) matches the search's scores of ``cand``
    (and, given ``peaks`` from :func:`search_replica_peaks`, its per-GPU peak memory)."""
    pairs = (("iteration time (s)", cand.iteration_s, est.iteration_time_s),
             ("cost per iteration (USD)", cand.cost_usd, est.cost_per_iteration_usd))
    for what, searched, simulated in pairs:
        if not math.isclose(searched, simulated, rel_tol=rel_tol, abs_tol=0.0):
            raise InternalError(f"the search's evaluator and simulate() disagree on the {what} of the returned "
                                f"plan ({len(plan.stages)} stages, {plan.world_size} GPUs): {searched!r} vs "
                                f"{simulated!r} (relative tolerance {rel_tol:g})")
    if cand.gpus != est.num_gpus:
        raise InternalError(f"the search's evaluator counts {cand.gpus} GPUs for the returned plan, simulate() "
                            f"{est.num_gpus}")
    for s, row in enumerate(peaks or ()):
        simulated = est.stages[s].replica_peak_bytes
        if len(row) != len(simulated):
            raise InternalError(f"stage {s}: the search counts {len(row)} replicas, simulate() {len(simulated)}")
        for j, (a, b) in enumerate(zip(row, simulated)):
            if not math.isclose(a, b, rel_tol=rel_tol, abs_tol=0.0):
                raise InternalError(f"the search's evaluator and simulate() disagree on the peak memory of stage "
                                    f"{s} replica {j} of the returned plan: {a!r} vs {b!r} bytes (relative "
                                    f"tolerance {rel_tol:g})")
    if not est.fits_in_memory:
        raise InternalError("the returned plan does not fit in memory per the simulator")


def check_candidates(ctx: SimContext, cands: list[Candidate], gbs: int) -> list[tuple[Plan, Estimate]]:
    """Build, simulate and check every candidate; returns their (plan, estimate) pairs."""
    out = []
    for cand in cands:
        plan = build_plan(cand, ctx.model.num_layers, gbs, ctx.model.name, tie_embeddings=cand.tie_embeddings)
        est = simulate(plan, ctx)
        check_candidate(cand, plan, est, peaks=search_replica_peaks(ctx, cand, plan))
        out.append((plan, est))
    return out


def with_estimated_sync_modes(plan: Plan, est: Estimate) -> Plan:
    """``plan`` with every stage's ``grad_sync`` set to the mode ``est`` (``simulate(plan, ctx)``) modelled for it,
    stages with one replica (mode ``"none"``) keeping theirs: what
    :func:`planner.simulator.sync_modes.with_chosen_sync_modes` returns, read from the estimate instead of
    computed again. ``simulate`` builds ``est.stages[s].sync_mode`` from ``stage_sync(plan, ctx, s,
    all_replica_costs(plan, ctx)[s]).mode``, the very expression ``chosen_sync_modes`` maps (flat and
    hierarchical kept, anything else None)."""
    return with_sync_modes(plan, tuple(written_mode(se.sync_mode) for se in est.stages))


def checked_plans(ctx: SimContext, cands: list[Candidate], gbs: int) -> list[tuple[Plan, Estimate]]:
    """:func:`check_candidates` (the same build, simulation and check, raising the same errors), each plan then
    carrying the sync modes its estimate assumed (:func:`with_estimated_sync_modes`), paired with that one
    estimate. The estimate is the annotated plan's as well, field for field: ``simulate`` reads a stage's
    ``grad_sync`` only through ``sync_rule``, and ``zone_aware_sync`` under a forced mode returns exactly the
    branch ``auto`` (or the preset's rule) returned for it (the same expressions on the same links; one zone:
    the flat ring either way); the tied all-reduce takes stage 0's resulting mode. docs/PLANNER.md 2.3
    (``tests/planner/test_verify_s14u.py`` simulates the annotated plans again and compares)."""
    return [(with_estimated_sync_modes(plan, est), est) for plan, est in check_candidates(ctx, cands, gbs)]
