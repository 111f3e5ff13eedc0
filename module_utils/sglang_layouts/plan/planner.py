"""The planner: one plan per host, each layout's verdict, memory per rank, KV capacity and units.

One source of truth: the filter plugins, the modules, the simulator and the report import this
module; nothing else restates its rules. Its parts: the inputs (plan/inputs.py), the
parallelism rules (plan/rules.py), the per-rank memory model (estimate/memory.py), where the units run
(plan/placement.py); this file puts them together (plan_layout, plan_host) and checks the layouts of a
host against each other (units, ports, shared GPUs).
"""

from __future__ import annotations

import difflib
import json
import math
import os

from ..engines import SGLANG, Engine, engine_flags, flag_index
from ..engines import engine as engine_spec
from ..estimate.memory import (
    CUDA_CONTEXT_GIB,
    MIN_DYNAMIC_GIB,
    TRANSIENT_LAYERS,
    allocation_sequence,
    allocator_env,
    cuda_context_gib,
    decode_cost,
    kv_dtype_bytes,
    kv_pool,
    largest_layer_bytes,
    pp_layer_ranges,
    stage_bytes,
    weights_assumptions,
)
from ..estimate.model import GIB, SUPPORTED_ARCHITECTURES, ModelSpec, PlanError, load_model
from ..secrets import MASK, is_secret, mask_env
from ..secrets import patterns as secret_patterns
from ..serve.render import render_argv, render_env, slug, unit_name
from ..speed import pd_inputs, predict_pd
from ..speed import predict as predict_speed
from . import validate
from .inputs import (
    LAYOUT_KEYS,
    _float,
    check_env,
    check_text,
    inputs_digest,
    normalize_cluster,
    normalize_hardware,
    normalize_layout,
    normalize_serving,
)
from .placement import add_probe_urls, layout_units, placement, units_on
from .rules import layout_problems, moe_dense_tp_rule, parallel_shape

__all__ = [
    "LAYOUT_KEYS",
    "SUPPORTED_ARCHITECTURES",
    "PlanError",
    "allocation_sequence",
    "decode_cost",
    "inputs_digest",
    "load_model",
    "plan_host",
    "plan_layout",
    "sglang_flags",
]

PLAN_SCHEMA = "sglang-layouts/plan/v1"


def sglang_flags(sglang_version: str | None = None) -> dict:
    """Flags of SGLang sglang_version as its own parser declares them (data/sglang_flags/<version>.json)."""
    return engine_flags(SGLANG, sglang_version)


# ---------------------------------------------------------------------------
# Input normalisation
# ---------------------------------------------------------------------------


def canonical_args(
    name: str, args: dict, eng: Engine = SGLANG, sglang_version: str | None = None
) -> dict[str, object]:
    """A layout's args: mapping with keys as the engine's canonical flags (SGLang's of sglang_version)."""
    data = engine_flags(eng, sglang_version)
    index = flag_index(data)
    version = data.get(f"{eng.name}_version", "?")
    out = {}
    for key, value in args.items():
        spelled = str(key) if str(key).startswith("--") else "--" + str(key).replace("_", "-")
        flag = index.get(spelled)
        if flag is None:
            close = difflib.get_close_matches(spelled, index, n=1)
            raise PlanError(
                f"layout {name}: {eng.label} {version} has no flag {spelled}"
                + (f" (did you mean {close[0]}?)" if close else "")
                + f". Remove it from args: or pin an {eng.label} that has it."
            )
        if flag in eng.structural_flags:
            raise PlanError(f"layout {name}: set {flag} with {eng.structural_flags[flag]}, not under args:")
        meta = data["flags"][flag]
        if not meta.get("takes_value") and not isinstance(value, bool):
            raise PlanError(
                f"layout {name}: {flag} is a switch; write {key}: true (or false to leave it off)"
            )
        if meta.get("takes_value") and isinstance(value, bool):
            raise PlanError(f"layout {name}: {flag} takes a value, not {value!r}")
        choices = meta.get("choices")
        if choices and not isinstance(value, bool) and str(value) not in [str(c) for c in choices]:
            raise PlanError(
                f"layout {name}: {flag} must be one of {', '.join(map(str, choices))}, not {value!r}"
            )
        out[flag] = value
    return out


