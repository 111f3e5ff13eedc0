"""SGLang's (and vLLM's) parallelism rules: the shape a layout really has and why it cannot run.

Semantics (SGLang 0.5.x, docs/planner.md and docs/sglang.md 1 for sources):
  * GPUs used = tp x pp, times dp only when dp runs replicas (no dp-attention).
  * ep carves the experts out of the TP group: each rank holds E/ep experts,
    each sliced moe_tp = tp/ep ways, so ep must divide tp.
  * dp-attention splits attention into dp groups inside TP: attn_tp = tp/dp.
"""

from __future__ import annotations

from ..engines import SGLANG, Engine
from ..estimate.memory import MIN_DYNAMIC_GIB
from ..estimate.model import ModelSpec


def parallel_shape(lay: dict, eng: Engine = SGLANG) -> dict:
    tp, pp, ep, dp = lay["tp"], lay["pp"], lay["ep"], lay["dp"]
    if eng.moe_spans_dp:
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


def _engine_problems(lay: dict, par: dict, eng: Engine) -> tuple[list[str], list[str]]:
    """What this engine's parallelism semantics (engines.py) refuse or ignore in the layout."""
    name, tp, ep, dp = lay["name"], par["tp"], par["ep"], par["dp"]
    reasons, notes = [], []
    if eng.moe_spans_dp:
        if lay["ep"] > 1 and lay["ep"] != tp * dp:
            reasons.append(
                f"{name}: {eng.label}'s expert parallelism spans all tp x dp GPUs (--enable-expert-parallel): "
                f"write ep: {tp * dp}, or leave ep out to slice every expert over TP."
            )
    elif ep > tp:
        hint = _suggest_ep_layout(tp, ep, par["available"]) or ""
        reasons.append(
            f"{name}: ep ({ep}) is larger than tp ({tp}). In SGLang ep splits the experts inside the tp group, "
            f"so ep must divide tp; SGLang crashes at start with ZeroDivisionError (moe_tp = tp / ep = 0). {hint}".strip()
        )
    elif tp % ep:
        reasons.append(
            f"{name}: ep ({ep}) must divide tp ({tp}): each of the ep groups takes tp/ep GPUs of the tp group."
        )
    if lay["enable_dp_attention"]:
        if not eng.dp_attention:
            reasons.append(
                f"{name}: {eng.label} has no --enable-dp-attention; with dp > 1 it already runs attention "
                "data-parallel. Drop enable_dp_attention."
            )
        elif dp == 1:
            notes.append(
                f"{name}: enable_dp_attention with dp 1 does nothing (SGLang turns it off); set dp > 1."
            )
        elif tp % dp:
            reasons.append(
                f"{name}: dp-attention needs tp % dp == 0 (tp {tp}, dp {dp}): attention runs tp/dp-way inside each of the dp groups."
            )
    if par["nnodes"] > 1 and not eng.multinode:
        reasons.append(
            f"{name}: multi-node {eng.label} is not supported here yet; use the sglang engine for nnodes > 1."
        )
    elif dp > 1 and par["nnodes"] > 1 and not par["dp_attention"]:
        reasons.append(
            f"{name}: {eng.label} does not support multi-node data parallelism without dp-attention; use replicas: or enable_dp_attention."
        )
    return reasons, notes


