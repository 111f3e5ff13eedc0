#!/usr/bin/env python3
"""Issue 25's M3 and M6 on a GPU host: torch-profiler traces of real SGLang decode steps, reduced to
the terms of the speed model (module_utils/sglang_layouts/speed.py): kernels per step, the GPU time
they take, the gaps between them in a CUDA graph's replay, and the time by kernel class.

Run on the GPU host, with SGLang's venv (no network, standard library only):

    python3 benchmarks/profile_decode.py run --python /opt/sglang/venv/bin/python \
        --model-path /var/lib/sglang-models/qwen3-30b-a3b --out /tmp/prof \
        --points 1x256,64x256,32x2048,8x7680 -- --attention-backend triton --grammar-backend none

It starts one server (dummy weights), and for each point BxN sends B streaming requests of N random
prompt tokens that decode long enough for the profile, asks `/start_profile` for a few steps once
every request is decoding, and reads the inter-token gaps of the streams beside it. Then it writes
`profile-summary.json` (one entry per point) from the traces; `analyze DIR` does that again from the
traces alone, so the committed traces can be reduced anew.

A step is the kernels of one CUDA-graph replay (the kernels that share the `cudaGraphLaunch`'s
correlation id); without graphs, the kernels between two gaps longer than --step-gap-us.
"""

from __future__ import annotations

import argparse
import glob
import gzip
import itertools
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

SCHEMA = "sglang-layouts/profile-decode/1"

# Kernel classes by name (SGLang 0.5.16 on sm_90, triton attention backend). First match wins.
CLASSES = [
    (
        "attention_decode",
        r"_fwd_(grouped_)?kernel_stage[12]|decode_attention|flash_decod|mla_decode|_decode_",
    ),
    ("attention_prefill", r"_fwd_kernel|extend_attention|flash_fwd|prefill"),
    # triton_kernels' MoE path (gpt-oss, mxfp4) routes with bitmatrix / ragged-metadata kernels and
    # combines with `_reduce`; the bf16 fused_moe path routes with `_router_triton_kernel`.
    (
        "moe",
        r"fused_moe|moe_align|moe_sum|marlin|matmul_ogs|topk|top_k|_moe_|expert|count_and_sort"
        r"|_router_triton|bitmatrix|ragged_tensor_metadata|^_reduce$",
    ),
    # FP8 block-scaled linears (MiniMax-M2, DeepSeek FP8): a triton GEMM over 128 x 128 blocks, each fed
    # by a per-token-group quantisation of its activations
    (
        "gemm",
        r"nvjet|gemm|gemv|cutlass|xmma|sm90_|ampere_|cublas|Kernel2|splitKreduce|dot_kernel"
        r"|w8a8_block_fp8_matmul",
    ),
    ("act_quant", r"per_token_group_quant|per_tensor_quant|scaled_fp8_quant"),
    ("norm", r"rms|norm"),
    ("rope", r"rotary|rope"),
    ("kv_store", r"set_kv|store_kv|kv_buffer|copy_kv|scatter"),
    ("activation", r"silu|gelu|act_and_mul|swiglu"),
    ("sampling", r"argmax|sample|softmax|sort|cumsum|gumbel|multinomial"),
    ("elementwise", r"elementwise|vectorized|unrolled|reduce_kernel|index|cat|fill|copy"),
]
CLASS_RE = [(name, re.compile(pat, re.I)) for name, pat in CLASSES]


def kernel_class(name: str) -> str:
    for cls, rx in CLASS_RE:
        if rx.search(name):
            return cls
    return "other"


# -- the server and its requests --------------------------------------------------------------


def _get(url: str, timeout: float = 5.0) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status
    except (urllib.error.URLError, OSError):
        return 0


def _post(url: str, body: dict, timeout: float = 60.0) -> str:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.read().decode()


def wait_ready(base: str, proc: subprocess.Popen, ceiling_s: float) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < ceiling_s:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited ({proc.returncode}) before it was ready: see server.log")
        if _get(base + "/health_generate", timeout=30) == 200:
            return time.monotonic() - t0
        time.sleep(1)
    raise SystemExit(f"the server was not ready after {ceiling_s} s: see server.log")


