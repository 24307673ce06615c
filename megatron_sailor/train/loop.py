"""The training job: one rank of a megatron-sailor plan (resume, train, save), entered by
``python -m megatron_sailor.train`` or the thin ``examples/gpt/pretrain_gpt.py``.

Input errors print one ``error: ...`` line (from rank 0) and exit with status 2; a rank that cannot reach
the rendezvous or times out in a collective prints one line and exits with status 1.
"""
from __future__ import annotations

import logging
import os
import sys
import time

from planner.errors import InputError

# for sailor-elastic's start-up timing (megatron_sailor.train.elastic_hooks); the entry script passes its own
PROCESS_START_S = time.time()


def _rank_env():  # noqa: ANN202 - DistEnv, imported lazily (torch)
    """This process's DistEnv, decoded once per start; honours the launcher's SAILOR_RANK_MAP (docs/LAUNCH.md)."""
    from megatron_sailor.runtime.distributed import env_from_torchrun
    return env_from_torchrun()


def _fail(rank: int, message: str, code: int, all_ranks: bool = False) -> int:
    if rank == 0 or all_ranks:
        print(f"error: {message}", file=sys.stderr, flush=True)
    return code


def _make_data(cfg):  # noqa: ANN001, ANN202
    """(training source, validation source or None) from --data-path/--mock-data and --split."""
    from megatron_sailor.train.datasets import indexed_splits, mock_splits
    if cfg.data_path is None:
        splits = mock_splits(cfg.seed, cfg.model.seq_length, cfg.model.vocab_size)
    else:
        splits = indexed_splits(cfg.data_path, cfg.split, cfg.model.seq_length, cfg.model.vocab_size)
    return splits[0], splits[1]


def train(cfg, env) -> None:  # noqa: ANN001
    """Train one rank; ``env`` is the DistEnv that main decoded (the rank map is decoded once per start)."""
    import torch

    from megatron_sailor.runtime.distributed import init_distributed
    from megatron_sailor.train.elastic_hooks import EventLog
    from megatron_sailor.runtime.rank_runtime import RankRuntime, RunConfig, plan_sync_modes, rank_groups
    from megatron_sailor.runtime.topology import describe
    from planner.layout import build_layout
    from patches import apply_cpu_patches

    from megatron_sailor.runtime.emulation import emulation_from
    rank = env.rank
    events = EventLog(cfg.events_file, rank)
    events.emit("process_start", t_unix_s=PROCESS_START_S, world_size=env.world_size)
    emulation = emulation_from(cross_zone_latency_s=cfg.cross_zone_latency_s, cross_zone_gbps=cfg.cross_zone_gbps)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    apply_cpu_patches()
    data, valid = _make_data(cfg)
    init_distributed(env, timeout_s=cfg.timeout_s)
    layout = build_layout(cfg.plan)
    run_cfg = RunConfig(seed=cfg.seed, sync_mode=cfg.sync_mode, optimizer=cfg.optimizer, emulation=emulation,
                        timeout_s=cfg.timeout_s, hidden_dropout=cfg.hidden_dropout,
                        attention_dropout=cfg.attention_dropout, loss_scale=cfg.loss_scale)
    groups = rank_groups(layout, rank, run_cfg, tied_embeddings=cfg.plan.tie_embeddings,
                         plan_modes=plan_sync_modes(cfg.plan))
    events.emit("dist_ready")
    if rank == 0:
        print(describe(cfg.plan, layout), flush=True)
    rt = RankRuntime(cfg.plan, cfg.model, rank, data, run_cfg, layout=layout, groups=groups)
    events.emit("model_ready")
    _train_loop(cfg, rank, rt, events, valid)
    import torch.distributed as dist
    dist.barrier(group=groups.world)
    dist.destroy_process_group()
    events.emit("exit")
    if cfg.control_file:           # under sailor-elastic: skip interpreter teardown (~1-3 s of a reconfiguration)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def _resume(cfg, rank: int, rt, events) -> int:  # noqa: ANN001
    """--elastic-wait, then --load: the iteration to start at."""
    from megatron_sailor.train.checkpoint import load_checkpoint
    from megatron_sailor.train.elastic_hooks import wait_for_go
    if cfg.wait_file:
        events.emit("waiting")
        wait_for_go(cfg.wait_file, rank, timeout_s=cfg.timeout_s * 0.9)
    if not cfg.load:
        return 0
    resume = load_checkpoint(rt, cfg.load)
    if resume is None:
        if rank == 0:
            print(f"no checkpoint in {cfg.load}: starting at iteration 0", flush=True)
        return 0
    rt.resume_at(resume.iteration, resume.consumed_samples)
    events.emit("loaded", load_s=resume.load_s, iteration=resume.iteration, path=resume.path)
    if rank == 0:
        print(f"resumed from {resume.path}: iteration {resume.iteration}, consumed samples "
              f"{resume.consumed_samples} ({resume.load_s:.2f} s)", flush=True)
    return resume.iteration


