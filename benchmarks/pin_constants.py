"""Pin speed.py's OPEN constants from our runs (H200 shard records, decode-step profiles; docs/cost-model.md section 5), and print how.

Each constant is solved from named levels of committed records, with the other constants as they
stand, so the arithmetic is here to rerun and to read:

  M4  tau_cpu_eager_us      a decode step without CUDA graphs is host-bound: ITL p50 at c1 of the
                            --disable-cuda-graph server / (layers x kernels per layer)
  M5  t_cpu_sched_ms,       the scheduler CPU the overlap scheduler hides: ITL p50 without it minus
      t_cpu_sched_per_req_us  ITL p50 with it, level by level (1..64 running), a least-squares line
  M7  t_request_ms,         TTFT p50 at c1 = t_request + the model's prefill: at 256 prompt tokens
      eta_f_attn_triton     the prefill is host-bound (t_request), at 4096 the triton extend
                            attention's FLOP efficiency is what is left (bisection)
  M3  eta_weights,          with --profile DIR (benchmarks/profile_decode.py's profile-summary.json
      tau_kernel_us,        of Qwen3-30B-A3B tp1): the weight-streaming kernels' time (GEMM and MoE
      t_fixed_ms,           classes) against the weight bytes each point's step reads, a least-squares
                            line whose slope is 1 / (eta_weights x BW); what a batch-1 replay's span
                            spends beyond its weight and KV bytes, per kernel node, is tau_kernel_us;
                            the GPU's step period minus the replay's span is t_fixed; an elementwise
      tau_elementwise_us    node costs its class's busy time per kernel plus the idle per boundary
  M3  eta_elementwise       with --profile-elementwise DIR (Gemma 3 27B text tp1): the elementwise
                            kernels' time per node against the bytes each moves, by batch
  M3  q_extra_mxfp4_us,     with --profile-mxfp4 DIR (gpt-oss-120b tp1, the triton_kernels MXFP4 MoE)
      q_extra_fp8_us        or --profile-fp8 DIR (minimax-m2-cut24 tp1, FP8 128 x 128 blocks): the
                            batch-1 replay's span beyond the model's step, per layer
  M6  eta_kv                the same profile's decode-attention time at batch >= 8 against the KV
                            bytes the step reads: the least-squares slope is 1 / (eta_kv x BW)

    .venv/bin/python benchmarks/pin_constants.py            # print
    .venv/bin/python benchmarks/pin_constants.py --write    # and store module_utils/.../data/speed_measured.json
    .venv/bin/python benchmarks/pin_constants.py --profile benchmarks/results/<lease>/prof-qwen3-30b-a3b

Each entry names the `figures` it used up (a record, or record@concurrency for one level):
bench_predict.py prints them in its group `h200-pins`, not as checks.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "module_utils"))
sys.path.insert(0, os.path.join(REPO, "benchmarks"))

import bench_predict  # noqa: E402
from sglang_layouts import fileio, speed  # noqa: E402

LEASE = "benchmarks/results/h200-2026-12-04"
LEASE_CMD = (
    f"RESULTS={LEASE} EXTRA_VARS='benchmarks/extra-vars/speed-pins.yml {LEASE}/{{vars}}' "
    "GPU_MODELS=qwen3-30b-a3b RUN={run} benchmarks/gpu_lease.sh start"
)
TP1 = f"{LEASE}/h200g-qwen3-30b-a3b/gpu-host/tp1.json"
EAGER = f"{LEASE}/h200g-qwen3-30b-a3b/gpu-host/tp1-eager.json"
NO_OVERLAP = f"{LEASE}/h200g-qwen3-30b-a3b/gpu-host/tp1-no-overlap.json"
M7 = f"{LEASE}/h200h-qwen3-30b-a3b/gpu-host/tp1-m7.json"
H200 = {"gpu_count": 1, "gpu_memory_gib": 139.8, "gpu_interconnect": "none", "gpu_name": "NVIDIA H200"}


def _record(path):
    with open(os.path.join(REPO, path), encoding="utf-8") as f:
        return json.load(f)


def _level(rec, conc):
    return next(lv for lv in rec["levels"] if lv["concurrency"] == conc)


def _model(rec, hw=H200, name="qwen3-30b-a3b"):
    """The speed model of models/<name> tp1 as the record's (or profile's) server ran it (its argv)."""
    _, p = bench_predict.model(
        name, {"name": rec["layout"], "tp": 1, "args": {"load_format": "dummy"}}, hw, {}
    )
    p["argv"] = rec["argv"]
    m, _ = speed.model_for(p, hw)
    return m


def _set(name, value):
    status, source = speed.CONSTANTS[name][1:]
    speed.CONSTANTS[name] = (value, status, source)


def _pin(value, source, derivation, command, figures=()):
    """One entry of speed_measured.json: the value, where it comes from and how, the lease command
    that made its source, and the figures the fit used up (bench_predict shows those as pins)."""
    return {
        "value": value,
        "source": source,
        "figures": list(figures),
        "derivation": derivation,
        "command": command,
    }


def pin_eager():
    rec = _record(EAGER)
    m = _model(rec)
    kernels = sum(int(st["layers"]) for st in m.stages) * m.k_layer
    itl = _level(rec, 1)["itl_ms"]["p50"]
    return {
        "tau_cpu_eager_us": _pin(
            round(itl * 1e3 / kernels, 2),
            EAGER,
            f"ITL p50 at c1 {itl:.2f} ms / ({kernels} kernels: layers x {m.k_layer})",
            LEASE_CMD.format(vars="ladders-qwen3.yml", run="h200g"),
            figures=[EAGER],
        )
    }


def pin_sched():
    on, off = _record(TP1), _record(NO_OVERLAP)
    pts = [
        (lv["concurrency"], lv["itl_ms"]["p50"] - _level(on, lv["concurrency"])["itl_ms"]["p50"])
        for lv in off["levels"]
    ]
    slope, base = _least_squares(pts)
    how = "ITL p50 without - with the overlap scheduler by running requests: " + ", ".join(
        f"{b}: {d:.3f} ms" for b, d in pts
    )
    cmd = LEASE_CMD.format(vars="ladders-qwen3.yml", run="h200g")
    return {
        "t_cpu_sched_ms": _pin(
            # tp1's own prediction has no scheduler CPU (overlap on): only the other record is used up
            round(base, 3),
            f"{NO_OVERLAP} - {TP1}",
            how + "; least-squares intercept",
            cmd,
            figures=[NO_OVERLAP],
        ),
        "t_cpu_sched_per_req_us": _pin(
            round(slope * 1e3, 2),
            f"{NO_OVERLAP} - {TP1}",
            "the same line's slope",
            cmd,
            figures=[NO_OVERLAP],
        ),
    }


def pin_prefill():
    short, long_ = _record(TP1), _record(M7)
    m_short, m_long = _model(short), _model(long_)
    ttft_short = _level(short, 1)["ttft_ms"]["p50"]
    ttft_long = _level(long_, 1)["ttft_ms"]["p50"]
    in_short = short["bench_config"]["input_len"]
    in_long = long_["bench_config"]["input_len"]
    t_request = ttft_short - m_short.prefill(in_short) * 1e3
    target = (ttft_long - t_request) * 1e-3
    lo, hi = 0.01, 1.0  # prefill time falls as the efficiency rises
    for _ in range(60):
        mid = (lo + hi) / 2
        _set("eta_f_attn_triton", mid)
        if m_long.prefill(in_long) > target:
            lo = mid
        else:
            hi = mid
    eta = (lo + hi) / 2
    cmd = LEASE_CMD.format(vars="m7-qwen3.yml", run="h200h")
    return {
        "t_request_ms": _pin(
            round(t_request, 2),
            f"{TP1} (c1)",
            f"TTFT p50 at c1, {in_short} prompt tokens, {ttft_short:.2f} ms - the model's host-bound prefill",
            LEASE_CMD.format(vars="ladders-qwen3.yml", run="h200g"),
            figures=[f"{TP1}@1"],
        ),
        "eta_f_attn_triton": _pin(
            round(eta, 4),
            f"{M7} (c1)",
            f"TTFT p50 at c1, {in_long} prompt tokens, {ttft_long:.2f} ms - t_request = the model's prefill",
            cmd,
            figures=[M7],
        ),
    }


STREAMING = ("gemm", "moe")  # profile_decode.py's kernel classes that stream weights


def _profile_points(folder):
    with open(os.path.join(REPO, folder, "profile-summary.json"), encoding="utf-8") as f:
        doc = json.load(f)
    points = {p["point"]: p for p in doc["points"] if p.get("point") and p.get("profile", {}).get("steps")}
    return doc, points


def _profiled_model(doc, default):
    """The models/ folder a profile ran (its server's --model-path), or default for an older profile."""
    argv = doc.get("argv") or []
    return os.path.basename(argv[argv.index("--model-path") + 1]) if "--model-path" in argv else default


def _profile_context(p):
    """A profiled point's context while profiled: the prompt, the tokens decoded when the profile was
    asked for, half the steps."""
    return p["prompt_tokens"] + p["decoded_at_profile"] + p["profile"]["steps"] / 2


def _profile_cmd(name, folder):
    return f"PROFILE_MODEL={name} POINTS=1x256,16x256,8x2048 benchmarks/gpu_lease.sh profile  # {folder}"


def _profile_hw(folder, hw):
    """The hardware of a profile: its own GPU when profile_decode.py recorded it, else --profile-gpu's."""
    doc, _ = _profile_points(folder)
    return {**hw, "gpu_name": doc["gpu_name"]} if doc.get("gpu_name") else hw


def _class_us(profile, names):
    return sum(profile["by_class"].get(n, {}).get("us", 0.0) for n in names)


def _least_squares(pts):
    """(slope, intercept) of the least-squares line through (x, y) points."""
    n = len(pts)
    mx = sum(x for x, _ in pts) / n
    my = sum(y for _, y in pts) / n
    slope = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
    return slope, my - slope * mx


def pin_profile(folder, hw):
    """M3 and M6 from one profile of Qwen3-30B-A3B tp1 (decode steps replayed from CUDA graphs)."""
    doc, points = _profile_points(folder)
    one = next((p for p in points.values() if p["batch"] == 1), None)
    if one is None:
        raise SystemExit(f"{folder}: no batch-1 point to pin tau_kernel_us and t_fixed_ms from")
    m = _model({"layout": "tp1", "argv": doc.get("argv") or []}, hw)
    st = m.stages[0]
    layers = int(st["layers"])
    src = f"{folder}/profile-summary.json"
    cmd = f"PROFILE_MODEL=qwen3-30b-a3b benchmarks/gpu_lease.sh profile  # {folder}"

    def weight_bytes(batch):
        return float(st.get("dense_bytes", 0)) + float(st.get("expert_bytes", 0)) * m.expert_share(batch)

    def line(pts, what, name):
        if len({round(x) for x, _, _ in pts}) < 2:
            raise SystemExit(f"{folder}: {name} needs points that read different {what}")
        slope, intercept = _least_squares([(x, y) for x, y, _ in pts])
        how = ", ".join(f"{n}: {x / 1e9:.3f} GB, {y * 1e6:.1f} us" for x, y, n in pts)
        return 1.0 / (slope * m.bw), intercept, how, ", ".join(n for _, _, n in pts)

    out = {}
    # M6: decode attention against the KV bytes it reads, where the reads are large (batch >= 8)
    kv_pts = [
        (
            m.kv_read_bytes(layers, p["batch"], p["batch"] * _profile_context(p)),
            _class_us(p["profile"], ("attention_decode",)) * 1e-6,
            p["point"],
        )
        for p in points.values()
        if p["batch"] >= 8
    ]
    if len(kv_pts) >= 2:
        eta_kv, _, how, names = line(kv_pts, "KV bytes", "eta_kv")
        out["eta_kv"] = _pin(
            round(eta_kv, 3),
            f"{src} ({names})",
            f"decode-attention time per step against KV bytes read: {how}; least-squares slope "
            f"= 1 / (eta_kv x {m.bw / 1e9:.0f} GB/s)",
            cmd,
        )
    # M3: the weight-streaming kernels' time against the bytes they read, over every point; the
    # intercept is their part of the per-kernel floors (a batch-1 GEMV is latency-bound, so batch 1
    # alone would put the floors into eta_weights)
    stream = [
        (weight_bytes(p["batch"]), _class_us(p["profile"], STREAMING) * 1e-6, p["point"])
        for p in points.values()
    ]
    eta_w, intercept, how, names = line(stream, "weight bytes (batch sizes)", "eta_weights")
    out["eta_weights"] = _pin(
        round(eta_w, 3),
        f"{src} ({names})",
        f"GEMM and MoE kernel time per step against the weight bytes it reads: {how}; least-squares "
        f"slope = 1 / (eta_weights x {m.bw / 1e9:.0f} GB/s), intercept {intercept * 1e6:.0f} us (their floors)",
        cmd,
    )
    # what the batch-1 replay spends beyond streaming its weights and KV is one floor per kernel node
    pr = one["profile"]
    kernels = pr["kernels_per_step"][len(pr["kernels_per_step"]) // 2]
    bytes_us = weight_bytes(1) / (eta_w * m.bw) * 1e6
    eta_kv = out["eta_kv"]["value"] if "eta_kv" in out else speed.c("eta_kv")
    kv_us = m.kv_read_bytes(layers, 1, _profile_context(one)) / (eta_kv * m.bw) * 1e6
    out["tau_kernel_us"] = _pin(
        round((pr["span_us_median"] - bytes_us - kv_us) / kernels, 3),
        f"{src} ({one['point']})",
        f"(replay span {pr['span_us_median']:.1f} us - weights {weight_bytes(1) / 1e9:.3f} GB at "
        f"eta_weights, {bytes_us:.1f} us - KV {kv_us:.1f} us) / {kernels} kernel nodes ({kernels / layers:.2f} "
        f"per layer; the model counts {m.k_layer})",
        cmd,
    )
    # an elementwise node (a few KB): its class's busy time per kernel plus the gap before the next node
    elementwise = (pr.get("by_class") or {}).get("elementwise")
    if elementwise and pr.get("idle_us_per_kernel_boundary") is not None:
        per = elementwise["us"] / elementwise["count"]
        out["tau_elementwise_us"] = _pin(
            round(per + pr["idle_us_per_kernel_boundary"], 3),
            f"{src} ({one['point']})",
            f"elementwise kernels {elementwise['us']:.1f} us / {elementwise['count']} + the replay's idle "
            f"{pr['idle_us_per_kernel_boundary']:.3f} us per node boundary",
            cmd,
        )
    if pr.get("outside_replay_us_median") is not None:
        out["t_fixed_ms"] = _pin(
            round(pr["outside_replay_us_median"] / 1e3, 4),
            f"{src} ({one['point']})",
            f"step period {pr['period_us_median']:.1f} us - replay span {pr['span_us_median']:.1f} us",
            cmd,
        )
    return out


# per-layer extras of a weight path, each pinned from a profile of a model that takes it:
# constant -> (the model a profile without its --model-path ran, the path's test on the speed model,
# what the path is); a cut of the same model serves as well (minimax-m2-cut16 fits an H100)
LAYER_EXTRAS = {
    "q_extra_mxfp4_us": (
        "gpt-oss-120b",
        lambda m: m.cost.get("mxfp4_moe_path") == "triton_kernels",
        "the triton_kernels MXFP4 MoE",
    ),
    "q_extra_fp8_us": (
        "minimax-m2-cut24",
        lambda m: m.quant == "fp8_block",
        "FP8 128 x 128 block-scaled GEMMs",
    ),
}


def pin_layer_extra(folder, hw, constant):
    """M3 on a model whose weight path the other constants do not cover: what its batch-1 replay
    spends per layer beyond the model's step, every other constant as pinned, as `constant`."""
    default, takes_path, path = LAYER_EXTRAS[constant]
    doc, points = _profile_points(folder)
    name = _profiled_model(doc, default)
    one = next((p for p in points.values() if p["batch"] == 1), None)
    if one is None:
        raise SystemExit(f"{folder}: no batch-1 point to pin {constant} from")
    m = _model({"layout": "tp1", "argv": doc.get("argv") or []}, hw, name)
    if not takes_path(m):
        raise SystemExit(f"{folder}: {name}'s plan on {hw['gpu_name']} does not take {path}")
    pr = one["profile"]
    with speed.overrides({constant: 0.0}):
        terms = m.decode_terms(1, _profile_context(one))
    replay_us = (terms["step_s"] - terms["cpu"] - terms["fixed"]) * 1e6
    layers = int(m.stages[0]["layers"])
    return {
        constant: _pin(
            round((pr["span_us_median"] - replay_us) / layers, 2),
            f"{folder}/profile-summary.json ({one['point']})",
            f"{path}: (replay span {pr['span_us_median']:.1f} us - the model's replay {replay_us:.1f} us "
            f"with {m.k_layer} kernels a layer and the constants above) / {layers} layers",
            _profile_cmd(name, folder),
        )
    }


def pin_elementwise(folder, hw):
    """M3 on an architecture with unfused elementwise ops (Gemma 3 tp1): their time per node against
    the bytes each moves (batch x hidden x ELEMENTWISE_BYTES_PER_VALUE), over every point; the slope
    is 1 / (eta_elementwise x BW)."""
    doc, points = _profile_points(folder)
    name = _profiled_model(doc, "gemma-3-27b-text")
    m = _model({"layout": "tp1", "argv": doc.get("argv") or []}, hw, name)
    if not m.k_elementwise:
        raise SystemExit(f"{folder}: {name} has no unfused elementwise nodes (Arch.elementwise_per_layer)")
    pts = []
    for p in points.values():
        cls = p["profile"]["by_class"].get("elementwise")
        if cls:
            pts.append(
                (
                    p["batch"] * m.hidden * speed.ELEMENTWISE_BYTES_PER_VALUE,
                    cls["us"] / cls["count"] * 1e-6,
                    p["point"],
                )
            )
    if len({x for x, _, _ in pts}) < 2:
        raise SystemExit(f"{folder}: eta_elementwise needs points of two batch sizes")
    slope, intercept = _least_squares([(x, y) for x, y, _ in pts])
    how = ", ".join(f"{n}: {x / 1e3:.0f} kB, {y * 1e6:.3f} us" for x, y, n in pts)
    return {
        "eta_elementwise": _pin(
            round(1.0 / (slope * m.bw), 3),
            f"{folder}/profile-summary.json ({', '.join(n for _, _, n in pts)})",
            f"elementwise kernel time per node against the bytes it moves ({name}, hidden {m.hidden}): "
            f"{how}; least-squares slope = 1 / (eta_elementwise x {m.bw / 1e9:.0f} GB/s), intercept "
            f"{intercept * 1e6:.2f} us",
            _profile_cmd(name, folder),
        )
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="store the values in " + speed.MEASURED_DATA)
    ap.add_argument("--profile", help="a profile_decode.py folder of Qwen3-30B-A3B tp1 (M3, M6)")
    ap.add_argument(
        "--profile-gpu",
        default="NVIDIA H200",
        help="the GPU the profiles ran on (its bandwidth), for folders that do not record theirs",
    )
    ap.add_argument(
        "--profile-elementwise",
        help="a profile_decode.py folder of Gemma 3 27B text tp1 (M3, eta_elementwise)",
    )
    ap.add_argument(
        "--profile-fp8",
        help="a profile_decode.py folder of minimax-m2-cut24 (or -cut16, which fits an H100) tp1 (M3, q_extra_fp8_us)",
    )
    ap.add_argument(
        "--profile-mxfp4",
        help="a profile_decode.py folder of gpt-oss-120b tp1 on a Hopper GPU (M3, q_extra_mxfp4_us)",
    )
    a = ap.parse_args(argv)
    pinned = {}
    steps = [pin_eager, pin_sched, pin_prefill]
    hw = {**H200, "gpu_name": a.profile_gpu}
    if a.profile_fp8:
        steps.insert(
            0, lambda: pin_layer_extra(a.profile_fp8, _profile_hw(a.profile_fp8, hw), "q_extra_fp8_us")
        )
    if a.profile_mxfp4:
        steps.insert(
            0, lambda: pin_layer_extra(a.profile_mxfp4, _profile_hw(a.profile_mxfp4, hw), "q_extra_mxfp4_us")
        )
    if a.profile_elementwise:
        steps.insert(
            0, lambda: pin_elementwise(a.profile_elementwise, _profile_hw(a.profile_elementwise, hw))
        )
    if a.profile:
        steps.insert(0, lambda: pin_profile(a.profile, _profile_hw(a.profile, hw)))
    for step in steps:
        got = step()
        for name, entry in got.items():
            _set(name, entry["value"])  # later steps see the earlier pins
        pinned.update(got)
    for name, e in pinned.items():
        print(f"{name} = {e['value']}  ({e['derivation']}; {e['source']})")
    if a.write:
        doc = {
            "about": (
                "Constants of speed.py pinned by our own measurements; written by "
                "benchmarks/pin_constants.py --write. Each entry: value, source (the records under "
                "benchmarks/results/), derivation, command (the lease that made the records)."
            ),
            "constants": pinned,
        }
        fileio.write_atomic(speed.MEASURED_DATA, json.dumps(doc, indent=2) + "\n")
        print(f"written: {os.path.relpath(speed.MEASURED_DATA, REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
