"""``sailor-profile``: profile a model and/or the network on this machine for the planner.

    sailor-profile --model tiny --mbs 1 2 --tp 1 2 -o runs/prof/profile.json \
        --network-out runs/prof/network.json --catalog-out runs/prof/catalog.json \
        --runtime-constants-out runs/prof/runtime_constants.json

Without torchrun around it, the command starts itself under ``python -m torch.distributed.run`` with
``--nproc`` local ranks (default: the largest TP, at least 2 when the network is profiled), one OpenMP
thread per rank. Under torchrun (e.g. one torchrun per node for a cross-node network profile) it runs
directly. Bad input (unknown model, TP that does not divide it, unwritable output) prints one
``error: ...`` line and exits 2 before anything is launched.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from planner.errors import InputError, OneLineParser
from planner.model import ModelSpec, load_model, with_overrides
from planner.ports import free_port

_OVERRIDES = {"num_layers": "num_layers", "hidden_size": "hidden_size", "num_attention_heads": "num_heads",
              "ffn_hidden_size": "ffn_hidden_size", "seq_length": "seq_length",
              "max_position_embeddings": "max_position_embeddings", "vocab_size": "vocab_size",
              "num_query_groups": "num_kv_heads", "make_vocab_size_divisible_by": "make_vocab_size_divisible_by"}


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="sailor-profile", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="built-in model name or model JSON (ModelSpec fields)")
    g = p.add_argument_group("Megatron-style model arguments (override --model's fields)")
    for arg in _OVERRIDES:
        g.add_argument("--" + arg.replace("_", "-"), type=int, default=None)
    p.add_argument("--name", help="model name written into the profile (default: the model's)")
    p.add_argument("--mbs", type=int, nargs="+", default=[1], help="micro-batch sizes (default 1)")
    p.add_argument("--tp", type=int, nargs="+", default=[1], help="TP degrees (default 1)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--layers-per-probe", type=int, default=2)
    p.add_argument("--stat", choices=("median", "min"), default="median",
                   help="statistic over the timed repeats (min: robust to other processes on a shared machine)")
    p.add_argument("--rounds", type=int, default=1,
                   help="measure every (TP, micro-batch) configuration, and every network message size, once "
                        "per round, round-robin, and take the median over rounds of each round's --stat (default "
                        "1: one block of repeats each; 3 resists a transient burst of load from other processes)")
    p.add_argument("--no-concurrent", action="store_true",
                   help="profile with one TP block only (others idle) instead of all blocks at once")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("-o", "--output", help="profile JSON (megatron-sailor-profile/1)")
    p.add_argument("--network-out", help="also profile the network; write megatron-sailor-network/1 here")
    p.add_argument("--network-only", action="store_true", help="profile only the network")
    p.add_argument("--sizes", type=int, nargs="+", default=None, help="message sizes in bytes (network)")
    p.add_argument("--catalog-out", help="GPU catalog JSON to create or update with this device's entry")
    p.add_argument("--gpu-type", help="GPU type name (default: cpu-<cpu model> or the CUDA device's)")
    p.add_argument("--usd-per-hour", type=float, default=0.1, help="price written to the catalog (nominal)")
    p.add_argument("--nproc", type=int, default=None, help="local ranks when starting torchrun itself")
    p.add_argument("--runtime-constants-out",
                   help="also measure the megatron-sailor preset's machine constants (memory overhead, allocator "
                        "reserve, core sharing) and write them here (the planner reads "
                        "planner/data/runtime_megatron_sailor.json, or the file SAILOR_RUNTIME_CONSTANTS names)")
    return p


def model_from(args: argparse.Namespace) -> ModelSpec:
    if not args.model and args.num_layers is None:
        raise InputError("no model: pass --model NAME|FILE.json or Megatron-style --num-layers ... arguments")
    if args.model:
        spec = load_model(args.model)
        return with_overrides(spec, **{f: getattr(args, a) for a, f in _OVERRIDES.items()},
                              name=args.name or spec.name)
    values = {f: getattr(args, a) for a, f in _OVERRIDES.items() if getattr(args, a) is not None}
    values.setdefault("ffn_hidden_size", 4 * values.get("hidden_size", 0))
    values.setdefault("max_position_embeddings", values.get("seq_length", 0))
    missing = [a for a, f in _OVERRIDES.items() if f not in values and f not in ("num_kv_heads",
                                                                                "make_vocab_size_divisible_by")]
    if missing:
        raise InputError("model dimensions missing: give --" + ", --".join(m.replace("_", "-") for m in missing))
    return ModelSpec(name=args.name or "args", **values)


def _check_out(path: str | None, flag: str) -> None:
    if path is None:
        return
    parent = Path(path).resolve().parent
    if not parent.is_dir():
        raise InputError(f"{flag} {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise InputError(f"{flag} {path}: directory {parent} is not writable")


def validate(args: argparse.Namespace, world: int) -> ModelSpec | None:
    from megatron_sailor.profiler.probe import ProfileConfig
    if args.network_only and not args.network_out:
        raise InputError("--network-only needs --network-out FILE")
    if not args.network_only and not args.output:
        raise InputError("no output: pass -o PROFILE.json (or --network-only --network-out FILE)")
    for path, flag in ((args.output, "-o"), (args.network_out, "--network-out"), (args.catalog_out, "--catalog-out"),
                       (args.runtime_constants_out, "--runtime-constants-out")):
        _check_out(path, flag)
    if args.catalog_out:
        from megatron_sailor.profiler.io import read_existing_catalog
        read_existing_catalog(args.catalog_out)        # a bad catalog fails here, before any measurement
    if args.rounds < 1:           # also checked by ProfileConfig; here for --network-only, which has none
        raise InputError(f"--rounds must be >= 1, got {args.rounds}")
    if args.network_out and world < 2:
        raise InputError(f"the network profile needs at least 2 ranks, got --nproc {world}")
    if args.sizes is not None and (len(args.sizes) < 2 or min(args.sizes) < 4):
        raise InputError("--sizes needs at least two sizes of >= 4 bytes")
    if args.network_only:
        return None
    model = model_from(args)
    ProfileConfig(tuple(args.mbs), tuple(args.tp), args.warmup, args.repeats, args.layers_per_probe,
                  stat=args.stat, rounds=args.rounds).check(model, world)
    return model


def default_nproc(args: argparse.Namespace) -> int:
    if args.nproc is not None:
        if args.nproc < 1:
            raise InputError(f"--nproc must be >= 1, got {args.nproc}")
        return args.nproc
    n = 1 if args.network_only else max(args.tp)
    return max(n, 2) if args.network_out else n


ARGV_ENV = "SAILOR_PROFILE_ARGV"   # the arguments travel to the ranks here (torchrun would parse --nproc)


def torchrun_command(nproc: int, port: int) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}", "--master-addr=127.0.0.1",
            f"--master-port={port}", "-m", "megatron_sailor.profiler.cli"]


def _relaunch(argv: list[str], nproc: int) -> int:
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env[ARGV_ENV] = json.dumps(argv)
    return subprocess.call(torchrun_command(nproc, free_port()), env=env)


def main(argv: list[str] | None = None) -> int:
    from planner.errors import run_cli
    return run_cli(_main, argv)


def _main(argv: list[str] | None) -> int:
    if argv is None:
        argv = json.loads(os.environ[ARGV_ENV]) if ARGV_ENV in os.environ else sys.argv[1:]
    argv = list(argv)
    args = build_parser().parse_args(argv)
    from megatron_sailor.train.preprocess import require_runtime
    require_runtime("sailor-profile")
    under_torchrun = "WORLD_SIZE" in os.environ
    world = int(os.environ["WORLD_SIZE"]) if under_torchrun else default_nproc(args)
    model = validate(args, world)
    if not under_torchrun and world > 1:
        return _relaunch(argv, world)
    from megatron_sailor.profiler.run import run_profiles
    return run_profiles(args, model)


if __name__ == "__main__":
    sys.exit(main())