class _Saver:
    """--save / --save-interval / --async-save: periodic saves (asynchronous ones commit one iteration
    later), a synchronous save at the end or on a stop request."""

    def __init__(self, cfg, rank: int, rt, events, faults, saved_at: int) -> None:  # noqa: ANN001
        self.cfg, self.rank, self.rt, self.events, self.faults = cfg, rank, rt, events, faults
        self.saved_at, self.pending = saved_at, None

    def finish(self) -> None:
        from megatron_sailor.train.checkpoint import finish_save
        if self.pending is None:
            return
        p, self.pending = self.pending, None
        total_s = p.blocking_s + finish_save(self.rt, p)
        self.events.emit("saved", save_s=total_s, blocking_s=p.blocking_s, iteration=p.iteration, asynchronous=True)
        if self.rank == 0:
            print(f"saved checkpoint at iteration {p.iteration} (asynchronous: training blocked "
                  f"{p.blocking_s:.3f} s, committed after the next iteration)", flush=True)

    def save(self, done: int, asynchronous: bool = False) -> None:
        from megatron_sailor.train.checkpoint import begin_save, finish_save
        self.finish()
        p = begin_save(self.rt, self.cfg.save, done, self.rt.consumed_samples(done), keep_last=self.cfg.keep_last,
                       fault_hook=self.faults, asynchronous=asynchronous)
        self.saved_at = done
        if asynchronous:
            self.pending = p
            return
        save_s = p.blocking_s + finish_save(self.rt, p)
        self.events.emit("saved", save_s=save_s, blocking_s=save_s, iteration=done, asynchronous=False)
        if self.rank == 0:
            print(f"saved checkpoint at iteration {done} ({save_s:.2f} s)", flush=True)

    def periodic(self, done: int) -> None:
        cfg = self.cfg
        if cfg.save and cfg.save_interval and done % cfg.save_interval == 0 and done < cfg.train_iters:
            self.save(done, asynchronous=cfg.async_save)

    def final(self, done: int) -> None:
        self.finish()
        if self.cfg.save and self.saved_at != done:
            self.save(done)


def _with_every_ranks_memory(cfg, rt, m):  # noqa: ANN001, ANN202
    """--metrics-file: rank 0's line lists every rank's memory bytes (index = rank); one gather."""
    if not cfg.metrics_file:
        return m
    import dataclasses

    import torch.distributed as dist
    everyone = [None] * dist.get_world_size() if rt.me.rank == 0 else None
    dist.gather_object(m.memory, everyone, dst=0, group=rt.groups.world)
    return dataclasses.replace(m, memory=everyone)


def _train_loop(cfg, rank: int, rt, events, valid=None) -> None:  # noqa: ANN001
    """Resume (--load), train to --train-iters, save (--save-interval, end, stop request)."""
    from megatron_sailor.train.elastic_hooks import FaultInjector, MetricsAppender, stop_requested
    from megatron_sailor.train.hooks import IterationHooks
    faults = FaultInjector(rank)
    start_it = _resume(cfg, rank, rt, events)
    writer = MetricsAppender(cfg.metrics_file, rank, append=bool(cfg.load))
    saver = _Saver(cfg, rank, rt, events, faults, saved_at=start_it if cfg.load else -1)
    it = start_it
    hooks = IterationHooks(cfg, rank, rt, valid, start_it)
    while it < cfg.train_iters:
        faults("step", it)
        hooks.before_step(it)
        m = rt.train_step(it)
        saver.finish()                 # an asynchronous save had this iteration to write its files
        writer.write(_with_every_ranks_memory(cfg, rt, m))
        events.emit("step", iteration=it, loss=m.loss, first_sample=rt.consumed_samples(it),
                    consumed_samples=rt.consumed_samples(it + 1))
        if it == start_it:
            events.emit("first_iteration", iteration=it)
        hooks.after_step(it, m)
        it += 1
        saver.periodic(it)
        if it < cfg.train_iters and stop_requested(cfg.control_file, rank, rt.groups.world, done=it,
                                                     hold_timeout_s=cfg.timeout_s / 2):
            events.emit("stop_seen", iteration=it)
            if rank == 0:
                print(f"stop requested: checkpointing at iteration {it} and exiting", flush=True)
            break
    saver.final(it)
    hooks.finish(it)
    writer.close()


def main(argv: list[str] | None = None, process_start_s: float | None = None) -> int:
    """Parse Megatron-style arguments, train under the plan; exit status 0, 1 (distributed failure) or 2 (input)."""
    global PROCESS_START_S
    if process_start_s is not None:
        PROCESS_START_S = process_start_s
    logging.basicConfig(level=os.environ.get("SAILOR_LOG_LEVEL", "WARNING"))
    try:
        env = _rank_env()
    except Exception as exc:  # noqa: BLE001 - a bad SAILOR_RANK_MAP / WORLD_SIZE pair
        return _fail(0, str(exc), 2, all_ranks=True)
    rank = env.rank
    try:
        from megatron_sailor.train.arguments import parse_config
        cfg = parse_config(argv, env.world_size)
        if cfg.save:                   # before the first iteration, not after training (issue 11)
            from megatron_sailor.train.checkpoint import check_save_dir
            check_save_dir(cfg.save)
    except InputError as exc:
        return _fail(rank, str(exc), 2)
    if rank == 0:   # the first output otherwise waits for megatron-core's import and the rendezvous
        print(f"arguments checked: {cfg.train_iters} iterations on {env.world_size} rank(s); loading megatron-core "
              "and joining the process group ...", flush=True)
    from megatron_sailor.train.checkpoint import CheckpointError
    from megatron_sailor.runtime.distributed import RendezvousError
    try:
        train(cfg, env)
    except InputError as exc:
        return _fail(rank, str(exc), 2)
    except CheckpointError as exc:
        return _fail(rank, f"checkpoint refused: {exc}", 2)
    except RendezvousError as exc:
        return _fail(rank, str(exc), 1, all_ranks=True)
    except RuntimeError as exc:  # collective timeouts and peers that died
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return _fail(rank, f"rank {rank}: distributed failure: {first}", 1, all_ranks=True)
    return 0