def layout_problems(
    lay: dict, par: dict, spec: ModelSpec, hardware: dict, eng: Engine = SGLANG
) -> tuple[list[str], list[str]]:
    """(reasons the layout is invalid, notes that do not change the verdict)."""
    name, tp, pp, ep = lay["name"], par["tp"], par["pp"], par["ep"]
    gpu_count, nnodes = hardware["gpu_count"], par["nnodes"]
    available = gpu_count * nnodes
    used = par["gpus_per_engine"]
    used_with_replicas = used * par["replicas"]
    reasons, notes = _engine_problems(lay, {**par, "available": available}, eng)
    if (tp * pp) % nnodes:
        reasons.append(
            f"{name}: tp x pp ({tp * pp}) must be divisible by nnodes ({nnodes}): every host runs the same number of ranks."
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
    if spec.family == "linear_moe":
        # Gated DeltaNet heads are split over attention TP (qwen3_next.py, configs/mamba_utils.py divide())
        for key in ("linear_num_key_heads", "linear_num_value_heads"):
            n = int(spec.config[key])
            if n % attn_tp:
                problems.append(
                    f"{name}: {spec.architecture}: {n} linear-attention heads ({key}) do not split {attn_tp} ways "
                    "(attention TP); SGLang's state pool divides them evenly."
                )
    if spec.is_moe and par["moe_tp"] and spec.n_experts % par["ep"]:
        problems.append(f"{name}: {spec.n_experts} experts do not split into ep {par['ep']} equal groups.")
    q = spec.quant
    for lin in spec.linears:
        if lin.split == "none":
            continue
        ways = {
            "attn_tp": attn_tp,
            "kv_heads": attn_tp,
            "tp": tp,
            "dense_tp": 1 if par.get("moe_dense_tp") == 1 else tp,
            "experts": par["moe_tp"] or 1,
        }[lin.shard]
        if lin.shard == "kv_heads" and spec.num_kv_heads < attn_tp:
            continue  # replicated heads
        dim = lin.out_features if lin.split == "column" else lin.in_features
        what = lin.name.replace("model.layers.L.", "").replace(".E.", ".")
        if dim % ways:
            problems.append(f"{name}: {what} ({dim} along the split) does not divide {ways} ways.")
            continue
        local = dim // ways
        module = lin.name.replace(".L.", ".1.").replace(".E.", ".0.")
        if not q.is_quantized(module, lin.component):
            continue
        if q.method == "fp8_block":
            block = q.block[0] if lin.split == "column" else q.block[1]
            if local % block:
                problems.append(
                    f"{name}: {what} splits into {local}-wide slices, not whole {block}-wide fp8 weight blocks "
                    f"({dim} / {ways}); {eng.label} refuses such quantized shards. Use fewer "
                    + ("moe_tp ways (raise ep)." if lin.shard == "experts" else "TP ranks.")
                )
        elif q.group_size and q.method != "mxfp4" and lin.split == "row" and local % q.group_size:
            # (mxfp4 pads each rank's expert slice to whole blocks itself: mxfp4.py create_weights)
            # group-scaled formats (int4, awq, gptq, mxfp4, nvfp4): a rank's input slice holds whole groups
            problems.append(
                f"{name}: {what} splits its {dim} inputs into {local}-wide slices, not whole {q.method} groups of "
                f"{q.group_size}; use fewer "
                + ("moe_tp ways (raise ep)." if lin.shard == "experts" else "TP ranks.")
            )
    return problems


def moe_dense_tp_rule(name: str, args: dict, par: dict, spec: ModelSpec, notes: list[str]) -> None:
    """--moe-dense-tp-size 1: the dense MLP layers of DeepSeek-V2/V3 and GLM-4.5 run unsplit on every
    rank (their model files: enable_moe_dense_fully_dp() -> tp_size=1); other architectures ignore it."""
    value = args.get("--moe-dense-tp-size")
    par["moe_dense_tp"] = int(value) if value not in (None, "") else None
    if par["moe_dense_tp"] == 1:
        if spec.arch.dense_fully_dp:
            notes.append(
                f"{name}: moe_dense_tp_size 1: {spec.architecture}'s dense MLP layers are replicated on every rank "
                "(the rule of its SGLang model file), not split over TP."
            )
        else:
            notes.append(
                f"{name}: moe_dense_tp_size 1 changes no weights of {spec.architecture} "
                "(only DeepSeek-V2/V3 and GLM-4.5 models replicate their dense layers with it)."
            )


# ---------------------------------------------------------------------------
# Prefill/decode disaggregation (plan/pd.py)
# ---------------------------------------------------------------------------


def pd_tp_problems(pd: dict, spec: ModelSpec) -> list[str]:
    """Prefill and decode must have one TP size unless the model's KV is MLA's latent vector.

    A GQA/MHA KV cache is split by heads over the TP ranks: a decode rank of another TP size needs
    slices of several prefill ranks, which SGLang's KV senders do not assemble on non-MLA models
    (the transfer fails or waits until the bootstrap timeout). MLA keeps one latent vector per
    token on every rank, so any TP pair works."""
    tp_p, tp_d = pd["prefill"]["tp"], pd["decode"]["tp"]
    if tp_p == tp_d or spec.family == "mla_moe":
        return []
    return [
        f"prefill tp {tp_p} and decode tp {tp_d} differ on {spec.architecture}, whose KV cache is split by "
        "heads over the TP ranks (not MLA): SGLang's KV transfer between different TP sizes fails or "
        f"hangs until its bootstrap timeout. Give both roles the same tp (e.g. tp: {tp_d})."
    ]


def pd_gpu_problems(pd: dict, placed: dict, roles: dict, hosts: list, gpu_memory_gib: float) -> list[str]:
    """GPUs used by more than one server of a pd layout: refused unless pd.share_gpus, and then the
    memory both static pools leave on a shared GPU must hold each server's CUDA graphs and activations.
    SGLang sizes a server's static pool from the memory free at its start: the decode server, started
    second, takes its mem_fraction_static of what the prefill server left, so the two fractions need
    not add up to 1; what stays outside both pools is gpu x (1 - prefill's) x (1 - decode's)."""
    users: dict[tuple, list] = {}
    for role, blocks in placed.items():
        for index, (host_i, gpus) in enumerate(blocks):
            for gpu in gpus:
                users.setdefault((host_i, gpu), []).append((role, index))
    out = []
    for (host_i, gpu), who in sorted(users.items()):
        if len(who) < 2:
            continue
        names = " and ".join(f"{role} {index}" for role, index in who)
        if not pd["share_gpus"] or len({role for role, _index in who}) < len(who):
            out.append(
                f"GPU {gpu} of {hosts[host_i]} is used by {names}: the servers of a pd layout get GPUs of "
                "their own; give the roles other gpus:, or set pd.share_gpus: true to let prefill and "
                "decode share them."
            )
            break
        fractions = {role: float(roles[role]["mem_fraction_static"]) for role, _index in who}
        if not all(0 < f < 1 for f in fractions.values()):
            continue  # each role's own plan refuses a fraction outside (0, 1)
        outside = gpu_memory_gib
        for f in fractions.values():
            outside *= 1 - f
        need = MIN_DYNAMIC_GIB * len(who)
        if outside < need:
            out.append(
                f"GPU {gpu} of {hosts[host_i]} is shared by {names}: the prefill server's static pool takes "
                f"{fractions['prefill']:g} of {gpu_memory_gib:g} GiB and the decode server, started after it, "
                f"{fractions['decode']:g} of what is left, so {outside:.1f} GiB stay outside both pools for "
                f"the two servers' CUDA graphs and activations (at least {need:g} GiB): lower "
                "pd.decode.mem_fraction_static or pd.prefill.mem_fraction_static."
            )
            break
    return out