# ---------------------------------------------------------------------------
# Rules
# ---------------------------------------------------------------------------


# ---------------------------------------------------------------------------
# Memory
# ---------------------------------------------------------------------------


# ---------------------------------------------------------------------------
# Plan one layout
# ---------------------------------------------------------------------------


def _r(x: float, nd: int = 2) -> float:
    return round(x, nd)


def plan_layout(
    layout: dict,
    spec: ModelSpec,
    hardware: dict,
    serving: dict,
    cluster: dict | None = None,
    sglang_version: str | None = None,
) -> dict:
    """Verdict, memory per rank, KV capacity, argv and env of one layout (on one host of `cluster`).

    args: are checked against the flags of SGLang sglang_version (the newest table when None).
    A layout with a `pd:` key is prefill/decode disaggregation: pd.plan_pd_layout plans each of its roles here."""
    if isinstance(layout, dict) and "pd" in layout:
        from .pd import plan_pd_layout

        return plan_pd_layout(layout, spec, hardware, serving, cluster, sglang_version)
    lay = normalize_layout(layout)
    hardware = normalize_hardware(hardware)
    serving = normalize_serving(serving)
    cluster = cluster or normalize_cluster(None, None)
    engine_name = str(lay["engine"] or serving.get("engine") or "sglang").lower()
    try:
        eng = engine_spec(engine_name)
    except PlanError as e:
        key = "engine" if lay["engine"] else "sglang_engine"
        raise PlanError(f"layout {lay['name']}: {key} {engine_name!r}: {e}") from None
    lay_args = dict(lay["args"])
    if spec.load_format and not {"load_format", "--load-format", "load-format"} & set(map(str, lay_args)):
        lay_args["load_format"] = spec.load_format  # the model-wide choice; a layout's args: win
    args = canonical_args(lay["name"], lay_args, eng, sglang_version)
    # one rule per kind of value, however it reaches the engine (plan/validate.py)
    flag_table = engine_flags(eng, sglang_version)["flags"]
    validate.check_arg_values(lay["name"], args, flag_table, eng, serving["api_key_set"])
    validate.check_serving_overrides(lay["name"], args, eng)
    if "--host" in args:
        validate.check_bind(f"layout {lay['name']}: args.host", args["--host"], serving["api_key_set"])
    # a layout may override serving-wide flags through args:
    eff = dict(serving)
    for key, flag in eng.serving_flags.items():
        if flag in args:
            eff[key] = args[flag]
    fraction_key = eng.fraction_key
    mfs = _float(eff[fraction_key], f"layout {lay['name']}: {fraction_key}")
    par = parallel_shape(lay, eng)
    par["pp_layer_partition"] = validate.pp_partition(lay["env"], lay["name"], par["pp"], spec.num_layers)
    # the allocator this path needs, unless the layout chose one (memory.allocator_env)
    allocator = allocator_env(spec, par, eng.name, hardware.get("gpu_name"), lay["env"])
    if allocator:
        lay = {**lay, "env": {**lay["env"], **allocator}}
    dense_notes: list[str] = []
    moe_dense_tp_rule(lay["name"], args, par, spec, dense_notes)
    reasons, notes = layout_problems(lay, par, spec, hardware, eng)
    notes += dense_notes
    if allocator:
        notes.append(
            f"{lay['name']}: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True in the servers' env: SGLang's "
            "MXFP4 weight swizzle on this GPU (triton_kernels) leaves free fragments that PyTorch's default "
            "allocator keeps, and gpt-oss-120b tp1 did not load on one H100 without it; set "
            "PYTORCH_CUDA_ALLOC_CONF in the layout's env to choose otherwise"
        )
    if par["nnodes"] > 1 and not reasons:
        _place_nodes(lay["name"], par, cluster, reasons, notes)
    if not 0 < mfs < 1:
        reasons.append(f"{lay['name']}: {fraction_key} must be between 0 and 1, not {mfs}.")
    ctx = eff.get("context_length")
    if ctx is not None and spec.max_context and int(ctx) > spec.max_context:
        reasons.append(
            f"{lay['name']}: context_length {ctx} exceeds the model's max_position_embeddings {spec.max_context}; "
            f"{eng.label} refuses it at start."
        )
    capacity = hardware["gpu_memory_gib"]
    budget = mfs * capacity
    gpus_per_node = (
        par["gpus_per_engine"] // par["nnodes"] if par["gpus_per_engine"] % par["nnodes"] == 0 else 0
    )
    gpu_ids = (
        lay["gpus"] if lay["gpus"] is not None else list(range(min(gpus_per_node, hardware["gpu_count"])))
    )
    plan = {
        "name": lay["name"],
        "engine": engine_name,
        "verdict": "invalid",
        "failure": None,
        "reasons": reasons,
        "notes": notes,
        "gpus_used": par["gpus_per_engine"] * par["replicas"],
        "gpu_ids": gpu_ids,
        "nnodes": par["nnodes"],
        "node_rank": par.get("node_rank", 0),
        "nodes": par.get("nodes", [cluster["host"]] if cluster["host"] else []),
        "parallel": par,
        "weights_gib_per_gpu": None,
        # what the weight figure leaves out on this layout's path (memory.weights_assumptions)
        "weights_assumptions": [],
        "budget_gib": _r(budget),
        "kv_tokens": None,
        "kv_tokens_total": None,
        "kv_pool": None,
        "kv_bytes_per_token": None,
        "ranks": [],
        "cost": None,
        "port": lay["port"] or int(serving["base_port"]),
        "unit_name": unit_name(spec.name, lay["name"], eng.unit_prefix),
        "conflicts": [],
        fraction_key: mfs,
        # random weights of the checkpoint's shapes: memory, KV capacity and speed are real, outputs are not
        "force": lay["force"],
        "load_format": args.get("--load-format") or "auto",
        "dummy_weights": args.get("--load-format") == "dummy",
    }
    flag_table = engine_flags(eng, sglang_version)
    flags = render_argv(spec, lay, par, eff, args, plan["port"], eng, flag_table)
    plan["flags"] = flags
    plan["argv"] = [*eng.launcher, *flags]
    plan["env"] = render_env(lay, gpu_ids, hardware, engine_name, sglang_version)
    if par["replicas"] > 1 and not reasons:
        _place_replicas(plan, spec, lay, par, eff, args, hardware, cluster, eng, flag_table, sglang_version)
        validate.check_replica_reach(plan, str(eff["host"]))
    validate.check_layout_ports(plan, lay["port"] is not None)
    # Secret values never enter the plan: the role reads them from the inputs (layout_secret_env)
    # straight into the EnvironmentFile; everything downstream of the plan sees the mask.
    secret_env = serving.get("secret_env")
    plan["secret_env"] = sorted(k for k, v in plan["env"].items() if is_secret(k, secret_env, v))
    plan["env"] = mask_env(plan["env"], secret_env)
    for replica in plan.get("replicas") or []:
        replica["env"] = mask_env(replica["env"], secret_env)
    plan["units"] = layout_units(plan)
    plan["placement"] = placement(plan, cluster["host"])
    add_probe_urls(plan, eff["host"])
    if plan["reasons"]:
        plan["failure"] = "invalid"
        return plan

    # -- memory per rank -----------------------------------------------------
    stages = stage_bytes(spec, par, eng.name, hardware.get("gpu_name"), plan["env"])
    plan["weights_assumptions"] = weights_assumptions(
        spec, par, eng.name, hardware.get("gpu_name"), plan["env"]
    )
    notes += [f"{lay['name']}: {a}" for a in plan["weights_assumptions"]]
    ranges = pp_layer_ranges(spec.num_layers, par["pp"], par["pp_layer_partition"])
    kvb = kv_dtype_bytes(spec, eff.get("kv_cache_dtype"))
    ranks = []
    stage_kv_tokens = []
    pools: list[dict] = []
    kv_gib_min = math.inf
    # SGLang sizes its pool from the memory free before load (CUDA context gone: measured for one
    # GPU, memory.cuda_context_gib); vLLM's utilization covers the whole card and its profiled
    # activation peak, whose reserve was set beside the 1 GiB context (no vLLM start on a GPU yet).
    if eng.fraction_covers_activations:
        context = CUDA_CONTEXT_GIB
        reserve = context + eng.activation_reserve_gib
    else:
        context = cuda_context_gib(par["gpus_per_engine"])
        reserve = mfs * context
    kv_fixed_gib = _fixed_kv_gib(eng, args, lay["env"])
    for pp_rank, comps in enumerate(stages):
        w = sum(comps.values()) / GIB
        layers = ranges[pp_rank]
        kv_gib = budget - w - reserve if kv_fixed_gib is None else kv_fixed_gib
        kv_gib_min = min(kv_gib_min, kv_gib)
        # full, sliding-window or linear-state pools, as SGLang sizes them (memory.kv_pool)
        pool = kv_pool(spec, par, kvb, layers, kv_gib)
        kv_per_token = pool["bytes_per_token"]
        stage_kv_tokens.append(pool["tokens"])
        if not pools or pool["tokens"] < pools[0]["tokens"]:
            pools[:] = [pool]
        for tp_rank in range(par["tp"]):
            rank = pp_rank * par["tp"] + tp_rank
            ranks.append(
                {
                    "rank": rank,
                    "tp_rank": tp_rank,
                    "pp_rank": pp_rank,
                    "node": rank // (par["tp"] * par["pp"] // par["nnodes"]),
                    "gpu": gpu_ids[rank % len(gpu_ids)] if gpu_ids else rank,
                    "layers": list(layers),
                    "weights_gib": _r(w, 3),
                    "kv_gib": _r(max(kv_gib, 0.0), 3),
                    "kv_bytes_per_token": kv_per_token,
                    "components": {k: _r(v / GIB, 3) for k, v in sorted(comps.items())},
                }
            )
    worst = max(ranks, key=lambda r: r["weights_gib"])
    weights = worst["weights_gib"]
    plan["ranks"] = ranks
    plan["weights_gib_per_gpu"] = _r(weights)
    plan["kv_bytes_per_token"] = max(r["kv_bytes_per_token"] for r in ranks)
    transient = TRANSIENT_LAYERS * largest_layer_bytes(spec, par) / GIB
    usable = capacity - context
    if weights > usable:
        plan["verdict"], plan["failure"] = "oom", "oom_at_load"
        # the usual cause: fewer GPUs than meant (ep adds none)
        moved = [n for n in notes if " uses " in n]
        plan["reasons"] += moved
        plan["notes"] = [n for n in notes if n not in moved]
        plan["reasons"].append(
            f"{lay['name']}: {par['gpus_per_engine']} GPUs, about {weights:.1f} GiB of weights each against the "
            f"{budget:.1f} GiB budget ({capacity:g} GiB per GPU): CUDA runs out of memory while loading the weights, "
            f"and no {eng.fraction_flag} can help. Spread the model over more GPUs."
        )
    elif weights + reserve >= budget:
        need = (weights + context + eng.activation_reserve_gib) / capacity
        plan["verdict"], plan["failure"] = "oom", "kv_no_memory"
        plan["reasons"].append(
            f"{lay['name']}: the weights ({weights:.1f} GiB per GPU) leave no KV cache inside the {budget:.1f} GiB "
            f"budget ({fraction_key} {mfs} x {capacity:g} GiB): {eng.kv_stop_message}. "
            f"Raise {fraction_key} above {need:.3f} or spread the model over more GPUs."
        )
    else:
        plan["verdict"] = "fits"
        if weights + transient > usable:
            plan["notes"].append(
                f"{lay['name']}: only {usable - weights:.1f} GiB stay free during load for transient buffers "
                f"(about {transient:.1f} GiB for the largest layer); the load may OOM."
            )
    tokens = min(stage_kv_tokens) if plan["verdict"] == "fits" else 0
    plan["kv_tokens"] = tokens
    plan["kv_pool"] = {k: v for k, v in pools[0].items() if k != "note"} if pools else None
    if pools and pools[0].get("note") and plan["verdict"] == "fits":
        plan["notes"].append(f"{lay['name']}: {pools[0]['note']}.")
    groups = par["dp"] if par["dp"] > 1 else 1
    plan["kv_tokens_total"] = tokens * groups * par["replicas"]
    if plan["verdict"] == "fits" and ctx and tokens < int(ctx):
        if eng.short_kv_fatal:
            plan["verdict"], plan["failure"] = "oom", "kv_no_memory"
            plan["reasons"].append(
                f"{lay['name']}: the KV cache holds {tokens} tokens, fewer than the context length {ctx}: "
                f"{eng.label} refuses to start. Raise {fraction_key} or lower sglang_context_length."
            )
        else:
            plan["notes"].append(
                f"{lay['name']}: the KV cache holds {tokens} tokens, fewer than context_length {ctx}; "
                "SGLang will cap request length."
            )
    if plan["verdict"] == "fits" and not eng.fraction_covers_activations:
        dynamic = (1 - mfs) * capacity
        if dynamic < MIN_DYNAMIC_GIB:
            plan["notes"].append(
                f"{lay['name']}: only {dynamic:.1f} GiB per GPU stay outside the static pool for CUDA graphs and "
                "activations; lower mem_fraction_static if it OOMs while serving."
            )
    plan["cost"] = decode_cost(spec, par, stages, hardware, eng.name)
    return plan


