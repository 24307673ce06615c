"""Shared command-line plumbing: data arguments -> :class:`SimContext`, and the one-line error exit."""
from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from planner.errors import InputError, InternalError
from planner.hardware import GPUCatalog
from planner.model import ModelSpec, load_model
from planner.network import DEFAULT_CLASS_LINKS, Link, NetworkModel
from planner.plan import read_text
from planner.profiles import ProfileStore
from planner.simulator.settings import PRESETS, SimContext

NETWORK_FORMAT = "megatron-sailor-network/1"
DATA_DIR = Path(__file__).with_name("data")


def add_data_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model and data")
    g.add_argument("--model", help="built-in model name, Sailor model name (with --sailor-data) or model JSON")
    g.add_argument("--sailor-data", metavar="DIR", help="Sailor data folder (like ../shared/data/sailor): model, "
                   "profiles, network and egress prices")
    g.add_argument("--profiles", nargs="+", default=[], metavar="FILE", help="profile files (our format)")
    g.add_argument("--gpu-catalog", metavar="FILE", help="JSON file adding or overriding GPU types")
    g.add_argument("--network", metavar="FILE", help=f"network file ({NETWORK_FORMAT}); replaces link fits")
    g.add_argument("--runtime", default=None, choices=sorted(PRESETS),
                   help="runtime behaviour preset (default: megatron-sailor, or sailor-deepspeed for Sailor plans)")
    g.add_argument("--no-estimates", action="store_true",
                   help="refuse GPU types without a measured profile instead of estimating analytically")


@dataclass
class DataBundle:
    model: ModelSpec
    profiles: ProfileStore
    network: NetworkModel
    catalog: GPUCatalog
    gpus_per_node: dict[str, int]
    default_gbs: int | None


def load_network_file(path: str, base: NetworkModel) -> NetworkModel:
    try:
        data = json.loads(read_text(path))
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON ({exc.msg})", source=path) from None
    if not isinstance(data, dict) or data.get("format") != NETWORK_FORMAT:
        raise InputError(f"field 'format' must be '{NETWORK_FORMAT}'", source=path)
    unknown = sorted(set(data) - {"format", "name", "class_links", "egress_usd_per_gb", "description"})
    if unknown:
        raise InputError(f"unknown key(s) {unknown}", source=path)
    links: dict[str, Link] = {}
    for cls, spec in (data.get("class_links") or {}).items():
        if cls not in DEFAULT_CLASS_LINKS:
            raise InputError(f"class_links: unknown link class '{cls}' (known {sorted(DEFAULT_CLASS_LINKS)})",
                             source=path)
        if not isinstance(spec, dict) or set(spec) - {"bw_bytes_per_s", "latency_s"} or "bw_bytes_per_s" not in spec:
            raise InputError(f"class_links.{cls} must be {{bw_bytes_per_s, latency_s}}, got {spec!r}", source=path)
        try:
            links[cls] = Link(float(spec["bw_bytes_per_s"]), float(spec.get("latency_s", 0.0)))
        except (InputError, TypeError, ValueError) as exc:
            raise InputError(f"class_links.{cls}: {exc}", source=path) from None
    net = NetworkModel(base.catalog, name=str(data.get("name", Path(path).stem)),
                       egress_usd_per_gb=dict(base.egress_usd_per_gb))
    net = net.with_class_links(links)
    for src, row in (data.get("egress_usd_per_gb") or {}).items():
        for dst, usd in row.items():
            net.egress_usd_per_gb[(src, dst)] = float(usd)
    return net


def load_data(args: argparse.Namespace, precision: str = "fp32", model_hint: str | None = None) -> DataBundle:
    catalog = GPUCatalog.load(args.gpu_catalog)
    name = args.model or model_hint
    if args.sailor_data:
        from planner.sailor_data import load_sailor_data
        if not name:
            raise InputError("--sailor-data needs --model (OPT-350, GPT-Neo-2.7, OPT-30 or LLAMA-3-8)")
        sd = load_sailor_data(args.sailor_data, name, catalog, precision)
        bundle = DataBundle(sd.model, sd.profiles, sd.network, catalog, dict(sd.gpus_per_node),
                            sd.global_batch_size)
    else:
        if not name:
            raise InputError("no model: pass --model NAME (built-in: tiny, opt-350m, gpt-neo-2.7b, llama-3-8b)")
        model = load_model(name)
        bundle = DataBundle(model, ProfileStore(model, catalog, precision), NetworkModel(catalog), catalog, {},
                            None)
    bundle.profiles.allow_estimates = not args.no_estimates
    for path in args.profiles:
        bundle.profiles.load_file(path)
    if args.network:
        bundle.network = load_network_file(args.network, bundle.network)
    return bundle


def make_context(bundle: DataBundle, runtime: str | None, default_runtime: str = "megatron-sailor",
                 gpus_per_node: dict[str, int] | None = None) -> SimContext:
    settings = PRESETS[runtime or default_runtime]
    gpn = dict(bundle.gpus_per_node)
    gpn.update(gpus_per_node or {})
    return SimContext(bundle.model, bundle.profiles, bundle.network, bundle.catalog, settings, gpn)


def run_cli(main: Callable[[list[str] | None], int], argv: list[str] | None = None) -> int:
    """Run ``main``; turn :class:`InputError` into one ``error:`` line and exit status 2."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return main(argv)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except InternalError as exc:
        print(f"internal error: {exc}", file=sys.stderr)
        return 3
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


def to_jsonable(obj: Any) -> Any:
    if isinstance(obj, float) and (obj != obj or obj in (float("inf"), float("-inf"))):
        return None
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    return obj
