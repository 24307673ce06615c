"""Per-iteration Megatron-LM behaviour of the training loop: learning-rate schedule, log line, validation,
TensorBoard / W&B.

Contract: the loop calls :meth:`IterationHooks.before_step` before iteration ``it`` (sets the scheduled
learning rate from the samples consumed before ``it``), :meth:`after_step` with its metrics (Megatron-style
log line every ``--log-interval`` iterations and on the first and last, logger scalars, validation every
``--eval-interval`` iterations) and :meth:`finish` once (a last validation when training reached
``--train-iters`` and the last iteration was not just evaluated; writers closed). Every rank calls every
method (validation is collective); only rank 0 prints and writes.
"""
from __future__ import annotations

from typing import Any

from megatron_sailor.train.evaluate import evaluate, perplexity
from megatron_sailor.train.loggers import TrainLoggers
from megatron_sailor.train.lr_schedule import set_lr


class IterationHooks:
    def __init__(self, cfg: Any, rank: int, rt: Any, valid: Any, start_it: int) -> None:
        self.cfg, self.rank, self.rt, self.valid, self.start_it = cfg, rank, rt, valid, start_it
        self.lr = cfg.optimizer.lr
        self.evaluated_at = -1
        run_config = {"train_iters": cfg.train_iters, "global_batch_size": cfg.plan.global_batch_size,
                      "micro_batch_size": cfg.plan.micro_batch_size, "seed": cfg.seed,
                      "model": cfg.model.to_dict(), "lr": cfg.optimizer.lr}
        self.loggers = TrainLoggers(cfg.loggers, rank, run_config, cfg.save)
        if rank == 0:
            for line in self.loggers.paths:
                print(f"logging: {line}", flush=True)
            if valid is None and cfg.eval_iters > 0:
                print(f"no validation: the validation part of --split {cfg.split!r} has no sample", flush=True)

    def before_step(self, it: int) -> None:
        if self.cfg.lr_schedule is not None:
            self.lr = self.cfg.lr_schedule.lr_at(self.rt.consumed_samples(it))
            set_lr(self.rt.optimizer, self.lr)

    def after_step(self, it: int, m: Any) -> None:
        done, cfg = it + 1, self.cfg
        samples = self.rt.consumed_samples(done)
        if self.rank == 0:
            if done % cfg.log_interval == 0 or it == self.start_it or done == cfg.train_iters:
                print(f"iteration {done:>4}/{cfg.train_iters} | loss {m.loss:.5f} | "
                      f"{m.iteration_time_s * 1e3:8.1f} ms | {m.tokens_per_s:9.0f} tokens/s | "
                      f"grad norm {m.grad_norm:.4f} | lr {self.lr:.4E} | consumed samples {samples}", flush=True)
            self.loggers.train(done, samples, m.loss, self.lr, m.grad_norm, m.iteration_time_s,
                               cfg.plan.global_batch_size)
        if done % cfg.eval_interval == 0 and done < cfg.train_iters:
            self._validate(done)

    def _validate(self, done: int) -> None:
        if self.valid is None or self.cfg.eval_iters == 0:
            return
        loss = evaluate(self.rt, self.valid, self.cfg.eval_iters)
        self.evaluated_at = done
        if self.rank == 0:
            ppl = perplexity(loss)
            print(f"validation loss at iteration {done} | lm loss value: {loss:.6E} | lm loss PPL: {ppl:.6E} |",
                  flush=True)
            self.loggers.validation(done, self.rt.consumed_samples(done), loss, ppl)

    def finish(self, done: int) -> None:
        try:
            if done >= self.cfg.train_iters and self.evaluated_at != done:
                self._validate(done)
        finally:
            self.loggers.close()