def _fixed_kv_gib(eng: Engine, args: dict, env: dict) -> float | None:
    """A KV-cache size given outright (vLLM: --kv-cache-memory-bytes, or on CPU VLLM_CPU_KVCACHE_SPACE
    in GiB), else None: the fraction sizes it."""
    if eng.kv_size_flag and args.get(eng.kv_size_flag) is not None:
        return _float(args[eng.kv_size_flag], eng.kv_size_flag.lstrip("-").replace("-", "_")) / GIB
    if eng.kv_size_env_gib and env.get(eng.kv_size_env_gib):
        return _float(env[eng.kv_size_env_gib], eng.kv_size_env_gib)
    return None


# ---------------------------------------------------------------------------
# Plan one host
# ---------------------------------------------------------------------------


ROUTER_LAUNCHER = ("python3", "-m", "sglang_router.launch_router")


def _place_replicas(
    plan, spec, lay, par, serving, args, hardware, cluster, eng, flag_table, sglang_version
) -> None:
    """Replicas fill each host of the group in GPU blocks, then the next host; a router fronts them.

    The layout's port is the router's; replica r listens on port + 1 + r.
    """
    name, n = lay["name"], par["replicas"]
    per_engine = par["gpus_per_engine"]
    if par["nnodes"] > 1:
        plan["reasons"].append(
            f"{name}: replicas of a multi-node layout are not supported; use one or the other."
        )
        plan["failure"] = "invalid"
        return
    per_host = hardware["gpu_count"] // per_engine
    hosts = cluster["hosts"] or [cluster["host"]]
    if lay["gpus"] is not None:
        plan["reasons"].append(f"{name}: replicas place themselves on GPU blocks; drop gpus:.")
        plan["failure"] = "invalid"
        return
    if n > per_host * len(hosts):
        plan["reasons"].append(
            f"{name}: {n} replicas of {per_engine} GPUs need {-(-n // max(per_host, 1))} hosts with "
            f"{hardware['gpu_count']} GPUs; group {cluster['group']} has {len(hosts)}."
        )
        plan["failure"] = "invalid"
        return
    replicas, here = [], []
    for r in range(n):
        host_index, block = divmod(r, per_host)
        gpus = list(range(block * per_engine, (block + 1) * per_engine))
        port = plan["port"] + 1 + r
        entry = {
            "index": r,
            "host": hosts[host_index],
            "address": cluster["addresses"][host_index] if cluster["addresses"] else hosts[host_index],
            "gpu_ids": gpus,
            "port": port,
            "unit_name": unit_name(spec.name, f"{name}-r{r}", eng.unit_prefix),
            "flags": render_argv(spec, lay, par, serving, args, port, eng, flag_table),
            "env": render_env(lay, gpus, hardware, plan["engine"], sglang_version),
        }
        entry["url"] = (
            f"http://{entry['address'] if entry['host'] != cluster['host'] else '127.0.0.1'}:{port}"
        )
        replicas.append(entry)
        if entry["host"] == cluster["host"]:
            here += gpus
    plan["replicas"] = replicas
    plan["gpu_ids"] = here
    plan["nodes"] = sorted({r["host"] for r in replicas}, key=hosts.index)
    router_host = hosts[0]
    workers = [f"http://{r['address']}:{r['port']}" for r in replicas]
    if all(r["host"] == router_host for r in replicas):
        workers = [f"http://127.0.0.1:{r['port']}" for r in replicas]
    plan["router"] = {
        "host": router_host,
        "port": plan["port"],
        "unit_name": unit_name(spec.name, f"{name}-router", eng.unit_prefix),
        "workers": workers,
        "flags": [
            "--worker-urls",
            *workers,
            "--host",
            str(serving["host"]),
            "--port",
            str(plan["port"]),
            "--policy",
            "cache_aware",
            # every router opens a Prometheus listener (29000 by default): one per router, or the
            # second router on a host loses its API port while staying alive (docs/router.md)
            "--prometheus-port",
            str(plan["port"] + 1000),
        ],
    }
    plan["router"]["argv"] = [*ROUTER_LAUNCHER, *plan["router"]["flags"]]


