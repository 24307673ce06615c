"""Import a Sailor data folder (laid out like ``../shared/data/sailor``): model, profiles, network, prices.

Files read (relative to the folder):
- ``sailor/Planner/llm_info.json``: per-layer parameter and activation sizes per TP at micro-batch 1;
- ``sailor/Planner/simulations/profiles_tmp.json`` (preferred) or
  ``sailor/Planner/sailor_planner/profiles/<model>/<gpu>/profile.json``: ``[fwd_s, bwd_s, update_s]`` per
  layer id per (mbs, tp). ``update_s`` is one optimizer step of the profiled model (embedding + 2 layers +
  head), so we convert it to seconds per parameter of that model;
- ``sailor/Planner/simulations/configs/training_config_*.json``: shape of the model, global batch;
- ``sailor/providers/multizone_bandwidths_het.json``: bandwidth fits per node pair, keyed by both nodes'
  (zone, GPU type, GPUs per node) (docs/SIMULATOR.md, "Network fits");
  ``sailor/providers/intra_node_bandwidths.json``: per GPU type and GPUs in the group, inside one node;
  ``sailor/providers/gcp/communication_cost.json``: egress $/GB.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.errors import InputError, quote
from planner.hardware import GPUCatalog
from planner.model import ModelSpec, get_model, with_overrides
from planner.network import Link, NetworkModel
from planner.textio import read_text
from planner.profiles import LayerCosts, ProfileStore

SAILOR_MODELS = {"OPT-350": "opt_350", "GPT-Neo-2.7": "gpt_neo27", "OPT-30": None, "LLAMA-3-8": None}


def _json(path: Path) -> Any:
    from planner.schema.parse import parse_json
    return parse_json(read_text(path), str(path))


@dataclass
class SailorData:
    """Everything the simulator needs, taken from one Sailor data folder for one model."""

    model: ModelSpec
    sailor_model: str
    profiles: ProfileStore
    network: NetworkModel
    global_batch_size: int | None
    gpus_per_node: dict[str, int]


def _root(folder: str | Path) -> Path:
    root = Path(folder)
    if (root / "sailor" / "Planner").is_dir():
        return root / "sailor"
    if (root / "Planner").is_dir():
        return root
    raise InputError("not a Sailor data folder (no sailor/Planner inside)", source=str(folder))


def _known(name: str) -> bool:
    try:
        get_model(name)
        return True
    except InputError:
        return False


def _ties_embeddings(llm: dict, hidden_size: int, vocab_size: int) -> bool:
    """Whether Sailor's own model ties its input and output embeddings, read off ``llm_info.json``: its last
    layer (LM head + loss) holds an output matrix of at least ``vocab x hidden / tp`` parameters when untied,
    only the final norm when tied. Evidence (TP 1): OPT-350's layer 25 holds 51,513,344 = 50,304 x 1,024 (the
    padded vocabulary) + 2,048 (final norm), so the 15 GH200 OPT-350 runs trained an untied output matrix,
    although OPT itself ties (the built-in ``opt-350m`` does); GPT-Neo-2.7's layer 33 holds 5,120 (the final
    norm): tied. The artifact's training configs and plan files carry no tie flag."""
    tp, layers = min(llm.items(), key=lambda kv: int(kv[0]))
    head = layers[max(layers, key=int)]
    return float(head["params_floats"]) < hidden_size * vocab_size / int(tp)


def _model_spec(root: Path, sname: str, llm: dict) -> tuple[ModelSpec, int | None]:
    cfg_key = SAILOR_MODELS[sname]
    cfg_path = root / "Planner" / "simulations" / "configs" / f"training_config_{cfg_key}.json"
    base = get_model(sname) if _known(sname) else None
    n_layers = len(llm["1"] if "1" in llm else next(iter(llm.values()))) - 2
    if cfg_key and cfg_path.is_file():
        cfg = _json(cfg_path)
        spec = with_overrides(
            base or get_model("opt-350m"), name=sname, num_layers=cfg["num_layers"], hidden_size=cfg["hidden_size"],
            num_heads=cfg["heads"], ffn_hidden_size=4 * cfg["hidden_size"], seq_length=cfg["sequence_length"],
            max_position_embeddings=cfg["max_position_embeddings"])
    elif base is None:
        raise InputError(f"model '{sname}': no training config and no built-in shape",
                         source=str(root / "Planner" / "simulations" / "configs"))
    else:
        spec, cfg = with_overrides(base, name=sname, num_layers=n_layers), {}
    # the runs' model, not the built-in's: Sailor's OPT-350 is untied (_ties_embeddings names the evidence)
    spec = with_overrides(spec, tied_embeddings=_ties_embeddings(llm, spec.hidden_size, spec.vocab_size))
    return spec, cfg.get("global_batch_size")


