"""Predicted vs measured for every real speed measurement the repo holds (speed.py, docs/cost-model.md).

Groups:
  seed      the seed's by-hand figures: Kimi K2.6 INT4 on 8 x RTX PRO 6000 Blackwell, PCIe (issue #25);
            single = one request (~300 tokens of context), peak = 64 running requests at 2k context, decode only
  h200      every ok record with concurrency levels under benchmarks/results/ (the model from models/<name>,
            the server's own argv, the bench's request lengths replayed through speed.simulate)
  h200-eager  the same for records served without CUDA graphs (host-bound)
  h200-stalled levels the stall rule calls stalled that the record kept as first measured (shown, not checked)
  h200-pins every level of the records that pinned a constant (benchmarks/pin_constants.py): shown, not
            checked (a constant fitted to a figure cannot then be checked against it)
  published figures for other boxes, with their source URL

Per group: median absolute error, the worst, and Kendall tau between predicted and measured order.
No constant of speed.py was fitted to any figure printed outside the group h200-pins.

    .venv/bin/python benchmarks/bench_predict.py [--json]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import statistics
import sys

import plan_arch_check  # beside this script: how a lease's models are named and configured
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "module_utils"))

from sglang_layouts import speed  # noqa: E402
from sglang_layouts.bench import stall  # noqa: E402
from sglang_layouts.plan import planner  # noqa: E402
from sglang_layouts.report import speed_check  # noqa: E402

# The seed's box as the demo inventory describes it (hardware, layouts, serving flags) and its by-hand
# figures with their workload: the same inputs as the demo report's reference rows.
DEMO_INVENTORY = os.path.join(REPO, "inventory", "demo")
SEED_REFERENCE_REL = "benchmarks/reference/seed-box.json"
SEED_REFERENCE = os.path.join(REPO, SEED_REFERENCE_REL)
SERVING_KEYS = ("mem_fraction_static", "context_length", "max_running_requests", "attention_backend")


def seed_box() -> tuple[dict, dict, dict]:
    """(hardware, serving, layouts by name) of the demo inventory's seed-box."""
    with open(os.path.join(DEMO_INVENTORY, "hosts.yml"), encoding="utf-8") as f:
        host = yaml.safe_load(f)["sglang_hosts"]["hosts"]["seed-box"]
    with open(os.path.join(DEMO_INVENTORY, "group_vars", "sglang_hosts.yml"), encoding="utf-8") as f:
        gv = yaml.safe_load(f)
    hardware = {k: host[k] for k in ("gpu_count", "gpu_memory_gib", "gpu_interconnect", "gpu_name")}
    serving = {k: gv[f"sglang_{k}"] for k in SERVING_KEYS if f"sglang_{k}" in gv}
    return hardware, serving, {lay["name"]: lay for lay in gv["sglang_layouts"]}


SEED_HW, SEED_SERVING, SEED_LAYOUTS = seed_box()
RTX6KPRO = "https://github.com/voipmonitor/rtx6kpro/blob/main/models/kimi-k25.md"
# (what, layout, hardware, measured single tok/s, source): Kimi K2.5 has K2.6's text shapes
PUBLISHED = (
    (
        "Kimi K2.5 INT4 SGLang TP8, 8 x RTX PRO 6000, one request (73-90)",
        {"name": "tp8", "tp": 8},
        SEED_HW,
        81.5,
        RTX6KPRO,
    ),
)
# Figures of runs whose records are not in the repo (issue #25's table): H200, one request then c16.
H200_TABLE = (
    ("kimi-k2.6-cut8", "dummy", 256, 256, {1: 410.0, 16: 4259.0}, "issue #25 table (warm restart)"),
)


def spec_of(name: str):
    """The model of models/<name> with real weights (a layout's args say when they are dummy)."""
    return planner.load_model(plan_arch_check.repo_model(name, dummy=False))


def model(name: str, layout: dict, hw: dict, serving: dict):
    p = planner.plan_layout(layout, spec_of(name), hw, serving)
    m, why = speed.model_for(p, hw)
    if m is None:
        raise SystemExit(why)
    return m, p


def row(group, what, measured, predicted, source):
    err = None if not measured else 100.0 * (predicted - measured) / measured
    return {
        "group": group,
        "what": what,
        "measured": measured,
        "predicted": round(predicted, 1),
        "error_pct": err,
        "source": source,
    }