def _place_nodes(name: str, par: dict, cluster: dict, reasons: list[str], notes: list[str]) -> None:
    """Node ranks follow the inventory order of the group; rank 0's address is the rendezvous."""
    nnodes, hosts = par["nnodes"], cluster["hosts"]
    if len(hosts) < nnodes:
        reasons.append(
            f"{name}: nnodes {nnodes} needs {nnodes} hosts in group {cluster['group']}, which has {len(hosts)}"
            + (f" ({', '.join(hosts)})" if hosts else "")
            + "; add hosts to the group or set sglang_cluster_group."
        )
        return
    par["nodes"] = hosts[:nnodes]
    par["dist_init_addr"] = f"{cluster['addresses'][0]}:{cluster['dist_init_port']}"
    if cluster["host"] in par["nodes"]:
        par["node_rank"] = par["nodes"].index(cluster["host"])
    else:
        par["node_rank"] = None
        notes.append(f"{name} runs on {', '.join(par['nodes'])}, not on {cluster['host']}.")


_MODEL_CACHE: dict[str, ModelSpec] = {}


def _cached_model(model: dict) -> ModelSpec:
    """load_model, memoised on the model mapping and the files' mtimes (Ansible templates lazily, often)."""
    path = str(model.get("path") or "")
    stamps = []
    if path and os.path.isdir(path):
        for entry in sorted(os.listdir(path)):
            if entry == "config.json" or entry.endswith(".safetensors"):
                stamps.append((entry, os.stat(os.path.join(path, entry)).st_mtime_ns))
    key = json.dumps([model, stamps], sort_keys=True, default=str)
    if key not in _MODEL_CACHE:
        _MODEL_CACHE.clear()
        _MODEL_CACHE[key] = load_model(model)
    return _MODEL_CACHE[key]