class Stream(threading.Thread):
    """One streaming /generate request; the arrival time of each chunk."""

    def __init__(self, base: str, ids: list[int], max_new: int):
        super().__init__(daemon=True)
        self.base, self.ids, self.max_new = base, ids, max_new
        self.times: list[float] = []
        self.error: str | None = None

    def run(self) -> None:
        body = {
            "input_ids": self.ids,
            "sampling_params": {"max_new_tokens": self.max_new, "ignore_eos": True, "temperature": 0.0},
            "stream": True,
        }
        req = urllib.request.Request(
            self.base + "/generate",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=600) as r:
                for line in r:
                    if line.startswith(b"data:") and b"[DONE]" not in line:
                        self.times.append(time.monotonic())
        except (urllib.error.URLError, OSError) as exc:
            self.error = str(exc)


def wave(base: str, batch: int, prompt: int, vocab: int, max_new: int, rng: random.Random) -> list[Stream]:
    """`batch` requests of `prompt` random tokens, started at once."""
    streams = [Stream(base, [rng.randrange(10, vocab) for _ in range(prompt)], max_new) for _ in range(batch)]
    for s in streams:
        s.start()
    return streams


DONE_LINE = "Profiling done."  # SGLang's scheduler logs it once the trace file is written


def profiled(log_path: str, done_before: int, folder: str, before: set[str], ceiling_s: float) -> str | None:
    """This profile's trace: the new file, once the server has logged that it is written."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < ceiling_s:
        with open(log_path, errors="replace") as f:
            if f.read().count(DONE_LINE) > done_before:
                new = sorted(set(glob.glob(os.path.join(folder, "*.trace.json.gz"))) - before)
                return new[0] if new else None
        time.sleep(0.5)
    return None


def run_point(
    base: str,
    log_path: str,
    folder: str,
    batch: int,
    prompt: int,
    vocab: int,
    steps: int,
    rng: random.Random,
    label: str,
) -> dict:
    # long enough that the profile (started once every request decodes) ends well before the requests
    max_new = 600 if prompt < 4096 else 300
    streams = wave(base, batch, prompt, vocab, max_new, rng)
    # every request decoding: each has at least 8 tokens
    t0 = time.monotonic()
    while any(len(s.times) < 8 and s.is_alive() for s in streams) and time.monotonic() - t0 < 300:
        time.sleep(0.05)
    os.makedirs(folder, exist_ok=True)
    before = set(glob.glob(os.path.join(folder, "*.trace.json.gz")))
    with open(log_path, errors="replace") as f:
        done_before = f.read().count(DONE_LINE)
    decoded = statistics.median(len(s.times) for s in streams)
    _post(
        base + "/start_profile",
        {
            "output_dir": folder,
            "num_steps": steps,
            "activities": ["CPU", "GPU"],
            "with_stack": False,
            "record_shapes": False,
            "profile_prefix": label,
        },
    )
    trace = profiled(log_path, done_before, folder, before, 120)
    for s in streams:
        s.join(600)
    gaps = []
    for s in streams:
        gaps += [b - a for a, b in itertools.pairwise(s.times[8:])]
    return {
        "point": label,
        "batch": batch,
        "prompt_tokens": prompt,
        # tokens each request had decoded (median) when the profile was asked for: the context it saw
        "decoded_at_profile": decoded,
        "max_new_tokens": max_new,
        "trace": os.path.basename(trace) if trace else None,
        "errors": [s.error for s in streams if s.error],
        "itl_ms_p50_streamed": round(statistics.median(gaps) * 1e3, 3) if gaps else None,
        "itl_ms_mean_streamed": round(statistics.fmean(gaps) * 1e3, 3) if gaps else None,
    }


def gpu_name() -> str | None:
    """The first GPU's name as nvidia-smi reports it (the pins take its bandwidth from it)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.splitlines()[0].strip() if out.strip() else None


