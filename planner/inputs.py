"""The planner's inputs as data: where they come from (:class:`DataSource`), loaded (:class:`DataBundle`),
and turned into the simulator's :class:`SimContext`. No argparse here (``planner.options`` maps flags to a
:class:`DataSource`); every bad file raises :class:`InputError` naming it.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from planner.errors import InputError
from planner.hardware import GPUCatalog
from planner.model import ModelSpec, load_model
from planner.network import DEFAULT_CLASS_LINKS, Link, NetworkModel
from planner.textio import read_text
from planner.profiles import ProfileStore
from planner.simulator.settings import PRESETS, SimContext

NETWORK_FORMAT = "megatron-sailor-network/1"
DATA_DIR = Path(__file__).with_name("data")


@dataclass(frozen=True)
class DataSource:
    """Where the model, profiles, network and GPU catalog come from (the ``--model``... flags as data).

    ``runtime`` names a preset of :data:`planner.simulator.settings.PRESETS` (None: the caller's default);
    ``allow_estimates=False`` refuses GPU types without a measured profile.
    """

    model: str | None = None
    sailor_data: str | None = None
    profiles: tuple[str, ...] = ()
    gpu_catalog: str | None = None
    network: str | None = None
    runtime: str | None = None
    allow_estimates: bool = True

    def __post_init__(self) -> None:
        if self.runtime is not None and self.runtime not in PRESETS:
            raise InputError(f"runtime must be one of {sorted(PRESETS)}, got {self.runtime!r}")


@dataclass(frozen=True)
class DataBundle:
    """The loaded inputs: model, profiles, network, GPU catalog, node sizes and the data's global batch size."""

    model: ModelSpec
    profiles: ProfileStore
    network: NetworkModel
    catalog: GPUCatalog
    gpus_per_node: dict[str, int]
    default_gbs: int | None


def load_network_file(path: str, base: NetworkModel) -> NetworkModel:
    """``base`` with the link classes and egress prices of a network file (``NETWORK_FORMAT``)."""
    from planner.schema.base import parse_json, validate
    from planner.schema.files import NetworkFile
    data = parse_json(read_text(path), path)
    if isinstance(data, dict) and data.get("format") == NETWORK_FORMAT:
        validate(NetworkFile, data, path)
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


def load_data(source: DataSource, precision: str = "fp32", model_hint: str | None = None) -> DataBundle:
    """Load everything ``source`` names; ``model_hint`` (e.g. a plan's model) is used when it names no model."""
    catalog = GPUCatalog.load(source.gpu_catalog)
    name = source.model or model_hint
    if source.sailor_data:
        from planner.sailor_data import load_sailor_data
        if not name:
            raise InputError("--sailor-data needs --model (OPT-350, GPT-Neo-2.7, OPT-30 or LLAMA-3-8)")
        sd = load_sailor_data(source.sailor_data, name, catalog, precision)
        bundle = DataBundle(sd.model, sd.profiles, sd.network, catalog, dict(sd.gpus_per_node),
                            sd.global_batch_size)
    else:
        if not name:
            raise InputError("no model: pass --model NAME (built-in: tiny, opt-350m, gpt-neo-2.7b, llama-3-8b)")
        model = load_model(name)
        bundle = DataBundle(model, ProfileStore(model, catalog, precision), NetworkModel(catalog), catalog, {},
                            None)
    bundle.profiles.allow_estimates = source.allow_estimates
    for path in source.profiles:
        bundle.profiles.load_file(path)
    if source.network:
        bundle = replace(bundle, network=load_network_file(source.network, bundle.network))
    return bundle


def make_context(bundle: DataBundle, runtime: str | None, default_runtime: str = "megatron-sailor",
                 gpus_per_node: dict[str, int] | None = None) -> SimContext:
    """A fresh :class:`SimContext` (runtime preset ``runtime`` or ``default_runtime``; node sizes of the data
    overridden by ``gpus_per_node``)."""
    settings = PRESETS[runtime or default_runtime]
    gpn = dict(bundle.gpus_per_node)
    gpn.update(gpus_per_node or {})
    return SimContext(bundle.model, bundle.profiles, bundle.network, bundle.catalog, settings, gpn)
