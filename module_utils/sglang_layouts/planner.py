"""The planner: SGLang's parallelism rules and the per-rank memory model.

One source of truth: the filter plugins, the modules, the simulator and the
report import this module; nothing else restates its rules.

Semantics (SGLang 0.5.x, see docs/planner.md for sources):
  * GPUs used = tp x pp, times dp only when dp runs replicas (no dp-attention).
  * ep carves the experts out of the TP group: each rank holds E/ep experts,
    each sliced moe_tp = tp/ep ways, so ep must divide tp.
  * dp-attention splits attention into dp groups inside TP: attn_tp = tp/dp.
  * KV budget: mem_fraction_static of the memory free before load holds the
    weights plus the KV pool; whatever the weights leave is the pool.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import os
import re

from .engines import SGLANG, Engine, engine_flags, flag_index
from .engines import engine as engine_spec
from .model import (
    GIB,
    STAGE_FIRST,
    STAGE_LAST,
    SUPPORTED_ARCHITECTURES,
    ModelSpec,
    PlanError,
    linear_bytes,
    load_model,
)
from .placement import layout_units, placement
from .render import render_argv, render_env, slug, unit_name
from .secrets import MASK, is_secret, mask_env
from .secrets import patterns as secret_patterns

__all__ = [
    "LAYOUT_KEYS",
    "SUPPORTED_ARCHITECTURES",
    "PlanError",
    "allocation_sequence",
    "load_model",
    "plan_host",
    "plan_layout",
    "sglang_flags",
]

PLAN_SCHEMA = "sglang-layouts/plan/v1"

LAYOUT_KEYS = {
    "name": "unique name, used in the unit name",
    "tp": "tensor parallel size (--tp-size)",
    "pp": "pipeline parallel size (--pp-size)",
    "ep": "expert parallel size inside the TP group (--ep-size)",
    "dp": "data parallel size (--dp-size)",
    "enable_dp_attention": "data-parallel attention inside the TP group (--enable-dp-attention)",
    "nnodes": "number of hosts the layout spans (--nnodes)",
    "gpus": "device ids to use on each host (CUDA_VISIBLE_DEVICES)",
    "port": "HTTP port (default sglang_base_port)",
    "args": "extra SGLang flags as a mapping, e.g. {kv_cache_dtype: fp8_e4m3}",
    "env": "extra environment variables for the server",
    "replicas": "independent copies of the layout behind a router",
    "engine": "sglang (default) or sim",
    "force": "start it even when the planner says oom or invalid (to record the real failure)",
}

# CUDA context, NCCL and cuBLAS workspaces: memory PyTorch cannot use. 1 GiB reproduces the seed's OOM
# ("Tried to allocate 672.00 MiB" with 93.62 GiB allocated on a 94.97 GiB card needs 0.69-1.35 GiB).
CUDA_CONTEXT_GIB = 1.0
# Below this, the memory outside the static pool (CUDA graphs, activations) is tight.
MIN_DYNAMIC_GIB = 2.0
# vLLM's profiled activation peak inside --gpu-memory-utilization (a few hundred MiB to ~2 GiB).
VLLM_ACTIVATION_GIB = 1.0
# Weight load also needs room for one layer's transient copy (INT4 Marlin repack etc.).
TRANSIENT_LAYERS = 1


def sglang_flags(sglang_version: str | None = None) -> dict:
    """Flags of SGLang sglang_version as its own parser declares them (data/sglang_flags/<version>.json)."""
    return engine_flags(SGLANG, sglang_version)


# ---------------------------------------------------------------------------
# Input normalisation
# ---------------------------------------------------------------------------


def _int(value, what: str, minimum: int = 1) -> int:
    if isinstance(value, bool):
        raise PlanError(f"{what} must be an integer, not {value!r}")
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise PlanError(f"{what} must be an integer, not {value!r}") from None
    if n != float(value) or n < minimum:
        raise PlanError(f"{what} must be an integer >= {minimum}, not {value!r}")
    return n


def _float(value, what: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise PlanError(f"{what} must be a number, not {value!r}") from None


def _bool(value, what: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "yes", "1", "false", "no", "0"):
        return value.lower() in ("true", "yes", "1")
    raise PlanError(f"{what} must be true or false, not {value!r}")


# A newline in a value that reaches a unit file starts a new directive (ExecStartPre=... would run as
# root); CR and NUL cut or split the line the same way. No engine flag or variable needs one.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_CONTROL_NAMES = {"\n": "a newline", "\r": "a carriage return", "\x00": "a NUL byte", "\t": "a tab"}
# POSIX: letters, digits and underscore, not starting with a digit (systemd refuses others too).
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def check_text(value, where: str, key: str) -> None:
    """Refuse control characters in anything that reaches argv, a unit file or an environment."""
    values = value if isinstance(value, list | tuple) else [value]
    for v in values:
        if isinstance(v, dict | list | tuple):
            continue
        m = _CONTROL.search(str(v))
        if m:
            what = _CONTROL_NAMES.get(m.group(), f"the control character {m.group()!r}")
            raise PlanError(
                f"{where} {key} contains {what} at character {m.start() + 1} (the value is not shown: it may be "
                "a secret); a unit file would read what follows as a new line. "
                f"Write {key} as one line of printable text."
            )


def check_env(env, where: str, key: str = "env") -> dict[str, str]:
    """An environment mapping: POSIX names, one-line values."""
    if env is None:
        return {}
    if not isinstance(env, dict):
        raise PlanError(f"{where} {key} must be a mapping of NAME: value, not {env!r}")
    out = {}
    for name, value in env.items():
        name = str(name)
        if not _ENV_NAME.match(name):
            better = re.sub(r"[^A-Za-z0-9_]", "_", name)
            better = ("_" + better) if better[:1].isdigit() else better
            raise PlanError(
                f"{where} {key} name {name!r} is not an environment variable name (letters, digits and _, "
                f"not starting with a digit). Write {better or 'NAME'} instead."
            )
        if isinstance(value, dict | list):
            raise PlanError(f"{where} {key}.{name} must be a string or a number, not {value!r}")
        check_text(value, where, f"{key}.{name}")
        out[name] = "" if value is None else str(value)
    return out


def normalize_layout(layout: dict) -> dict:
    if not isinstance(layout, dict):
        raise PlanError(f"each entry of sglang_layouts must be a mapping, not {layout!r}")
    name = layout.get("name")
    if not name or not isinstance(name, str):
        raise PlanError(f"layout {layout!r} has no name: every entry of sglang_layouts needs name:")
    check_text(name, f"layout {name!r}:", "name")
    if not slug(name):
        raise PlanError(
            f"layout {name!r}: name has no letter or digit, so it cannot name a unit. Write e.g. name: tp8."
        )
    unknown = sorted(set(layout) - set(LAYOUT_KEYS))
    if unknown:
        hints = []
        for key in unknown:
            close = difflib.get_close_matches(key, LAYOUT_KEYS, n=1)
            hints.append(f"{key}" + (f" (did you mean {close[0]}?)" if close else ""))
        raise PlanError(
            f"layout {name}: unknown key(s) {', '.join(hints)}. Known keys: {', '.join(LAYOUT_KEYS)}; "
            "other SGLang flags go under args:"
        )
    where = f"layout {name}:"
    out = {
        "name": name,
        "tp": _int(layout.get("tp", 1), f"{where} tp"),
        "pp": _int(layout.get("pp", 1), f"{where} pp"),
        "ep": _int(layout.get("ep", 1), f"{where} ep"),
        "dp": _int(layout.get("dp", 1), f"{where} dp"),
        "enable_dp_attention": _bool(
            layout.get("enable_dp_attention", False), f"{where} enable_dp_attention"
        ),
        "nnodes": _int(layout.get("nnodes", 1), f"{where} nnodes"),
        "replicas": _int(layout.get("replicas", 1), f"{where} replicas"),
        "port": _int(layout["port"], f"{where} port") if layout.get("port") is not None else None,
        "gpus": None,
        "args": dict(layout.get("args") or {}) if isinstance(layout.get("args") or {}, dict) else {},
        "env": check_env(layout.get("env"), where),
        "engine": layout.get("engine"),
        "force": _bool(layout.get("force", False), f"{where} force"),
    }
    for key, value in out["args"].items():
        check_text(key, where, "args key")
        check_text(value, where, f"args.{key}")
    if out["port"] is not None and out["port"] > 65535:
        raise PlanError(f"{where} port {out['port']} is not a TCP port (1-65535)")
    if layout.get("gpus") is not None:
        gpus = layout["gpus"]
        if isinstance(gpus, str):
            gpus = [g for g in gpus.split(",") if g.strip()]
        out["gpus"] = [_int(g, f"{where} gpus entry", minimum=0) for g in gpus]
    if not isinstance(layout.get("args") or {}, dict):
        raise PlanError(f"{where} args must be a mapping of SGLang flags, e.g. {{kv_cache_dtype: fp8_e4m3}}")
    return out


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


def parallel_shape(lay: dict, eng: Engine = SGLANG) -> dict:
    tp, pp, ep, dp = lay["tp"], lay["pp"], lay["ep"], lay["dp"]
    if eng.name == "vllm":
        # vLLM 0.32: each dp rank runs attention (and its KV pool) with its own TP group; the MoE
        # layers span all tp x dp GPUs either way: whole experts with --enable-expert-parallel,
        # else every expert sliced tp x dp ways (fused_moe/config.py flatten_tp_across_dp).
        ep_on = ep > 1
        return {
            "tp": tp,
            "pp": pp,
            "ep": tp * dp if ep_on else 1,
            "dp": dp,
            "dp_attention": False,
            "attn_tp": tp,
            "moe_tp": 1 if ep_on else tp * dp,
            "expert_ways": tp * dp,
            "nnodes": lay["nnodes"],
            "replicas": lay["replicas"],
            "gpus_per_engine": tp * pp * dp,
        }
    dp_attention = lay["enable_dp_attention"] and dp > 1
    attn_tp = tp // dp if dp_attention and tp % dp == 0 else tp
    moe_tp = tp // ep if ep and tp % ep == 0 else 0
    replicas_dp = dp if (dp > 1 and not dp_attention) else 1
    return {
        "tp": tp,
        "pp": pp,
        "ep": ep,
        "dp": dp,
        "dp_attention": dp_attention,
        "attn_tp": attn_tp,
        "moe_tp": moe_tp,
        # routed experts: E/ep experts per rank, each sliced moe_tp = tp/ep ways => 1/tp of the bytes
        "expert_ways": tp,
        "nnodes": lay["nnodes"],
        "replicas": lay["replicas"],
        "gpus_per_engine": tp * pp * replicas_dp,
    }


def _suggest_ep_layout(tp: int, ep: int, gpus_available: int) -> str | None:
    """The layout that gives 'MoE TPa x EPb' over all GPUs: tp = a*b, ep = b."""
    total = tp * ep
    if total <= gpus_available and total > tp:
        return f"For MoE TP{tp} x EP{ep} over {total} GPUs write tp: {total}, ep: {ep}."
    return None


def _vllm_problems(lay: dict, par: dict) -> list[str]:
    name, tp, dp = lay["name"], par["tp"], par["dp"]
    reasons = []
    if lay["ep"] > 1 and lay["ep"] != tp * dp:
        reasons.append(
            f"{name}: vLLM's expert parallelism spans all tp x dp GPUs (--enable-expert-parallel): write "
            f"ep: {tp * dp}, or leave ep out to slice every expert over TP."
        )
    if lay["enable_dp_attention"]:
        reasons.append(
            f"{name}: vLLM has no --enable-dp-attention; with dp > 1 it already runs attention data-parallel. "
            "Drop enable_dp_attention."
        )
    if par["nnodes"] > 1:
        reasons.append(
            f"{name}: multi-node vLLM (Ray) is not supported here yet; use the sglang engine for nnodes > 1."
        )
    return reasons


def layout_problems(
    lay: dict, par: dict, spec: ModelSpec, hardware: dict, eng: Engine = SGLANG
) -> tuple[list[str], list[str]]:
    """(reasons the layout is invalid, notes that do not change the verdict)."""
    name, tp, pp, ep, dp = lay["name"], par["tp"], par["pp"], par["ep"], par["dp"]
    gpu_count, nnodes = hardware["gpu_count"], par["nnodes"]
    available = gpu_count * nnodes
    used = par["gpus_per_engine"]
    used_with_replicas = used * par["replicas"]
    reasons, notes = [], []
    if eng.name == "vllm":
        reasons += _vllm_problems(lay, par)
    elif ep > tp:
        hint = _suggest_ep_layout(tp, ep, available) or ""
        reasons.append(
            f"{name}: ep ({ep}) is larger than tp ({tp}). In SGLang ep splits the experts inside the tp group, "
            f"so ep must divide tp; SGLang crashes at start with ZeroDivisionError (moe_tp = tp / ep = 0). {hint}".strip()
        )
    elif eng.name != "vllm" and tp % ep:
        reasons.append(
            f"{name}: ep ({ep}) must divide tp ({tp}): each of the ep groups takes tp/ep GPUs of the tp group."
        )
    if lay["enable_dp_attention"] and eng.name != "vllm":
        if dp == 1:
            notes.append(
                f"{name}: enable_dp_attention with dp 1 does nothing (SGLang turns it off); set dp > 1."
            )
        elif tp % dp:
            reasons.append(
                f"{name}: dp-attention needs tp % dp == 0 (tp {tp}, dp {dp}): attention runs tp/dp-way inside each of the dp groups."
            )
    if (tp * pp) % nnodes:
        reasons.append(
            f"{name}: tp x pp ({tp * pp}) must be divisible by nnodes ({nnodes}): every host runs the same number of ranks."
        )
    if dp > 1 and nnodes > 1 and not par["dp_attention"] and eng.name != "vllm":
        reasons.append(
            f"{name}: SGLang does not support multi-node data parallelism without dp-attention; use replicas: or enable_dp_attention."
        )
    if used > available:
        where = f"the host has {gpu_count}" if nnodes == 1 else f"{nnodes} hosts x {gpu_count} = {available}"
        reasons.append(
            f"{name}: needs {used} GPUs (GPUs = tp x pp"
            + (" x dp" if used != tp * pp else "")
            + f") but {where}."
        )
    elif used_with_replicas < available and not reasons:
        used = used_with_replicas
        idle = available - used
        text = (
            f"{name} uses {used} of the {available} GPUs (GPUs = tp x pp; ep splits experts inside the tp group)."
            if ep > 1
            else f"{name} uses {used} of the {available} GPUs (GPUs = tp x pp); {idle} stay idle."
        )
        hint = _suggest_ep_layout(tp, ep, available) if ep > 1 else None
        notes.append(f"{text} {hint}" if hint else text)
    if lay["gpus"] is not None:
        per_node = used // nnodes if used % nnodes == 0 else used
        if len(lay["gpus"]) != per_node:
            reasons.append(
                f"{name}: gpus lists {len(lay['gpus'])} devices but the layout uses {per_node} per host."
            )
        if len(set(lay["gpus"])) != len(lay["gpus"]):
            reasons.append(f"{name}: gpus lists a device twice: {lay['gpus']}.")
        bad = [g for g in lay["gpus"] if g >= gpu_count]
        if bad:
            reasons.append(
                f"{name}: gpus {bad} do not exist on a host with {gpu_count} GPUs (ids 0-{gpu_count - 1})."
            )
    # Shape rules of the model under this split.
    if not reasons:
        reasons += _shape_problems(name, par, spec, eng)
    return reasons, notes


def _shape_problems(name: str, par: dict, spec: ModelSpec, eng: Engine = SGLANG) -> list[str]:
    problems = []
    tp, attn_tp, pp = par["tp"], par["attn_tp"], par["pp"]
    if spec.num_heads % attn_tp:
        problems.append(
            f"{name}: {spec.num_heads} attention heads do not split {attn_tp} ways (attention TP)."
        )
    if pp > spec.num_layers:
        problems.append(f"{name}: pp {pp} exceeds the model's {spec.num_layers} layers.")
    if spec.family != "mla_moe":
        kv = spec.num_kv_heads
        if kv % attn_tp and attn_tp % kv:
            problems.append(
                f"{name}: {kv} KV heads cannot be split or replicated over attention TP {attn_tp}."
            )
    if spec.is_moe and par["moe_tp"] and spec.n_experts % par["ep"]:
        problems.append(f"{name}: {spec.n_experts} experts do not split into ep {par['ep']} equal groups.")
    q = spec.quant
    for lin in spec.linears:
        if lin.split == "none":
            continue
        ways = {"attn_tp": attn_tp, "kv_heads": attn_tp, "tp": tp, "experts": par["moe_tp"] or 1}[lin.shard]
        if lin.shard == "kv_heads" and spec.num_kv_heads < attn_tp:
            continue  # replicated heads
        dim = lin.out_features if lin.split == "column" else lin.in_features
        what = lin.name.replace("model.layers.L.", "").replace(".E.", ".")
        if dim % ways:
            problems.append(f"{name}: {what} ({dim} along the split) does not divide {ways} ways.")
            continue
        local = dim // ways
        module = lin.name.replace(".L.", ".1.").replace(".E.", ".0.")
        if not q.is_quantized(module):
            continue
        if q.method == "fp8_block":
            block = q.block[0] if lin.split == "column" else q.block[1]
            if local % block:
                problems.append(
                    f"{name}: {what} splits into {local}-wide slices, not whole {block}-wide fp8 weight blocks "
                    f"({dim} / {ways}); {eng.label} refuses such quantized shards. Use fewer "
                    + ("moe_tp ways (raise ep)." if lin.shard == "experts" else "TP ranks.")
                )
        elif q.method == "int4_group" and lin.split == "row" and local % q.group_size:
            problems.append(
                f"{name}: {what} splits its {dim} inputs into {local}-wide slices, not whole int4 groups of "
                f"{q.group_size}; use fewer "
                + ("moe_tp ways (raise ep)." if lin.shard == "experts" else "TP ranks.")
            )
    return problems


# ---------------------------------------------------------------------------
# Memory
# ---------------------------------------------------------------------------


def shard_factor(kind: str, par: dict, spec: ModelSpec) -> float:
    if kind == "replicated":
        return 1.0
    if kind == "attn_tp":
        return 1.0 / par["attn_tp"]
    if kind == "kv_heads":
        kv = spec.num_kv_heads
        return max(1, kv // par["attn_tp"]) / kv
    if kind == "tp":
        return 1.0 / par["tp"]
    if kind == "vocab":
        return 1.0 if par["dp_attention"] else 1.0 / par["tp"]
    if kind == "experts":
        return 1.0 / par["expert_ways"]
    raise ValueError(kind)


def pp_layer_ranges(num_layers: int, pp: int) -> list[tuple[int, int]]:
    """SGLang's get_pp_indices: even split, the *last* `remainder` stages get one more layer."""
    env = os.environ.get("SGLANG_PP_LAYER_PARTITION")
    if env:
        sizes = [int(x) for x in env.split(",")]
        if len(sizes) != pp or sum(sizes) != num_layers:
            raise PlanError(f"SGLANG_PP_LAYER_PARTITION={env} must have {pp} entries summing to {num_layers}")
    else:
        base, rem = divmod(num_layers, pp)
        sizes = [base + (1 if i >= pp - rem else 0) for i in range(pp)]
    ranges, start = [], 0
    for s in sizes:
        ranges.append((start, start + s - 1))
        start += s
    return ranges