def plan_host(inputs: dict) -> dict:
    """The plan document for one host (see docs/ARCHITECTURE.md)."""
    validate.check_inputs(inputs)
    layouts = inputs["layouts"]
    names = [layout.get("name") for layout in layouts]
    dupes = sorted({n for n in names if n and names.count(n) > 1})
    if dupes:
        raise PlanError(f"layout names must be unique; repeated: {', '.join(dupes)}")
    model = inputs.get("model") or {}
    if isinstance(model, dict):
        for key in ("name", "path"):
            check_text(model.get(key), "sglang_model:", key)
    spec = _cached_model(model)
    hardware = normalize_hardware(inputs.get("hardware") or {})
    serving = normalize_serving(inputs.get("serving") or {})
    cluster = normalize_cluster(inputs.get("cluster"), inputs.get("host"))
    validate.check_service_env(inputs.get("service_env"))
    # The SGLang the host gets (sglang_version): its own flags are what args: may use.
    sglang_version = inputs.get("sglang_version")
    if sglang_version in ("", "None"):
        sglang_version = None
    sglang_table = sglang_flags(sglang_version)
    search = None
    if inputs.get("search") is not None:
        # sglang_layout_search: the candidates worth measuring join the layouts (plan/search.py)
        from .search import run as run_search
        from .search import shortlist_marks

        search, shortlisted = run_search(
            inputs["search"], layouts, spec, hardware, serving, cluster, sglang_version, inputs.get("bench")
        )
        layouts = [*layouts, *shortlisted]
    plans = [plan_layout(layout, spec, hardware, serving, cluster, sglang_version) for layout in layouts]
    speed_note = _add_speed(plans, hardware, inputs.get("bench"))
    if search is not None:
        shortlist_marks(plans, search)
    _unit_collisions(plans)
    _conflicts(plans, inputs.get("host"))
    _port_collisions(plans, inputs.get("host"))
    return {
        "schema": PLAN_SCHEMA,
        "inputs_digest": inputs_digest(inputs),
        "host": inputs.get("host"),
        "model": {
            "name": spec.name,
            "path": spec.path,
            "architecture": spec.architecture,
            "config_source": spec.config_source,
            "quantization": spec.quant.describe(),
            "vocab_size": int(spec.config["vocab_size"]),
        },
        "mode": spec.mode,
        "sglang_version": sglang_table.get("sglang_version"),
        "hardware": hardware,
        "serving": {k: v for k, v in serving.items() if k != "api_key_set"},
        "layouts": plans,
        "speed_note": speed_note,
        **({"search": search} if search is not None else {}),
    }