def _profile_source(root: Path, sname: str) -> dict[str, Any]:
    """{gpu: {mbs: {tp: {layer_id: [f, b, u]}}}}, profiles_tmp.json first, planner copies as fallback.

    A planner copy is read only for a GPU type profiles_tmp.json lacks (that file's entry would replace it
    anyway); the keys keep their order: the planner copies' GPU types (sorted), then profiles_tmp.json's others."""
    tmp = root / "Planner" / "simulations" / "profiles_tmp.json"
    preferred: dict[str, Any] = _json(tmp).get(sname, {}) if tmp.is_file() else {}
    out: dict[str, Any] = {}
    pdir = root / "Planner" / "sailor_planner" / "profiles" / sname
    if pdir.is_dir():
        for gdir in sorted(pdir.iterdir()):
            if (gdir / "profile.json").is_file():
                out[gdir.name] = preferred[gdir.name] if gdir.name in preferred else _json(gdir / "profile.json")
    out.update(preferred)
    if not out:
        raise InputError(f"no profiles for model '{sname}'", source=str(tmp))
    return out


def _layer_costs(gpu: str, mbs: int, tp: int, table: dict, info: dict | None, n_layers: int,
                 src: str) -> LayerCosts:
    ids = [str(i) for i in range(n_layers + 2)]
    if any(i not in table for i in ids):
        raise InputError(f"profile {gpu} mbs={mbs} tp={tp} lacks layer ids 0..{n_layers + 1}", source=src)
    rows = [table[i] for i in ids]
    kw: dict[str, Any] = {}
    update_s = rows[1][2]
    if info is not None:
        p = [info[i]["params_floats"] for i in ids]
        act = [info[i]["act_mem_bytes"] * mbs for i in ids]
        kw = dict(layer_params=p[1], embedding_params=p[0], head_params=p[-1], layer_act_bytes=float(act[1]),
                  embedding_act_bytes=float(act[0]), head_act_bytes=float(act[-1]))
        profiled_params = p[0] + 2 * p[1] + p[-1]
    else:
        profiled_params = None
    per_param = update_s / profiled_params if profiled_params else update_s / 1e8
    return LayerCosts(gpu_type=gpu, mbs=mbs, tp=tp, embedding_fwd_s=rows[0][0], embedding_bwd_s=rows[0][1],
                      layer_fwd_s=tuple(r[0] for r in rows[1:-1]), layer_bwd_s=tuple(r[1] for r in rows[1:-1]),
                      head_fwd_s=rows[-1][0], head_bwd_s=rows[-1][1], update_s_per_param=per_param,
                      source=src, **kw)


def _fit_entry(v: Any, where: str, src: str) -> tuple[tuple[float, float, float], float]:
    """``[[a, b, c], peak_bytes_per_s]`` -> (fit, peak); anything else is refused, naming the entry."""
    try:
        (a, b, c), peak = v
        fit = (float(a), float(b), float(c))
        peak = float(peak)
    except (TypeError, ValueError):
        raise InputError(f"{where} must be [[a, b, c], peak_bytes_per_s], got {v!r}", source=src) from None
    if not all(math.isfinite(x) for x in fit) or not (math.isfinite(peak) and peak > 0):
        raise InputError(f"{where} must hold finite numbers and a peak > 0, got {v!r}", source=src)
    return fit, peak


def _size(key: str, where: str, src: str) -> int:
    try:
        n = int(key)
    except ValueError:
        n = 0
    if n < 1:
        raise InputError(f"{where}: GPUs per node must be a positive integer, got {key!r}", source=src)
    return n


def _pair_links(data: dict, src: str) -> dict:
    """``{sz: {sg: {sn: {dz: {dg: {dn: [[a,b,c], peak]}}}}}}`` -> {(sz, sg, sn, dz, dg, dn): Link}.

    ``sn`` / ``dn`` are the GPUs per node of the sending / receiving node; the fit is that node pair's
    bandwidth (one NIC per node: shared by every transfer between the two nodes)."""
    out = {}
    file_name = Path(src).name
    for sz, by_gpu in data.items():
        for sg, by_n in by_gpu.items():
            for sn, by_dz in by_n.items():
                for dz, by_dg in by_dz.items():
                    for dg, table in by_dg.items():
                        for dn, v in table.items():
                            where = f"{sz}.{sg}.{sn}.{dz}.{dg}.{dn}"
                            fit, peak = _fit_entry(v, where, src)
                            key = (sz, sg, _size(sn, where, src), dz, dg, _size(dn, where, src))
                            label = f"{sz}/{sg}/{key[2]} -> {dz}/{dg}/{key[5]} ({file_name})"
                            out[key] = Link(peak, 0.0, fit, shared=True, label=label)
    return out