def stage_of(stage: int, ranges: list[tuple[int, int]]) -> int:
    if stage == STAGE_FIRST:
        return 0
    if stage == STAGE_LAST:
        return len(ranges) - 1
    for i, (a, b) in enumerate(ranges):
        if a <= stage <= b:
            return i
    raise ValueError(stage)


def stage_bytes(spec: ModelSpec, par: dict) -> list[dict[str, float]]:
    """Per PP stage: bytes on one rank of that stage, by component."""
    ranges = pp_layer_ranges(spec.num_layers, par["pp"])
    stages: list[dict[str, float]] = [{} for _ in ranges]
    for t in spec.tensors:
        s = stages[stage_of(t.stage, ranges)]
        s[t.component] = s.get(t.component, 0.0) + t.nbytes * shard_factor(t.shard, par, spec)
    return stages


def largest_layer_bytes(spec: ModelSpec, par: dict) -> float:
    per_layer: dict[int, float] = {}
    for t in spec.tensors:
        if t.stage >= 0:
            per_layer[t.stage] = per_layer.get(t.stage, 0.0) + t.nbytes * shard_factor(t.shard, par, spec)
    return max(per_layer.values(), default=0.0)


def kv_dtype_bytes(spec: ModelSpec, kv_cache_dtype: str | None) -> int:
    dtype = (kv_cache_dtype or "auto").lower()
    if dtype == "auto":
        return spec.quant.param_bytes
    if dtype.startswith("fp8"):
        return 1
    if dtype in ("bf16", "bfloat16", "fp16", "float16"):
        return 2
    if dtype.startswith("fp4"):
        return 1  # packed + scales; conservative
    raise PlanError(f"kv_cache_dtype {kv_cache_dtype!r} is not known to the planner")