SPEED_HARDWARE_KEYS = ("gpu_name", "gpu_memory_bandwidth_gbs", "gpu_interconnect", "gpu_memory_gib")


def _add_speed(plans: list[dict], hardware: dict, bench: dict | None) -> str | None:
    """Each fitting layout's predicted speed (speed.py) at the inventory's benchmark; why not, once."""
    why_not = None
    for p in plans:
        p["speed"] = None
        if p["verdict"] == "fits":
            # a pd layout: each pool's rate, the rate-matched throughput and the KV transfer (speed.py)
            p["speed"], why = (predict_pd if p.get("pd") else predict_speed)(p, hardware, bench)
            why_not = why_not or why
            if p["speed"]:
                # what a record needs to predict this layout again at another workload (report/speed_check.py)
                p["speed"]["hardware"] = {k: hardware.get(k) for k in SPEED_HARDWARE_KEYS}
                if p.get("pd"):
                    # a pd layout's roles as predict_pd reads them: the record keeps no role plans
                    p["speed"]["pd_inputs"] = pd_inputs(p)
    return why_not


def _units_here(p: dict, host: str | None) -> list[str]:
    """The units a layout really runs on this host: its own, or its replicas' (pd: prefill and
    decode servers') and router's."""
    if not p["placement"]["replicated"]:
        return [p["unit_name"]]
    return [unit["name"] for unit in units_on(p, host)]