def _network(root: Path, catalog: GPUCatalog) -> NetworkModel:
    net = NetworkModel(catalog, name="sailor")
    bw_path = root / "providers" / "multizone_bandwidths_het.json"
    if bw_path.is_file():
        net.pair_links.update(_pair_links(_json(bw_path), str(bw_path)))
        net.source = str(bw_path)
    intra_path = root / "providers" / "intra_node_bandwidths.json"
    if intra_path.is_file():
        for gpu, by_n in _json(intra_path).items():
            for n, v in by_n.items():
                where = f"{gpu}.{n}"
                fit, peak = _fit_entry(v, where, str(intra_path))
                net.intra_links[(gpu, _size(n, where, str(intra_path)))] = Link(
                    peak, 0.0, fit, label=f"{gpu} inside a node, {n} GPUs ({intra_path.name})")
    cost_path = root / "providers" / "gcp" / "communication_cost.json"
    if cost_path.is_file():
        for sz, row in _json(cost_path).items():
            for dz, usd in row.items():
                net.egress_usd_per_gb[(sz, dz)] = float(usd)
    return net


CALIBRATED = "calibrated"


def load_sailor_data(folder: str | Path, model_name: str, catalog: GPUCatalog | None = None,
                     precision: str = "fp32", smooth_window: float | None | str = CALIBRATED) -> SailorData:
    """Everything for ``model_name``; a file of the wrong shape is one InputError naming the folder.
    ``smooth_window``: profile smoothing across micro-batch sizes (None: off; default: the window chosen by the
    calibration, ``planner/data/calibration_sailor_deepspeed.json``)."""
    if smooth_window == CALIBRATED:
        from planner.simulator.settings import calibration
        smooth_window = calibration()["profile_smoothing_window"]
    try:
        return _load_sailor_data(folder, model_name, catalog, precision, smooth_window)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, ZeroDivisionError) as exc:
        if isinstance(exc, InputError):
            raise
        raise InputError(f"malformed Sailor data ({type(exc).__name__}: {quote(str(exc), 120)})",
                         source=str(folder)) from None


def _load_sailor_data(folder: str | Path, model_name: str, catalog: GPUCatalog | None,
                      precision: str, smooth_window: float | None) -> SailorData:
    root = _root(folder)
    catalog = catalog or GPUCatalog()
    sname = next((k for k in SAILOR_MODELS if k.lower() == model_name.lower()), None)
    if sname is None:
        sname = {"opt-350m": "OPT-350", "gpt-neo-2.7b": "GPT-Neo-2.7", "llama-3-8b": "LLAMA-3-8",
                 "opt-30b": "OPT-30"}.get(
            model_name.lower())
    if sname is None:
        raise InputError(f"--model '{model_name}' is not in the Sailor data; use one of {sorted(SAILOR_MODELS)}")
    llm_all = _json(root / "Planner" / "llm_info.json")
    if sname not in llm_all:
        raise InputError(f"model '{sname}' missing", source=str(root / "Planner" / "llm_info.json"))
    llm = llm_all[sname]
    spec, gbs = _model_spec(root, sname, llm)
    store = ProfileStore(spec, catalog, precision)
    src = str(root / "Planner" / "simulations" / "profiles_tmp.json")
    for gpu, by_mbs in _profile_source(root, sname).items():
        if gpu not in catalog:
            continue
        for mbs, by_tp in by_mbs.items():
            for tp, table in by_tp.items():
                store.add(_layer_costs(gpu, int(mbs), int(tp), table, llm.get(tp), spec.num_layers, src))
    if smooth_window is not None:
        store.smooth_across_mbs(float(smooth_window))
    gpn_path = root / "Planner" / "simulations" / "configs" / "basic_cluster_config.json"
    gpn = {k: v["gpus_per_node"] for k, v in _json(gpn_path).items() if isinstance(v, dict)} \
        if gpn_path.is_file() else {}
    return SailorData(spec, sname, store, _network(root, catalog), gbs, gpn)