def allocation_sequence(spec: ModelSpec, layout_plan: dict, rank: int = 0) -> list[tuple[str, int]]:
    """Weights in model-construction order for one rank: (tensor name, bytes on that rank).

    Routed experts become SGLang's fused MoE parameters in the order its quantization method
    registers them (w13 and w2 weights, then their scales), so an OOM names the tensor SGLang
    would have been allocating.
    """
    par = layout_plan["parallel"]
    ranges = pp_layer_ranges(spec.num_layers, par["pp"])
    stage = layout_plan["ranks"][rank]["pp_rank"]
    lins = {lin.name.rsplit(".", 1)[1]: lin for lin in spec.linears if lin.component == "routed_experts"}
    experts_factor = shard_factor("experts", par, spec)
    seq: list[tuple[str, int]] = []
    for t in spec.tensors:
        if stage_of(t.stage, ranges) != stage:
            continue
        if t.component == "routed_experts" and spec.mode == "config":
            if not t.name.endswith("down_proj"):
                continue  # gate/up are fused into w13; emitted with down_proj below
            base = f"model.layers.{t.stage}.mlp.experts."
            w13 = sum(linear_bytes(spec.quant, lins[k], t.stage) for k in ("gate_proj", "up_proj"))
            w2 = linear_bytes(spec.quant, lins["down_proj"], t.stage)
            w13_parts = _split_weight_scale(
                spec, base + "w13_weight", w13 * experts_factor, lins["up_proj"], 2
            )
            w2_parts = _split_weight_scale(
                spec, base + "w2_weight", w2 * experts_factor, lins["down_proj"], 1
            )
            seq += [w13_parts[0], w2_parts[0], *w13_parts[1:], *w2_parts[1:]]
            continue
        seq.append((t.name, int(t.nbytes * shard_factor(t.shard, par, spec))))
    return seq