def seed_rows():
    """The seed's by-hand figures beside speed.predict at the reference's workload: the prediction the
    demo report sets beside them (report.speed_check.reference_rows)."""
    with open(SEED_REFERENCE, encoding="utf-8") as f:
        ref = json.load(f)
    spec = spec_of("kimi-k2.6")
    out = []
    for r in ref["rows"]:
        plan = planner.plan_layout(SEED_LAYOUTS[r["layout"]], spec, SEED_HW, SEED_SERVING)
        pred, why = speed.predict(plan, SEED_HW, ref["workload"])
        if pred is None:
            raise SystemExit(why)
        for what, key in (("single", "single_tok_s"), ("peak", "peak_tok_s")):
            fig = row("seed", f"{r['layout']} {what}", r[key], pred[key], SEED_REFERENCE_REL)
            out.append({**fig, "cause_named": bool(r.get("known_causes"))})
    return out


def _lengths(cfg, key, n, rng):
    """n request lengths as the bench drew them: uniform in [ratio x L, L] for random-range, else L."""
    ds = cfg.get("dataset") or {}
    length = int(cfg.get(key) or ds.get(key) or 0)
    if ds.get("name") == "random-range":
        low = max(1, int(length * float(ds.get("range_ratio", 0.0))))
        return [rng.randint(low, length) for _ in range(n)]
    return [length] * n


def pinning_figures() -> set[str]:
    """The figures that pinned a constant of speed.py: a record (every level) or record@concurrency."""
    with open(speed.MEASURED_DATA, encoding="utf-8") as f:
        entries = (json.load(f).get("constants") or {}).values()
    return {fig for e in entries for fig in e.get("figures") or []}


def record_model(path: str):
    """(record, model name, SpeedModel, plan) of one ok real record with levels under benchmarks/results/,
    the model from models/<name> and the server's own argv; None for anything else."""
    try:
        with open(path, encoding="utf-8") as f:
            rec = json.load(f)
    except ValueError:
        return None
    if not isinstance(rec, dict) or rec.get("status") != "ok" or rec.get("simulated"):
        return None
    cfg = rec.get("bench_config") or {}
    mpath = ((rec.get("health") or {}).get("model_info") or {}).get("model_path") or ""
    name = os.path.basename(mpath)
    if not os.path.exists(os.path.join(REPO, "models", name, "config.json")):
        return None
    if not cfg.get("ignore_eos", True):
        return None  # outputs end at EOS: the output length is not the configured one
    srv = (rec.get("health") or {}).get("server_args") or {}
    par = (rec.get("prediction") or {}).get("parallel") or {}
    layout = {
        "name": rec["layout"],
        "tp": par.get("tp", 1),
        "pp": par.get("pp", 1),
        "ep": par.get("ep", 1),
    }
    if rec.get("dummy_weights"):
        layout["args"] = {"load_format": "dummy"}
    serving = {
        "mem_fraction_static": srv.get("mem_fraction_static", 0.88),
        "max_running_requests": srv.get("max_running_requests"),
        "context_length": srv.get("context_length"),
        "kv_cache_dtype": None if srv.get("kv_cache_dtype") in (None, "auto") else srv["kv_cache_dtype"],
    }
    hw = record_hw(rec)
    m, p = model(name, layout, hw, serving)
    p["argv"] = rec.get("argv") or p["argv"]  # the server as it ran (CUDA graphs, overlap...)
    m, _ = speed.model_for(p, hw)
    return rec, name, m, p


def record_hw(rec) -> dict:
    """The hardware block of a record's host, as the planner takes it."""
    gpu = rec.get("gpu") or {}
    return {
        "gpu_count": gpu.get("gpu_count", 1),
        "gpu_memory_gib": gpu.get("gpu_memory_gib", 139.8),
        "gpu_interconnect": gpu.get("gpu_interconnect", "none"),
        "gpu_name": record_gpu(rec),
    }


def pd_prediction(path: str, rec: dict, name: str):
    """For a prefill/decode record: its layout as the lease's ladders.yml (the nearest one above the
    record) defined it, planned for the record's GPU, and speed.predict_pd's output tok/s per
    (concurrency, input_len, output_len); None for any other record."""
    if not (rec.get("health") or {}).get("pd"):
        return None
    folder = os.path.dirname(path)
    while not os.path.exists(os.path.join(folder, "ladders.yml")):
        if os.path.dirname(folder) == folder:
            return None
        folder = os.path.dirname(folder)
    with open(os.path.join(folder, "ladders.yml"), encoding="utf-8") as f:
        ladder = (yaml.safe_load(f).get("sglang_gpu_ladders") or {}).get(name) or []
    layouts = [lay for lay in ladder if lay.get("name") == rec["layout"]]
    if not layouts:
        return None
    hw = record_hw(rec)
    doc = planner.plan_host(
        {
            "host": rec.get("host") or "h",
            "model": plan_arch_check.repo_model(name, dummy=bool(rec.get("dummy_weights"))),
            "sglang_version": (rec.get("versions") or {}).get("sglang") or "0.5.16",
            "hardware": hw,
            "serving": {"mem_fraction_static": 0.88},
            "layouts": layouts,
        }
    )

    def output_tok_s(conc: int, input_len: int, output_len: int) -> float:
        bench = {"concurrency": [conc], "input_len": input_len, "output_len": output_len}
        got, why = speed.predict_pd(doc["layouts"][0], hw, bench)
        if got is None:
            raise SystemExit(why)
        return got["by_concurrency"][str(conc)]["output_tok_s"]

    return output_tok_s