def cmd_run(a: argparse.Namespace) -> int:
    os.makedirs(os.path.join(a.out, "traces"), exist_ok=True)
    with open(os.path.join(a.model_path, "config.json")) as f:
        cfg = json.load(f)
    vocab = int(cfg.get("vocab_size") or cfg.get("text_config", {}).get("vocab_size") or 32000)
    base = f"http://127.0.0.1:{a.port}"
    argv = [
        a.python, "-m", "sglang.launch_server", "--model-path", a.model_path, "--host", "127.0.0.1",
        "--port", str(a.port), "--load-format", "dummy", "--trust-remote-code", *a.server_args,
    ]  # fmt: skip
    env = {**os.environ, "SGLANG_TORCH_PROFILER_DIR": os.path.join(a.out, "traces")}
    log_path = os.path.join(a.out, "server.log")
    with open(log_path, "w") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    result = {"schema": SCHEMA, "argv": argv, "gpu_name": gpu_name(), "points": []}
    try:
        result["ready_s"] = round(wait_ready(base, proc, a.ready_ceiling_s), 1)
        rng = random.Random(0)
        # one warm-up wave per batch size, so no capture or compile lands in a profiled step
        for spec in a.points.split(","):
            batch, prompt = (int(x) for x in spec.lower().split("x"))
            for s in wave(base, batch, prompt, vocab, 16, rng):
                s.join(600)
        # the profiler's first start pays for CUPTI's set-up: once here, its trace set aside
        result["profiler_warmup"] = run_point(
            base, log_path, os.path.join(a.out, "warmup"), 1, 256, vocab, 2, rng, "warmup"
        )
        for spec in a.points.split(","):
            batch, prompt = (int(x) for x in spec.lower().split("x"))
            label = f"b{batch}-p{prompt}"
            point = run_point(
                base, log_path, os.path.join(a.out, "traces"), batch, prompt, vocab, a.steps, rng, label
            )
            print(json.dumps(point), flush=True)
            result["points"].append(point)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    with open(os.path.join(a.out, "run.json"), "w") as f:
        json.dump(result, f, indent=1)
    return cmd_analyze(argparse.Namespace(out=a.out, step_gap_us=a.step_gap_us))


# -- the traces, reduced ----------------------------------------------------------------------


def steps_of(events: list[dict], step_gap_us: float) -> tuple[list[list[dict]], str]:
    """The kernels of each decode step, in order: by graph launch, else by idle gaps."""
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"]
    launches = {
        e["args"]["correlation"]: e
        for e in events
        if e.get("ph") == "X" and e.get("name") == "cudaGraphLaunch" and "correlation" in e.get("args", {})
    }
    if launches:
        by_launch: dict[int, list[dict]] = {}
        for k in kernels:
            corr = k.get("args", {}).get("correlation")
            if corr in launches:
                by_launch.setdefault(corr, []).append(k)
        steps = [sorted(ks, key=lambda k: k["ts"]) for _, ks in sorted(by_launch.items())]
        return [s for s in steps if s], "cuda_graph"
    kernels.sort(key=lambda k: k["ts"])
    steps, cur, end = [], [], None
    for k in kernels:
        if end is not None and k["ts"] - end > step_gap_us and cur:
            steps.append(cur)
            cur = []
        cur.append(k)
        end = max(end or 0, k["ts"] + k.get("dur", 0))
    if cur:
        steps.append(cur)
    return steps, "idle_gaps"


def reduce_step(kernels: list[dict]) -> dict:
    start = kernels[0]["ts"]
    end = max(k["ts"] + k.get("dur", 0) for k in kernels)
    busy, cur_s, cur_e = 0.0, None, None
    for k in kernels:  # the union of kernel intervals (one stream in a decode graph; overlap counted once)
        s, e = k["ts"], k["ts"] + k.get("dur", 0)
        if cur_e is None or s > cur_e:
            busy += (cur_e - cur_s) if cur_e is not None else 0.0
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    busy += (cur_e - cur_s) if cur_e is not None else 0.0
    by_class: dict[str, dict] = {}
    for k in kernels:
        c = by_class.setdefault(kernel_class(k["name"]), {"count": 0, "us": 0.0})
        c["count"] += 1
        c["us"] += k.get("dur", 0)
    names: dict[str, dict] = {}
    for k in kernels:
        n = names.setdefault(k["name"][:120], {"count": 0, "us": 0.0, "class": kernel_class(k["name"])})
        n["count"] += 1
        n["us"] += k.get("dur", 0)
    return {
        "kernels": len(kernels),
        "span_us": end - start,
        "busy_us": busy,
        "idle_us": (end - start) - busy,
        "by_class": by_class,
        "by_name": names,
    }


