"""Pin speed.py's OPEN constants from the H200 shard runs (docs/cost-model.md section 5), and print how.

Each constant is solved from named levels of committed records, with the other constants as they
stand, so the arithmetic is here to rerun and to read:

  M4  tau_cpu_eager_us      a decode step without CUDA graphs is host-bound: ITL p50 at c1 of the
                            --disable-cuda-graph server / (layers x kernels per layer)
  M5  t_cpu_sched_ms,       the scheduler CPU the overlap scheduler hides: ITL p50 without it minus
      t_cpu_sched_per_req_us  ITL p50 with it, level by level (1..64 running), a least-squares line
  M7  t_request_ms,         TTFT p50 at c1 = t_request + the model's prefill: at 256 prompt tokens
      eta_f_attn_triton     the prefill is host-bound (t_request), at 4096 the triton extend
                            attention's FLOP efficiency is what is left (bisection)

    .venv/bin/python benchmarks/pin_constants.py            # print
    .venv/bin/python benchmarks/pin_constants.py --write    # and store module_utils/.../data/speed_measured.json

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


def _model(rec):
    """The speed model of the record's server as it ran (its argv)."""
    _, p = bench_predict.model(
        "qwen3-30b-a3b", {"name": rec["layout"], "tp": 1, "args": {"load_format": "dummy"}}, H200, {}
    )
    p["argv"] = rec["argv"]
    m, _ = speed.model_for(p, H200)
    return m


def _set(name, value):
    status, source = speed.CONSTANTS[name][1:]
    speed.CONSTANTS[name] = (value, status, source)


def pin_eager():
    rec = _record(EAGER)
    m = _model(rec)
    kernels = sum(int(st["layers"]) for st in m.stages) * m.k_layer
    itl = _level(rec, 1)["itl_ms"]["p50"]
    return {
        "tau_cpu_eager_us": {
            "value": round(itl * 1e3 / kernels, 2),
            "source": EAGER,
            "figures": [EAGER],
            "derivation": f"ITL p50 at c1 {itl:.2f} ms / ({kernels} kernels: layers x {m.k_layer})",
            "command": LEASE_CMD.format(vars="ladders-qwen3.yml", run="h200g"),
        }
    }


def pin_sched():
    on, off = _record(TP1), _record(NO_OVERLAP)
    pts = [
        (lv["concurrency"], lv["itl_ms"]["p50"] - _level(on, lv["concurrency"])["itl_ms"]["p50"])
        for lv in off["levels"]
    ]
    n = len(pts)
    mx = sum(b for b, _ in pts) / n
    my = sum(d for _, d in pts) / n
    slope = sum((b - mx) * (d - my) for b, d in pts) / sum((b - mx) ** 2 for b, _ in pts)
    base = my - slope * mx
    how = "ITL p50 without - with the overlap scheduler by running requests: " + ", ".join(
        f"{b}: {d:.3f} ms" for b, d in pts
    )
    cmd = LEASE_CMD.format(vars="ladders-qwen3.yml", run="h200g")
    return {
        "t_cpu_sched_ms": {
            "value": round(base, 3),
            "source": f"{NO_OVERLAP} - {TP1}",
            # tp1's own prediction has no scheduler CPU (overlap on): only the other record is used up
            "figures": [NO_OVERLAP],
            "derivation": how + "; least-squares intercept",
            "command": cmd,
        },
        "t_cpu_sched_per_req_us": {
            "value": round(slope * 1e3, 2),
            "source": f"{NO_OVERLAP} - {TP1}",
            "figures": [NO_OVERLAP],
            "derivation": "the same line's slope",
            "command": cmd,
        },
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
        "t_request_ms": {
            "value": round(t_request, 2),
            "source": f"{TP1} (c1)",
            "figures": [f"{TP1}@1"],
            "derivation": f"TTFT p50 at c1, {in_short} prompt tokens, {ttft_short:.2f} ms - the model's host-bound prefill",
            "command": LEASE_CMD.format(vars="ladders-qwen3.yml", run="h200g"),
        },
        "eta_f_attn_triton": {
            "value": round(eta, 4),
            "source": f"{M7} (c1)",
            "figures": [M7],
            "derivation": f"TTFT p50 at c1, {in_long} prompt tokens, {ttft_long:.2f} ms - t_request = the model's prefill",
            "command": cmd,
        },
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="store the values in " + speed.MEASURED_DATA)
    a = ap.parse_args(argv)
    pinned = {}
    for step in (pin_eager, pin_sched, pin_prefill):
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