def record_gpu(rec) -> str:
    """The GPU a record ran on (records older than gpu_names ran on the H200)."""
    return ((rec.get("gpu") or {}).get("gpu_names") or ["NVIDIA H200"])[0]


def stalled_levels(rec) -> set[int]:
    """Indexes of the record's levels that the stall rule (bench_stall, every rule its figures allow) calls
    stalled but the record kept as measured once: their figures time a compile, not the warm engine."""
    levels = rec.get("levels") or []
    mrr = ((rec.get("health") or {}).get("server_args") or {}).get("max_running_requests")
    done = [lv for lv in levels if lv.get("completed") and lv.get("ttft_ms") and lv.get("concurrency")]
    out = set()
    for i, lv in enumerate(levels):
        if lv not in done or (lv.get("stall") or {}).get("detected"):
            continue
        others = [o for o in done if o is not lv]
        below = stall.neighbour_below([o for o in others if levels.index(o) < i], lv)
        above = stall.neighbour_above(others, lv)
        if stall.stall_verdict(lv, below, mrr, above=above)["detected"]:
            out.add(i)
    return out


def h200_rows():
    out = []
    pins = pinning_figures()
    for path in sorted(
        glob.glob(os.path.join(REPO, "benchmarks", "results", "**", "*.json"), recursive=True)
    ):
        got = record_model(path)
        if got is None:
            continue
        rec, name, m, p = got
        cfg = rec.get("bench_config") or {}
        rel = os.path.relpath(path, REPO)
        prompts = cfg.get("num_prompts") or []
        stalled = stalled_levels(rec)
        pd = pd_prediction(path, rec, name)
        for i, lv in enumerate(rec.get("levels") or []):
            conc = lv.get("concurrency")
            if conc is None or not lv.get("output_tok_s"):
                continue
            n = prompts[i] if i < len(prompts) else conc
            rng = random.Random(cfg.get("seed", 1))
            ins, outs = _lengths(cfg, "input_len", n, rng), _lengths(cfg, "output_len", n, rng)
            if pd:
                pred = {"output_tok_s": pd(conc, round(statistics.mean(ins)), round(statistics.mean(outs)))}
            else:
                pred = m.simulate(conc, ins, outs, p["kv_tokens"])
            ds = (cfg.get("dataset") or {}).get("name")
            what = f"{name} {rec['layout']} c{conc}" + (f" ({ds}, {n} prompts)" if ds else "")
            r = row("h200", what, lv["output_tok_s"], pred["output_tok_s"], rel)
            gpu = record_gpu(rec)
            unchecked = (p.get("cost") or {}).get("unchecked")
            if "H200" not in gpu:
                # no bench figure was fitted on this GPU: its datasheet row and the measured constants
                r["group"] = "other-gpu-unchecked" if unchecked else "other-gpu"
                r["what"] = f"{what} on {gpu}"
            elif rel in pins or f"{rel}@{conc}" in pins:
                r["group"] = "h200-pins"
            elif i in stalled:
                r["group"] = "h200-stalled"  # the figure timed a stall the record kept (issue #28)
            elif not m.graphed(conc):
                r["group"] = "h200-eager"  # graphs off, or a batch above the largest captured graph
            elif unchecked:
                r["group"] = "h200-unchecked"  # the plan says its prediction is unchecked (why)
            out.append(r)
    for name, fmt, in_len, out_len, figures, source in H200_TABLE:
        hw = {"gpu_count": 1, "gpu_memory_gib": 139.8, "gpu_interconnect": "none", "gpu_name": "NVIDIA H200"}
        m, p = model(
            name, {"name": "tp1", "tp": 1, "args": {"load_format": fmt}}, hw, {"max_running_requests": 64}
        )
        for conc, measured in figures.items():
            pred = m.bench_level(conc, in_len, out_len, p["kv_tokens"])
            out.append(
                row("h200", f"{name} tp1 c{conc} (dummy routing)", measured, pred["output_tok_s"], source)
            )
    return out