def _split_weight_scale(spec: ModelSpec, name: str, nbytes: float, lin, n: int) -> list[tuple[str, int]]:
    q = spec.quant
    if q.method == "int4_group":
        packed = lin.in_features * lin.out_features * lin.experts * n / 2
        frac = packed / linear_bytes(q, lin) / n
        return [(name + "_packed", int(nbytes * frac)), (name + "_scale", int(nbytes * (1 - frac)))]
    return [(name, int(nbytes))]


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

    args: are checked against the flags of SGLang sglang_version (the newest table when None)."""
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
    # a layout may override serving-wide flags through args:
    eff = dict(serving)
    for key, flag in eng.serving_flags.items():
        if flag in args:
            eff[key] = args[flag]
    fraction_key = eng.fraction_key
    mfs = _float(eff[fraction_key], f"layout {lay['name']}: {fraction_key}")
    par = parallel_shape(lay, eng)
    reasons, notes = layout_problems(lay, par, spec, hardware, eng)
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
        "budget_gib": _r(budget),
        "kv_tokens": None,
        "kv_tokens_total": None,
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
    flags = render_argv(spec, lay, par, eff, args, plan["port"], eng)
    plan["flags"] = flags
    plan["argv"] = [*eng.launcher, *flags]
    plan["env"] = render_env(lay, gpu_ids, hardware)
    if par["replicas"] > 1 and not reasons:
        _place_replicas(plan, spec, lay, par, eff, args, hardware, cluster, eng)
    # Secret values never enter the plan: the role reads them from the inputs (layout_secret_env)
    # straight into the EnvironmentFile; everything downstream of the plan sees the mask.
    secret_env = serving.get("secret_env")
    plan["secret_env"] = sorted(k for k in plan["env"] if is_secret(k, secret_env))
    plan["env"] = mask_env(plan["env"], secret_env)
    for replica in plan.get("replicas") or []:
        replica["env"] = mask_env(replica["env"], secret_env)
    plan["units"] = layout_units(plan)
    plan["placement"] = placement(plan, cluster["host"])
    if plan["reasons"]:
        plan["failure"] = "invalid"
        return plan

    # -- memory per rank -----------------------------------------------------
    stages = stage_bytes(spec, par)
    ranges = pp_layer_ranges(spec.num_layers, par["pp"])
    kvb = kv_dtype_bytes(spec, eff.get("kv_cache_dtype"))
    ranks = []
    stage_kv_tokens = []
    kv_gib_min = math.inf
    # SGLang sizes its pool from the memory free before load (CUDA context gone);
    # vLLM's utilization covers the whole card and its profiled activation peak.
    reserve = mfs * CUDA_CONTEXT_GIB if eng.name != "vllm" else CUDA_CONTEXT_GIB + VLLM_ACTIVATION_GIB
    kv_fixed_gib = _vllm_fixed_kv_gib(eng, args, lay["env"])
    for pp_rank, comps in enumerate(stages):
        w = sum(comps.values()) / GIB
        layers = ranges[pp_rank]
        n_layers = layers[1] - layers[0] + 1
        kv_per_token = spec.kv_bytes_per_token_per_layer(par["attn_tp"], kvb) * n_layers
        kv_gib = budget - w - reserve if kv_fixed_gib is None else kv_fixed_gib
        kv_gib_min = min(kv_gib_min, kv_gib)
        stage_kv_tokens.append(int(kv_gib * GIB // kv_per_token) if kv_gib > 0 else 0)
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
    usable = capacity - CUDA_CONTEXT_GIB
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
        need = (weights + CUDA_CONTEXT_GIB + (VLLM_ACTIVATION_GIB if eng.name == "vllm" else 0)) / capacity
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
    groups = par["dp"] if par["dp"] > 1 else 1
    plan["kv_tokens_total"] = tokens * groups * par["replicas"]
    if plan["verdict"] == "fits" and ctx and tokens < int(ctx):
        if eng.name == "vllm":
            plan["verdict"], plan["failure"] = "oom", "kv_no_memory"
            plan["reasons"].append(
                f"{lay['name']}: the KV cache holds {tokens} tokens, fewer than max_model_len {ctx}: vLLM refuses to "
                f"start. Raise {fraction_key} or lower sglang_context_length."
            )
        else:
            plan["notes"].append(
                f"{lay['name']}: the KV cache holds {tokens} tokens, fewer than context_length {ctx}; "
                "SGLang will cap request length."
            )
    if plan["verdict"] == "fits" and eng.name != "vllm":
        dynamic = (1 - mfs) * capacity
        if dynamic < MIN_DYNAMIC_GIB:
            plan["notes"].append(
                f"{lay['name']}: only {dynamic:.1f} GiB per GPU stay outside the static pool for CUDA graphs and "
                "activations; lower mem_fraction_static if it OOMs while serving."
            )
    plan["cost"] = decode_cost(spec, par, stages, hardware)
    return plan


def _vllm_fixed_kv_gib(eng: Engine, args: dict, env: dict) -> float | None:
    """vLLM sizes its KV cache from --kv-cache-memory-bytes, or on CPU from VLLM_CPU_KVCACHE_SPACE (GiB)."""
    if eng.name != "vllm":
        return None
    if args.get("--kv-cache-memory-bytes") is not None:
        return _float(args["--kv-cache-memory-bytes"], "kv_cache_memory_bytes") / GIB
    if env.get("VLLM_CPU_KVCACHE_SPACE"):
        return _float(env["VLLM_CPU_KVCACHE_SPACE"], "VLLM_CPU_KVCACHE_SPACE")
    return None


def decode_cost(spec: ModelSpec, par: dict, stages: list[dict[str, float]], hardware: dict) -> dict:
    """Inputs of a decode-step cost model (the simulator's): what one step reads and syncs."""
    per_stage = []
    ranges = pp_layer_ranges(spec.num_layers, par["pp"])
    for i, comps in enumerate(stages):
        experts = comps.get("routed_experts", 0.0)
        # the embedding is a gather (a few rows), not a full read
        dense = sum(v for k, v in comps.items() if k not in ("routed_experts", "embed", "vision"))
        a, b = ranges[i]
        n_layers = b - a + 1
        moe_layers = sum(1 for layer in range(a, b + 1) if spec.is_moe_layer(layer))
        collectives = 0
        if par["tp"] > 1:
            # one all-reduce after attention and one after the MLP of every layer (+ logits on the last stage)
            collectives = 2 * n_layers + (1 if i == len(stages) - 1 else 0)
        per_stage.append(
            {
                "dense_bytes": int(dense),
                "expert_bytes": int(experts),
                "layers": n_layers,
                "moe_layers": moe_layers,
                "collectives": collectives,
            }
        )
    return {
        "stages": per_stage,
        "n_experts": spec.n_experts,
        "experts_per_gpu": spec.n_experts // par["ep"] if spec.is_moe and par["moe_tp"] else 0,
        "top_k": spec.top_k,
        "tp": par["tp"],
        "pp": par["pp"],
        "interconnect": hardware["gpu_interconnect"],
        "bandwidth_gbs": hardware.get("gpu_memory_bandwidth_gbs"),
        "kv_bytes_per_token_layer": spec.kv_bytes_per_token_per_layer(par["attn_tp"], spec.quant.param_bytes),
        # one token's hidden state, the message of each all-reduce (activations in the model dtype)
        "allreduce_bytes_per_token": int(spec.config["hidden_size"]) * spec.quant.param_bytes,
    }


# ---------------------------------------------------------------------------
# Plan one host
# ---------------------------------------------------------------------------


def normalize_cluster(cluster: dict | None, host: str | None) -> dict:
    """The inventory group a multi-node layout spans: host names and addresses in inventory order."""
    cluster = dict(cluster or {})
    hosts = [str(h) for h in cluster.get("hosts") or ([host] if host else [])]
    given = list(cluster.get("addresses") or [])
    addresses = [
        str(given[i]) if i < len(given) and given[i] not in (None, "") else h for i, h in enumerate(hosts)
    ]
    return {
        "group": str(cluster.get("group") or "sglang_hosts"),
        "hosts": hosts,
        "addresses": addresses,
        "dist_init_port": _int(cluster.get("dist_init_port") or 50000, "sglang_dist_init_port"),
        "host": host,
    }


ROUTER_LAUNCHER = ("python3", "-m", "sglang_router.launch_router")


def _place_replicas(plan, spec, lay, par, serving, args, hardware, cluster, eng) -> None:
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
            "flags": render_argv(spec, lay, par, serving, args, port, eng),
            "env": render_env(lay, gpus, hardware),
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


def normalize_hardware(hw: dict) -> dict:
    if not isinstance(hw, dict):
        raise PlanError("hardware must be a mapping with gpu_count, gpu_memory_gib, gpu_interconnect")
    for key in ("gpu_count", "gpu_memory_gib"):
        if hw.get(key) in (None, ""):
            raise PlanError(
                f"{key} is not set for this host: run gpu_facts (playbooks/provision.yml) or set {key} in the inventory"
            )
    out = dict(hw)
    out["gpu_count"] = _int(hw["gpu_count"], "gpu_count")
    out["gpu_memory_gib"] = _float(hw["gpu_memory_gib"], "gpu_memory_gib")
    if out["gpu_memory_gib"] <= 0:
        raise PlanError(f"gpu_memory_gib must be positive, not {hw['gpu_memory_gib']!r}")
    ic = str(hw.get("gpu_interconnect") or "pcie").lower()
    if ic not in ("pcie", "nvlink", "none", "single"):
        raise PlanError(f"gpu_interconnect must be pcie, nvlink or none, not {hw.get('gpu_interconnect')!r}")
    out["gpu_interconnect"] = ic
    bw = hw.get("gpu_memory_bandwidth_gbs")
    out["gpu_memory_bandwidth_gbs"] = (
        _float(bw, "gpu_memory_bandwidth_gbs") if bw not in (None, "", "None") else None
    )
    return out


SERVING_DEFAULTS = {
    "mem_fraction_static": 0.88,
    "context_length": None,
    "max_running_requests": None,
    "attention_backend": None,
    "grammar_backend": None,
    "trust_remote_code": False,
    "host": "127.0.0.1",
    "base_port": 30000,
    "api_key_set": False,
    "kv_cache_dtype": None,
    "engine": "sglang",
    "gpu_memory_utilization": 0.9,
}


def normalize_serving(serving: dict) -> dict:
    out = dict(SERVING_DEFAULTS)
    out.update({k: v for k, v in (serving or {}).items() if v not in (None, "", "None")})
    out["trust_remote_code"] = _bool(out["trust_remote_code"], "sglang_trust_remote_code")
    out["api_key_set"] = _bool(out["api_key_set"], "api_key_set")
    if out["context_length"] is not None:
        out["context_length"] = _int(out["context_length"], "sglang_context_length")
    if out["max_running_requests"] is not None:
        out["max_running_requests"] = _int(out["max_running_requests"], "sglang_max_running_requests")
    out["base_port"] = _int(out["base_port"], "sglang_base_port")
    for key in ("host", "attention_backend", "grammar_backend", "kv_cache_dtype"):
        check_text(out.get(key), "serving:", f"sglang_{key}")
    secret_env = (serving or {}).get("secret_env")
    if secret_env is not None and (
        isinstance(secret_env, str) or not all(isinstance(x, str) for x in secret_env)
    ):
        raise PlanError(
            f"sglang_secret_env must be a list of names or patterns, e.g. ['HF_TOKEN', '*_KEY'], not {secret_env!r}"
        )
    out["secret_env"] = secret_patterns(secret_env)
    if out["host"] not in ("127.0.0.1", "localhost", "::1") and not out["api_key_set"]:
        raise PlanError(
            f"sglang_host is {out['host']} (a public address) but no sglang_api_key is set: put an API key in a "
            "vaulted variable (ansible-vault encrypt_string) or keep sglang_host: 127.0.0.1"
        )
    return out


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


def inputs_digest(inputs) -> str:
    """sha256 of the planner's inputs as canonical JSON: a stored plan of other inputs is stale."""
    text = json.dumps(inputs, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def plan_host(inputs: dict) -> dict:
    """The plan document for one host (see docs/ARCHITECTURE.md)."""
    if not isinstance(inputs, dict):
        raise PlanError("the planner's input must be a mapping (sglang_plan_inputs)")
    layouts = inputs.get("layouts")
    if not isinstance(layouts, list) or not layouts:
        raise PlanError("sglang_layouts must be a non-empty list of layouts, e.g. [{name: tp8, tp: 8}]")
    names = [layout.get("name") if isinstance(layout, dict) else None for layout in layouts]
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
    # The SGLang the host gets (sglang_version): its own flags are what args: may use.
    sglang_version = inputs.get("sglang_version")
    if sglang_version in ("", "None"):
        sglang_version = None
    sglang_table = sglang_flags(sglang_version)
    plans = [plan_layout(layout, spec, hardware, serving, cluster, sglang_version) for layout in layouts]
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
            "quantization": spec.quant.describe(),
            "vocab_size": int(spec.config["vocab_size"]),
        },
        "mode": spec.mode,
        "sglang_version": sglang_table.get("sglang_version"),
        "hardware": hardware,
        "serving": {k: v for k, v in serving.items() if k != "api_key_set"},
        "layouts": plans,
    }


def _units_here(p: dict, host: str | None) -> list[str]:
    """The units a layout really runs on this host: its own, or its replicas' and router's."""
    if not p.get("replicas"):
        return [p["unit_name"]]
    units = [r["unit_name"] for r in p["replicas"] if r["host"] == host]
    if p["router"]["host"] == host:
        units.append(p["router"]["unit_name"])
    return units


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
        units = [p["unit_name"]]
        units += [r["unit_name"] for r in p.get("replicas") or []]
        units += [p["router"]["unit_name"]] if p.get("router") else []
        for unit in units:
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
    return {k: v for k, v in env.items() if is_secret(k, secret_env) and v != MASK}


def layout_plan(plan: dict, name: str) -> dict:
    for entry in plan["layouts"]:
        if entry["name"] == name:
            return entry
    known = ", ".join(e["name"] for e in plan["layouts"])
    raise PlanError(f"no layout named {name!r}; known layouts: {known}")
