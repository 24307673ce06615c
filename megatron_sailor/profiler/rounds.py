"""Round-robin profiling (pure, no torch): the order in which ``sailor-profile --rounds R`` measures its
(TP, micro-batch) configurations, and how the per-round values become the profile's.

A round measures every configuration once, TP-major then micro-batch (the order of ``--tp`` and ``--mbs``),
each with its own warm-up and timed repeats reduced to one value per quantity by ``--stat``. The
profile's value of a quantity is the **median over the rounds** of those per-round values. A transient load
burst shorter than a round lands on one round of one (or a few consecutive) configurations instead of on
every repeat of one configuration, and with 3 or more rounds it does not move that configuration's median.
One round is the profiler as it always was: one block of repeats per configuration.

Contract: :func:`schedule` gives the order; :func:`collect_rounds` calls an injected ``measure(round, tp,
mbs)`` in that order and groups what it returns per configuration; :func:`aggregate` takes the medians;
:func:`disagreements` names the quantities whose rounds spread more than a limit (``(max - min) /
median``), which the profiler logs as a warning.
"""
from __future__ import annotations

import statistics
from typing import Callable, Iterable, Mapping, Sequence

Config = tuple[int, int]                     # (tp, mbs)
Entry = tuple[int, int, int]                 # (round, tp, mbs)
RoundValues = dict[Config, dict[str, list[float]]]

SPREAD_WARN = 0.25          # rounds of one quantity disagreeing by more than this fraction of their median


def schedule(tp_list: Sequence[int], mbs_list: Sequence[int], rounds: int) -> list[Entry]:
    """Every configuration once per round, round after round (round-robin)."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    return [(r, tp, mbs) for r in range(rounds) for tp in tp_list for mbs in mbs_list]


def last_use(entries: Sequence[Entry]) -> dict[int, Entry]:
    """The last entry of each TP degree (its probes can be freed after it: with one round, right after its
    own configurations, as the profiler always did; with more, at the end of the last round)."""
    return {e[1]: e for e in entries}


def collect_rounds(entries: Iterable[Entry],
                   measure: Callable[[int, int, int], Mapping[str, float]]) -> RoundValues:
    """Call ``measure`` for each entry in order; per configuration, each quantity's values in round order."""
    out: RoundValues = {}
    for r, tp, mbs in entries:
        per = out.setdefault((tp, mbs), {})
        for name, value in measure(r, tp, mbs).items():
            per.setdefault(name, []).append(float(value))
    return out


def aggregate(values: RoundValues) -> dict[Config, dict[str, float]]:
    """The median over rounds of every quantity of every configuration."""
    return {cfg: {name: float(statistics.median(v)) for name, v in per.items() if v}
            for cfg, per in values.items()}


def spread(values: Sequence[float]) -> float:
    """``(max - min) / median`` of one quantity's rounds; 0 for a single round or a zero median."""
    mid = statistics.median(values) if values else 0.0
    return (max(values) - min(values)) / mid if len(values) > 1 and mid > 0 else 0.0


def disagreements(values: RoundValues, names: Iterable[str],
                  limit: float = SPREAD_WARN) -> list[tuple[Config, str, float]]:
    """(configuration, quantity, spread) for each of ``names`` whose rounds spread more than ``limit``."""
    wanted = tuple(names)
    return [(cfg, name, spread(per[name])) for cfg, per in values.items() for name in wanted
            if name in per and spread(per[name]) > limit]


def rounds_document(values: RoundValues, rounds: int, stat: str) -> dict:
    """The side output ``PROFILE.rounds.json``: every round's value of every quantity, and its spread."""
    confs = [{"tp": tp, "mbs": mbs, "values": {k: list(v) for k, v in per.items()},
              "spread": {k: round(spread(v), 4) for k, v in per.items()}}
             for (tp, mbs), per in sorted(values.items())]
    return {"rounds": rounds, "per_round_statistic": stat, "profile_value": "median over rounds",
            "order": "round-robin: each round measures every (tp, mbs) once, tp-major", "configurations": confs}
