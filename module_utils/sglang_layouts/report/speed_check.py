"""Predicted beside measured: each record's speed against the prediction it was measured against.

A real row whose measured figure is below SLOW x its prediction is `slower_than_hardware`, above
FAST x it `faster_than_model`; `speed_flag_causes` lists what the record's own evidence points to
(server arguments, the unit's environment, the interconnect, the levels' warnings and pauses, the routing).
"""

from __future__ import annotations

import json

from ..bench.stall import STALL_MIN_S

SLOW, FAST = 0.6, 1.4

# NCCL variables the planner itself never sets: present in a unit, they change the collectives.
NCCL_PREFIX = "NCCL_"


def _ratio(measured, predicted):
    if isinstance(measured, (int, float)) and isinstance(predicted, (int, float)) and predicted > 0:
        return measured / predicted
    return None


def compare(rec: dict) -> list[dict]:
    """Per level (and single-request speed): measured, predicted and their ratio."""
    speed = (rec.get("prediction") or {}).get("speed") or {}
    by = speed.get("by_concurrency") or {}
    out = []
    single = (rec.get("summary") or {}).get("single_request_tok_s")
    if single is not None and speed.get("single_tok_s"):
        out.append(
            {
                "what": "single_tok_s",
                "measured": single,
                "predicted": speed["single_tok_s"],
                "ratio": _ratio(single, speed["single_tok_s"]),
            }
        )
    for lv in rec.get("levels") or []:
        if lv.get("concurrency") is None:
            continue
        predicted = lv.get("predicted_output_tok_s")
        if predicted is None:
            predicted = (by.get(str(lv["concurrency"])) or {}).get("output_tok_s")
        if predicted is None:
            continue
        out.append(
            {
                "what": f"c{lv['concurrency']}",
                "measured": lv.get("output_tok_s"),
                "predicted": predicted,
                "ratio": _ratio(lv.get("output_tok_s"), predicted),
            }
        )
    return out


def flag_of(ratios: list[float | None]) -> str | None:
    ratios = [r for r in ratios if r is not None]
    if any(r < SLOW for r in ratios):
        return "slower_than_hardware"
    if any(r > FAST for r in ratios):
        return "faster_than_model"
    return None


def causes(rec: dict) -> list[str]:
    """What the record's own evidence says about its speed (empty when it says nothing)."""
    out = []
    health = rec.get("health") or {}
    args = health.get("server_args") or {}
    argv = [str(a) for a in rec.get("argv") or []]
    if args.get("disable_cuda_graph") or "--disable-cuda-graph" in argv:
        out.append("CUDA graphs off in the server's arguments: every kernel is launched from the host")
    if args.get("disable_overlap_schedule") or "--disable-overlap-schedule" in argv:
        out.append("overlap scheduler off in the server's arguments")
    par = (rec.get("prediction") or {}).get("parallel") or {}
    ranks = 1
    for key in ("tp", "pp", "dp", "ep"):
        ranks = max(ranks, int(par.get(key) or 1))
    # NCCL settings matter only where the layout has collectives (one GPU has none)
    nccl = sorted(k for k in (rec.get("env") or {}) if k.startswith(NCCL_PREFIX)) if ranks > 1 else []
    if nccl:
        out.append(
            "NCCL settings in the unit's environment: " + ", ".join(f"{k}={rec['env'][k]}" for k in nccl)
        )
    if (health.get("log_figures") or {}).get("moe_default_config"):
        out.append(
            "the MoE kernel ran SGLang's default Triton config: no tuned config file for this expert shape, "
            "GPU and dtype (its log: 'Using default MoE kernel config'); SGLang's fused_moe_triton tuning "
            "script makes one"
        )
    backend = args.get("attention_backend")
    if backend:
        out.append(f"attention backend {backend}")
    interconnect = (rec.get("gpu") or {}).get("gpu_interconnect")
    if interconnect == "pcie" and int(par.get("tp") or 1) > 2:
        out.append(
            f"PCIe with tp {par.get('tp')}: no custom all-reduce above two GPUs, NCCL on every all-reduce"
        )
    for lv in rec.get("levels") or []:
        text = json.dumps(lv.get("warnings") or []).lower()
        if "jit" in text or "compil" in text:
            out.append(f"a JIT compilation during level c{lv.get('concurrency')}")
        # a pause the stall rule's floor calls long, in the figures the level kept (its only measurement,
        # or a second one that paused too): that level's figure times the pause, not the warm engine
        gap = lv.get("progress_gap_ms")
        if gap is not None and gap > 1000.0 * STALL_MIN_S:
            out.append(
                f"{gap / 1000:.1f} s with no output on any stream during level c{lv.get('concurrency')} "
                "(a kernel compiled for a new batch shape, or another pause of the server): its figure times "
                "the pause"
            )
    assumptions = " ".join(((rec.get("prediction") or {}).get("speed") or {}).get("assumptions") or [])
    if "correction-bias router" in assumptions:
        out.append("dummy weights with a correction-bias router: every token goes to the same experts")
    return out


def check(rec: dict) -> dict:
    """speed_flag (None for simulated rows: their speed is the model), causes, and the comparison."""
    cmp = compare(rec)
    flag = None if rec.get("simulated") else flag_of([c["ratio"] for c in cmp])
    return {
        "speed_flag": flag,
        "speed_flag_causes": causes(rec) if flag else [],
        "speed_compare": cmp,
    }


def predictable(rec: dict) -> bool:
    """Whether the record keeps what predict_again needs: the host's figures, and its plan's cost or a
    pd layout's roles (speed.pd_inputs)."""
    pred = rec.get("prediction") or {}
    speed = pred.get("speed") or {}
    return bool(speed.get("hardware") and (pred.get("cost") or speed.get("pd_inputs")))


def predict_again(rec: dict, workload: dict) -> dict | None:
    """The record's layout predicted at another workload (its plan's cost, argv and host figures)."""
    from ..speed import predict, predict_pd

    if not predictable(rec):
        return None
    pred = rec["prediction"]
    hardware = pred["speed"]["hardware"]
    roles = pred["speed"].get("pd_inputs")
    if roles:
        # a pd layout: each role's cost and KV as its plan kept them (speed.pd_inputs)
        out, _why = predict_pd(
            {"pd": roles, "dummy_weights": bool(rec.get("dummy_weights"))}, hardware, workload
        )
        return out
    layout = {**pred, "argv": rec.get("argv") or [], "dummy_weights": bool(rec.get("dummy_weights"))}
    out, _why = predict(layout, hardware, workload)
    return out


def reference_rows(reference: dict, records: list[dict]) -> list[dict]:
    """Reference measurements (taken by hand, outside this tool) beside the model's prediction for the
    same host/layout at the reference's own workload (`workload`: concurrency, input_len, output_len)."""
    by_key = {(r["host"], r["layout"]): r for r in records}
    workload = reference.get("workload") or {}
    out = []
    for ref in reference.get("rows") or []:
        rec = by_key.get((ref.get("host"), ref.get("layout")))
        pred = predict_again(rec, workload) if rec else None
        pred_single = (pred or {}).get("single_tok_s")
        pred_peak = (pred or {}).get("peak_tok_s")
        ratios = [_ratio(ref.get("single_tok_s"), pred_single), _ratio(ref.get("peak_tok_s"), pred_peak)]
        flag = flag_of(ratios)
        out.append(
            {
                **ref,
                "predicted_single_tok_s": pred_single,
                "predicted_peak_tok_s": pred_peak,
                "ratios": ratios,
                "speed_flag": flag,
                "speed_flag_causes": list(ref.get("known_causes") or []) if flag else [],
            }
        )
    return out