def published_rows():
    out = []
    for what, layout, hw, measured, source in PUBLISHED:
        m, _ = model("kimi-k2.6", layout, hw, {"max_running_requests": 64})
        out.append(row("published", what, measured, 1.0 / m.decode_step(1, 300), source))
    return out


def kendall_tau(xs, ys):
    n, s = len(xs), 0
    for i in range(n):
        for j in range(i + 1, n):
            s += (
                1
                if (xs[i] - xs[j]) * (ys[i] - ys[j]) > 0
                else -1
                if (xs[i] - xs[j]) * (ys[i] - ys[j]) < 0
                else 0
            )
    pairs = n * (n - 1) / 2
    return s / pairs if pairs else None


def summary(rows):
    out = {}
    for group in dict.fromkeys(r["group"] for r in rows):
        g = [r for r in rows if r["group"] == group and r["error_pct"] is not None]
        errs = [abs(r["error_pct"]) for r in g]
        worst = max(g, key=lambda r: abs(r["error_pct"]))
        out[group] = {
            "n": len(g),
            "median_abs_error_pct": statistics.median(errs),
            "worst": f"{worst['what']} {worst['error_pct']:+.0f}%",
            "kendall_tau": kendall_tau([r["measured"] for r in g], [r["predicted"] for r in g]),
        }
        if group == "seed":
            for kind in ("single", "peak"):
                k = [r for r in g if r["what"].endswith(kind)]
                out[group][f"kendall_tau_{kind}"] = kendall_tau(
                    [r["measured"] for r in k], [r["predicted"] for r in k]
                )
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    rows = seed_rows() + h200_rows() + published_rows()
    summ = summary(rows)
    if a.json:
        print(json.dumps({"rows": rows, "summary": summ}, indent=2))
        return 0
    width = max(len(r["what"]) for r in rows)
    for group in summ:
        print(f"\n== {group}")
        print(f"{'what':<{width}}  {'measured':>9}  {'predicted':>9}  {'error':>7}  source")
        for r in (r for r in rows if r["group"] == group):
            print(
                f"{r['what']:<{width}}  {r['measured']:>9.1f}  {r['predicted']:>9.1f}  {r['error_pct']:>+6.1f}%  {r['source']}"
            )
        s = summ[group]
        taus = ", ".join(f"{k} {v:+.2f}" for k, v in s.items() if k.startswith("kendall") and v is not None)
        print(
            f"-- {group}: n {s['n']}, median |error| {s['median_abs_error_pct']:.1f}%, worst {s['worst']}; {taus}"
        )
    print("\n== targets")
    for line in targets(rows, summ):
        print(line)
    return 0


def targets(rows, summ):
    """The issue's targets, met or not, as printed lines."""
    h200 = [r for r in rows if r["group"] == "h200"]
    over = [r["what"] for r in h200 if abs(r["error_pct"]) > 15]
    seed = [r for r in rows if r["group"] == "seed"]
    flagged = [r for r in seed if speed_check.flag_of([r["measured"] / r["predicted"]])]
    outside = [r for r in seed if abs(r["error_pct"]) > 30 and r not in flagged]

    def group_line(title, group):
        g = summ.get(group)
        detail = (
            f"{g['n']} figures, median {g['median_abs_error_pct']:.1f} %, worst {g['worst']}" if g else "none"
        )
        return f"{title}: {detail}"

    return [
        f"H200 (CUDA graphs): every figure within 15 %: {'yes' if not over else 'no: ' + ', '.join(over)}; "
        f"median {summ['h200']['median_abs_error_pct']:.1f} % (target 8 %)",
        group_line(
            "H200, architectures whose plan says the prediction is unchecked (not met, not claimed)",
            "h200-unchecked",
        ),
        group_line(
            "other GPUs (no bench figure fitted; the constants, some from H100 kernel profiles, and the GPUs' datasheet rows)",
            "other-gpu",
        ),
        group_line(
            "other GPUs, architectures whose plan says the prediction is unchecked", "other-gpu-unchecked"
        ),
        f"seed: flagged (measured outside {speed_check.SLOW}-{speed_check.FAST} x the prediction): "
        + (
            ", ".join(r["what"] + (", cause named" if r["cause_named"] else ", no cause") for r in flagged)
            or "none"
        ),
        "seed: unflagged figures beyond 30 %: "
        + (", ".join(f"{r['what']} {r['error_pct']:+.0f}%" for r in outside) or "none"),
    ]


if __name__ == "__main__":
    sys.exit(main())