def _conflicts(plans: list[dict], host: str | None = None) -> None:
    """Units that share a GPU conflict (systemd Conflicts=): starting one stops the others."""
    deployable = [q for q in plans if q["verdict"] != "invalid"]
    for p in plans:
        mine = set(_units_here(p, host))
        p["conflicts"] = sorted(
            {
                unit
                for q in deployable
                if q is not p and set(q["gpu_ids"]) & set(p["gpu_ids"])
                for unit in _units_here(q, host)
                if unit not in mine
            }
        )


def _unit_collisions(plans: list[dict]) -> None:
    """Two layouts (or a replica / router unit) whose names reduce to one unit: the second would replace the first."""
    seen: dict[str, str] = {}
    for p in plans:
        pd_units = [
            u
            for role in ("prefill", "decode", "router")
            for u in (p.get("pd") or {}).get(role, {}).get("units", [])
        ]
        for unit in dict.fromkeys([p["unit_name"], *(u["name"] for u in [*p["units"], *pd_units])]):
            other = seen.get(unit)
            if other is not None and other != p["name"]:
                raise PlanError(
                    f"layouts {other!r} and {p['name']!r} both map to the unit {unit} (names are reduced to "
                    f"lowercase letters, digits and -), so the second would replace the first. Rename one, "
                    f"e.g. name: {slug(p['name'])}-2."
                )
            seen[unit] = p["name"]