def summarize(path: str, step_gap_us: float) -> dict:
    with gzip.open(path, "rt") as f:
        events = json.load(f).get("traceEvents", [])
    steps, how = steps_of(events, step_gap_us)
    reduced = [reduce_step(s) for s in steps]
    if not reduced:
        return {"trace": os.path.basename(path), "steps": 0}
    # the median step by span stands for the point (a profiled window may cut a step at either end)
    typical = sorted(reduced, key=lambda r: r["span_us"])[len(reduced) // 2]
    # the GPU's own step period: first kernel of one replay to the first of the next; what is not the
    # replay's span (eager sampling kernels, the scheduler's gap) is period - span
    starts = [s[0]["ts"] for s in steps]
    periods = [b - a for a, b in itertools.pairwise(starts)]
    med = lambda key: statistics.median(r[key] for r in reduced)  # noqa: E731
    n = typical["kernels"]
    top = sorted(typical["by_name"].items(), key=lambda kv: -kv[1]["us"])[:25]
    return {
        "trace": os.path.basename(path),
        "segmented_by": how,
        "steps": len(reduced),
        "kernels_per_step": [r["kernels"] for r in reduced],
        "span_us_median": round(med("span_us"), 1),
        "busy_us_median": round(med("busy_us"), 1),
        "idle_us_median": round(med("idle_us"), 1),
        "idle_us_per_kernel_boundary": round(typical["idle_us"] / max(1, n - 1), 3),
        "period_us_median": round(statistics.median(periods), 1) if periods else None,
        "outside_replay_us_median": round(statistics.median(periods) - med("span_us"), 1)
        if periods
        else None,
        "by_class": {
            c: {"count": v["count"], "us": round(v["us"], 1), "us_per_kernel": round(v["us"] / v["count"], 2)}
            for c, v in sorted(typical["by_class"].items(), key=lambda kv: -kv[1]["us"])
        },
        "top_kernels": [
            {"name": name, "class": v["class"], "count": v["count"], "us": round(v["us"], 1)}
            for name, v in top
        ],
    }


def cmd_analyze(a: argparse.Namespace) -> int:
    run_path = os.path.join(a.out, "run.json")
    run = {"schema": SCHEMA, "points": []}
    if os.path.exists(run_path):
        with open(run_path) as f:
            run = json.load(f)
    by_trace = {p.get("trace"): p for p in run["points"]}
    out = {
        "schema": SCHEMA,
        "how": "benchmarks/profile_decode.py analyze: steps by CUDA-graph launch (or idle gaps); per step the "
        "kernels, span = last kernel end - first kernel start, busy = union of kernel intervals, idle = span - busy; "
        "the median step by span stands for the point; period = first kernel of one step to the first of the next",
        "argv": run.get("argv"),
        "ready_s": run.get("ready_s"),
        "gpu_name": run.get("gpu_name"),
        "points": [],
    }
    for path in sorted(glob.glob(os.path.join(a.out, "traces", "*.trace.json.gz"))):
        point = dict(by_trace.get(os.path.basename(path), {"trace": os.path.basename(path)}))
        point["profile"] = summarize(path, a.step_gap_us)
        out["points"].append(point)
    tmp = os.path.join(a.out, ".profile-summary.json.tmp")
    with open(tmp, "w") as f:
        json.dump(out, f, indent=1)
    os.replace(tmp, os.path.join(a.out, "profile-summary.json"))
    for p in out["points"]:
        pr = p["profile"]
        print(
            f"{p.get('point', p['trace'])}: {pr.get('steps')} steps by {pr.get('segmented_by')}, "
            f"kernels {pr.get('kernels_per_step', [])[:4]}, span {pr.get('span_us_median')} us, "
            f"busy {pr.get('busy_us_median')} us, idle/boundary {pr.get('idle_us_per_kernel_boundary')} us, "
            f"period {pr.get('period_us_median')} us, "
            f"streamed ITL p50 {p.get('itl_ms_p50_streamed')} ms"
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="start a server, profile decode steps at each point, reduce the traces")
    r.add_argument("--python", required=True, help="the SGLang venv's python")
    r.add_argument("--model-path", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--port", type=int, default=30017)
    r.add_argument("--points", default="1x256,64x256", help="BATCHxPROMPT_TOKENS, comma-separated")
    r.add_argument("--steps", type=int, default=6, help="decode steps per profile")
    r.add_argument("--ready-ceiling-s", type=float, default=900)
    r.add_argument("--step-gap-us", type=float, default=200.0)
    r.add_argument("server_args", nargs=argparse.REMAINDER, help="after --: more launch_server flags")
    z = sub.add_parser("analyze", help="reduce the traces under OUT/traces again")
    z.add_argument("out")
    z.add_argument("--step-gap-us", type=float, default=200.0)
    a = ap.parse_args(argv)
    if a.cmd == "run":
        a.server_args = [x for x in a.server_args if x != "--"]
        return cmd_run(a)
    return cmd_analyze(a)


if __name__ == "__main__":
    sys.exit(main())