def ports_of(p: dict, host: str | None = None) -> dict[int, str]:
    """Every TCP port a layout listens on on this host, with what listens there."""
    ports = {}
    if p.get("pd"):
        for role in ("prefill", "decode", "router"):
            for unit in p["pd"][role]["units"]:
                if host is None or unit["host"] == host:
                    ports[unit["port"]] = (
                        f"{role} {unit['index'] if unit['index'] is not None else ''}".rstrip()
                    )
                    for extra in unit["ports"]:
                        ports[extra] = f"{role} {'bootstrap' if role == 'prefill' else 'metrics'}"
        return ports
    if p.get("replicas"):
        for r in p["replicas"]:
            if host is None or r["host"] == host:
                ports[r["port"]] = f"replica {r['index']}"
        if host is None or p["router"]["host"] == host:
            ports[p["router"]["port"]] = "router"
            ports[p["router"]["port"] + 1000] = "router metrics (--prometheus-port)"
    else:
        ports[p["port"]] = "HTTP API"
    dist = (p.get("parallel") or {}).get("dist_init_addr")
    if dist and p.get("node_rank") == 0:
        ports[int(str(dist).rsplit(":", 1)[-1])] = "rendezvous (--dist-init-addr)"
    return ports


def _port_collisions(plans: list[dict], host: str | None = None) -> None:
    """Layouts that can run at once (no GPU in common) must not share a port: the second one's
    warm-up would talk to the first one's server (or fail to bind) and die minutes later."""
    deployable = [q for q in plans if q["verdict"] != "invalid"]
    for i, p in enumerate(deployable):
        mine = ports_of(p, host)
        for q in deployable[i + 1 :]:
            if set(q["gpu_ids"]) & set(p["gpu_ids"]):
                continue  # Conflicts=: they never run together
            theirs = ports_of(q, host)
            for port in sorted(set(mine) & set(theirs)):
                free = max(max(ports_of(x, host)) for x in deployable) + 1
                raise PlanError(
                    f"layouts {p['name']} and {q['name']} use no GPU in common, so they can run at the same time, "
                    f"but both listen on port {port} ({mine[port]} of {p['name']}, {theirs[port]} of {q['name']}). "
                    f"Give {q['name']} its own port:, e.g. port: {free}."
                )


def layout_secret_env(inputs: dict, name: str, extra_env: dict | None = None) -> dict[str, str]:
    """The real values of a layout's secret variables (sglang_service_extra_env, then the layout's env):
    what the service role writes to the EnvironmentFile. Validated like the plan."""
    serving = (inputs or {}).get("serving") or {}
    secret_env = secret_patterns(serving.get("secret_env"))
    env = dict(check_env(extra_env, "sglang_service_extra_env:", "env"))
    for layout in (inputs or {}).get("layouts") or []:
        if isinstance(layout, dict) and layout.get("name") == name:
            env.update(check_env(layout.get("env"), f"layout {name}:"))
    return {k: v for k, v in env.items() if is_secret(k, secret_env, v) and v != MASK}


def layouts_secret_env(inputs: dict, extra_env: dict | None = None) -> dict[str, dict[str, str]]:
    """layout_secret_env of every layout at once, by name: a preview of many units reads the inputs
    once, not once per unit."""
    return {
        str(lay.get("name")): layout_secret_env(inputs, str(lay.get("name")), extra_env)
        for lay in (inputs or {}).get("layouts") or []
        if isinstance(lay, dict) and lay.get("name")
    }


def layout_plan(plan: dict, name: str) -> dict:
    for entry in plan["layouts"]:
        if entry["name"] == name:
            return entry
    known = ", ".join(e["name"] for e in plan["layouts"])
    raise PlanError(f"no layout named {name!r}; known layouts: {known}")
