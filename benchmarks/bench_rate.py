"""Request-rate mode: sglang_bench vs SGLang's own bench_serving --request-rate, same simulator.

Both clients get the same seed, lengths (random ids, fixed: --random-range-ratio 1.0, bench_serving
with --tokenize-prompt so both send input_ids), request rate and request count, against one
simulated server (fixed decode step). The script prints, per rate, the ratios
sglang_bench / bench_serving of output tok/s, median TTFT and median ITL.
Targets (issue 14): output tok/s within 3 %, median TTFT and ITL within 5 %.

Both send on the same schedule: sglang_bench runs with arrival_rng bench_serving, which draws the gaps
bench_serving 0.5.23 draws for the same --seed (numpy's legacy global generator after its random-ids
dataset sampling, np.random.exponential(1 / rate) per gap; equal to the float, see
tests/conformance/test_bench_serving_schedule.py), with vocab_size set to the tokenizer's (the dataset's
draws come first). The script prints each client's realised rate as the simulator saw it, how far the
arrivals the simulator stamped for request i of each client are apart (relative to each client's first
request), and the throughput ratio normalised by the realised rate (tok/s per offered req/s). The two
still differ in how they keep the schedule: sglang_bench sends request i at t0 + offset_i (absolute),
bench_serving sleeps each gap after it created the previous request's task (relative: its lateness adds
up). Rate inf (every request at once, capped by --max-concurrency) has no sampling at all. For TTFT it
prints what the simulator scheduled for each client's requests: a request's TTFT depends on where it
lands in the decode step, so two clients whose requests land at different phases see different true
TTFTs (a client whose timers fire only after it has read a step's chunks sends just after a step starts
and waits longer).
bench_serving 0.5.23 opens a new aiohttp session per request (async_request_sglang_generate), so its
TTFT includes a TCP connect and its client overhead; the script prints measured - scheduled TTFT
per client to show which of the two is closer to what the server did.

    make bench-rate          # SGLANG_ORACLE_PY=.venv/sglang/bin/python benchmarks/bench_rate.py
    python benchmarks/bench_rate.py --rates 20 inf --num-prompts 400
    python benchmarks/bench_rate.py --rates 8 --num-prompts 80 --ttft-probe --vllm   # also vLLM's client
    python benchmarks/bench_rate.py --rates 8 --num-prompts 80 --connection keep_alive  # the module's default

With --vllm (needs `make vllm`) each rate also runs sglang_bench with api completions and arrival_rng vllm
against `vllm bench serve --backend vllm` (vLLM 0.32: the same seed gives the same delays, see
tests/conformance/test_bench_serving_vllm_schedule.py) and prints the same ratios.
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "module_utils"), str(REPO)]

import sim_oracle  # noqa: E402
from sglang_layouts.bench import loadgen  # noqa: E402
from sim_oracle import (  # noqa: E402
    bench_serving_entries,
    find_tokenizer,
    host_line,
    oracle_env,
    oracle_python,
    read_schedule,
    server_side_tok_s,
    simulator,
)

TOK_S_TARGET = 0.03
LATENCY_TARGET = 0.05


def run_bench_serving(oracle_py, url, args, rate, workdir, tokenizer):
    """bench_serving's open-loop mode at `rate` (sim_oracle's runner with --request-rate)."""
    load = ["--request-rate", str(rate)]
    if args.max_concurrency:
        load += ["--max-concurrency", str(args.max_concurrency)]
    return sim_oracle.run_bench_serving(
        oracle_py,
        url,
        args,
        workdir,
        tokenizer,
        load=load,
        seed=args.seed,
        name=f"bench_serving-{rate}",
        timeout=1800,
    )


def run_vllm_bench(vllm_py, url, args, rate, workdir, tokenizer):
    """`vllm bench serve --backend vllm` (/v1/completions, random dataset, fixed lengths) at `rate`; its result JSON."""
    name = f"vllm-{rate}.json"
    argv = [
        str(Path(vllm_py).with_name("vllm")),
        "bench",
        "serve",
        "--backend",
        "vllm",
        "--base-url",
        url,
        "--model",
        "default",
        "--tokenizer",
        str(tokenizer),
        "--ready-check-timeout-sec",
        "0",
        "--dataset-name",
        "random",
        "--random-input-len",
        str(args.input_len),
        "--random-output-len",
        str(args.output_len),
        "--random-range-ratio",
        "0",
        "--ignore-eos",
        "--temperature",
        "0",
        "--num-prompts",
        str(args.num_prompts),
        "--request-rate",
        str(rate),
        "--seed",
        str(args.seed),
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--save-result",
        "--result-dir",
        str(workdir),
        "--result-filename",
        name,
    ]
    if args.max_concurrency:
        argv += ["--max-concurrency", str(args.max_concurrency)]
    t0 = time.monotonic()
    proc = subprocess.run(argv, env=oracle_env(), cwd=workdir, capture_output=True, text=True, timeout=1800)
    out = Path(workdir) / name
    if proc.returncode != 0 or not out.is_file():
        sys.exit(
            f"vllm bench serve failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    row = json.loads(out.read_text())
    row["_t0"] = t0
    return row


def tokenizer_vocab_size(oracle_py, tokenizer):
    """The tokenizer's vocab_size as bench_serving sees it (its get_tokenizer): its random-ids draws use it."""
    code = (
        "import sys; from sglang.benchmark.utils import get_tokenizer; "
        "print(get_tokenizer(sys.argv[1]).vocab_size)"
    )
    proc = subprocess.run(
        [oracle_py, "-c", code, str(tokenizer)],
        env=oracle_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return int(proc.stdout.strip().splitlines()[-1])


def arrival_spread(mine, their):
    """Per request index i: |(ours_i - ours_0) - (theirs_i - theirs_0)| of the simulator's arrival stamps (ms)."""
    a = sorted(e["arrival"] for e in mine)
    b = sorted(e["arrival"] for e in their)
    if len(a) != len(b) or not a:
        return None
    return [1000 * abs((x - a[0]) - (y - b[0])) for x, y in zip(a, b, strict=True)]


def ttft_probe(oracle_py, url, args, rate, log):
    """Where bench_serving's TTFT goes: its own request function (oracle_ttft_probe.py) at the mean gap of
    `rate`, set against the simulator's stamps of the same requests (one clock). Returns medians (ms)."""
    before = set(read_schedule(log)) if log.exists() else set()
    n = min(args.num_prompts, 60)
    proc = subprocess.run(
        [
            oracle_py,
            str(REPO / "benchmarks" / "oracle_ttft_probe.py"),
            url,
            str(n),
            str(1.0 / rate),
            str(args.input_len),
            str(args.output_len),
        ],
        env=oracle_env(),
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    time.sleep(0.5)
    outs = sorted(
        (json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")), key=lambda o: o["st"]
    )
    new = sorted(
        (
            e
            for rid, e in read_schedule(log).items()
            if rid not in before and not rid.startswith("HEALTH_CHECK")
        ),
        key=lambda e: e["arrival"],
    )
    pairs = [(o, e) for o, e in zip(outs, new[-len(outs) :], strict=False) if o["ok"] and e.get("first_sent")]
    if not pairs:
        return None
    med = statistics.median
    return {
        "n": len(pairs),
        "measured": med(1000 * o["ttft"] for o, _ in pairs),
        "scheduled": med(1000 * (e["first_token"] - e["arrival"]) for _, e in pairs),
        "delivery": med(1000 * (e["arrival"] - o["st"]) for o, e in pairs),
        "written": med(1000 * (e["first_sent"] - e["first_token"]) for _, e in pairs),
        "read": med(1000 * (o["st"] + o["ttft"] - e["first_sent"]) for o, e in pairs),
    }


def realised_rate(entries):
    """(n - 1) / (last arrival - first arrival) as the simulator stamped them."""
    arr = sorted(e["arrival"] for e in entries)
    return (len(arr) - 1) / (arr[-1] - arr[0]) if len(arr) > 1 and arr[-1] > arr[0] else None


def ratio_line(name, ours, theirs, target, other="bench_serving"):
    if not ours or not theirs:
        return f"   {name:<34} -", True
    r = ours / theirs
    ok = abs(r - 1) <= target
    return (
        f"   {name:<34} sglang_bench {ours:10.3f}  {other} {theirs:10.3f}  ratio {r:.4f} "
        f"({100 * (r - 1):+.2f} %, target +-{100 * target:.0f} %) {'ok' if ok else 'MISSED'}",
        ok,
    )


def run_ours(url, args, rate_arg, rid_prefix, **options):
    """One sglang_bench rate level at rate_arg with the script's settings (options: api, arrival_rng, ...)."""
    cfg = loadgen.make_config(
        url,
        concurrency=[],
        request_rates=[rate_arg],
        num_prompts=args.num_prompts,
        input_len=args.input_len,
        output_len=args.output_len,
        max_concurrency=args.max_concurrency,
        warmup=1,
        seed=args.seed,
        rid_prefix=rid_prefix,
        telemetry=False,
        connection=args.connection,
        **options,
    )
    return loadgen.run_benchmark(cfg)["levels"][0]


def compare_vllm(url, args, rate_arg, work, tokenizer, log):
    """sglang_bench (api completions, arrival_rng vllm) vs `vllm bench serve` at one rate; prints the ratios."""
    vllm_py = str(REPO / ".venv" / "vllm" / "bin" / "python")
    if not Path(vllm_py).is_file():
        sys.exit(f"no vLLM python at {vllm_py}: run `make vllm`")
    rate = loadgen.parse_rate(rate_arg)
    label = loadgen.rate_label(rate)
    ours = run_ours(url, args, rate_arg, f"vrate-{label}", api="completions", arrival_rng="vllm")
    time.sleep(0.5)
    theirs = run_vllm_bench(vllm_py, url, args, label, work, tokenizer)
    time.sleep(0.5)
    sched = read_schedule(log)
    mine = [e for rid, e in sched.items() if rid.startswith(f"vrate-{label}-") and "-r" in rid]
    their = sorted(
        (
            e
            for rid, e in sched.items()
            if e["arrival"] >= theirs["_t0"] and not rid.startswith(("vrate-", "rate-", "HEALTH_CHECK"))
        ),
        key=lambda e: e["arrival"],
    )[-args.num_prompts :]
    print(
        f"   vs vllm bench serve (api completions, arrival_rng vllm; {len(mine)} / {len(their)} requests seen):"
    )
    ok = True
    for name, a, b, target in (
        ("output tok/s", ours["output_tok_s"], theirs.get("output_throughput"), TOK_S_TARGET),
        ("median TTFT ms", ours["ttft_ms"]["p50"], theirs.get("median_ttft_ms"), LATENCY_TARGET),
        ("median ITL ms", ours["itl_ms"]["p50"], theirs.get("median_itl_ms"), LATENCY_TARGET),
    ):
        line, good = ratio_line(name, a, b, target, other="vllm")
        print(line)
        ok = ok and good
    r_ours, r_theirs = realised_rate(mine), realised_rate(their)
    if not math.isinf(rate) and r_ours and r_theirs:
        spread = arrival_spread(mine, their)
        print(
            f"   realised arrival rate (simulator):  sglang_bench {r_ours:.3f}  vllm {r_theirs:.3f} req/s; arrival of "
            f"request i after the first, |difference| median "
            f"{statistics.median(spread) if spread else float('nan'):.3f} ms"
        )
    sched_ttft = [
        statistics.median(1000 * (e["first_token"] - e["arrival"]) for e in es if e.get("first_token"))
        if es
        else float("nan")
        for es in (mine, their)
    ]
    print(
        f"   TTFT the simulator scheduled, median: sglang_bench's {sched_ttft[0]:.3f} ms, vllm's {sched_ttft[1]:.3f} ms; "
        f"measured - scheduled: sglang_bench {ours['ttft_ms']['p50'] - sched_ttft[0]:+.3f} ms, vllm "
        f"{(theirs.get('median_ttft_ms') or float('nan')) - sched_ttft[1]:+.3f} ms"
    )
    return ok


def main(argv=None):
    ap = sim_oracle.load_parser(__doc__, num_prompts=240, output_len=64)
    ap.add_argument("--rates", nargs="+", default=["8", "inf"])
    ap.add_argument(
        "--max-concurrency",
        type=int,
        default=16,
        help="cap of both clients (needed for inf); on a shared 2-core host bench_serving's own event loop "
        "falls behind at 64 streams x 100 tok/s (its ITL collapses to ~0: chunks read in bulk)",
    )
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--connection",
        choices=["per_request", "keep_alive"],
        default="per_request",
        help="sglang_bench's connection mode: per_request (the default here) opens a connection per request as "
        "bench_serving and vllm bench serve do, so both TTFTs include a TCP connect; keep_alive is the "
        "module's own default (one connection per stream, opened ahead)",
    )
    ap.add_argument(
        "--vllm",
        action="store_true",
        help="per rate, also compare with `vllm bench serve` (from .venv/vllm, `make vllm`): sglang_bench with "
        "api completions and arrival_rng vllm against vLLM's client, same simulator",
    )
    ap.add_argument(
        "--ttft-probe",
        action="store_true",
        help="per finite rate, also run bench_serving's own request function against the simulator and split "
        "its TTFT into request delivery, the simulator's schedule and first-token delivery",
    )
    args = ap.parse_args(argv)
    oracle_py = oracle_python()
    print(host_line())
    print(
        f"settings: rates {args.rates} req/s, {args.num_prompts} requests per rate, input {args.input_len} / output "
        f"{args.output_len} tokens (random ids, fixed), seed {args.seed}, max concurrency {args.max_concurrency}, "
        f"simulator decode step {args.decode_step_ms:g} ms, sglang_bench connection {args.connection}"
    )
    tokenizer = find_tokenizer(oracle_py)
    vocab_size = tokenizer_vocab_size(oracle_py, tokenizer)
    print(
        f"arrival schedule: bench_serving's own draws for seed {args.seed} (tokenizer vocab_size {vocab_size})"
    )
    all_ok = True
    with (
        tempfile.TemporaryDirectory(prefix="bench-rate-") as work,
        simulator(work, args.decode_step_ms, 0.0, args.max_concurrency) as (url, log),
    ):
        for rate_arg in args.rates:
            rate = loadgen.parse_rate(rate_arg)
            label = loadgen.rate_label(rate)
            ours = run_ours(
                url, args, rate_arg, f"rate-{label}", vocab_size=vocab_size, arrival_rng="bench_serving"
            )
            time.sleep(0.5)
            theirs = run_bench_serving(oracle_py, url, args, label, work, tokenizer)
            time.sleep(0.5)
            sched = read_schedule(log)
            mine = [e for rid, e in sched.items() if rid.startswith(f"rate-{label}-") and "-r" in rid]
            their = bench_serving_entries(sched, "rate-", theirs["_t0"], args.num_prompts)
            r_ours, r_theirs = realised_rate(mine), realised_rate(their)
            print(f"\nrate {label} req/s ({len(mine)} / {len(their)} requests seen by the simulator)")
            for name, a, b, target in (
                ("output tok/s", ours["output_tok_s"], theirs["output_throughput"], TOK_S_TARGET),
                ("median TTFT ms", ours["ttft_ms"]["p50"], theirs["median_ttft_ms"], LATENCY_TARGET),
                ("median ITL ms", ours["itl_ms"]["p50"], theirs["median_itl_ms"], LATENCY_TARGET),
            ):
                line, ok = ratio_line(name, a, b, target)
                print(line)
                all_ok = all_ok and ok
            if not math.isinf(rate) and r_ours and r_theirs:
                print(
                    f"   realised arrival rate (simulator):  sglang_bench {r_ours:.3f}  bench_serving "
                    f"{r_theirs:.3f} req/s (asked {rate:g}; spread ~ +-{100 / math.sqrt(args.num_prompts):.1f} % "
                    "for Poisson samples of this size)"
                )
                spread = arrival_spread(mine, their)
                if spread:
                    print(
                        f"   arrival of request i after the first, sglang_bench vs bench_serving (simulator "
                        f"stamps): |difference| median {statistics.median(spread):.3f} ms, max {max(spread):.3f} ms"
                    )
                line, _ = ratio_line(
                    "tok/s per realised req/s",
                    ours["output_tok_s"] / r_ours,
                    theirs["output_throughput"] / r_theirs,
                    TOK_S_TARGET,
                )
                print(line)
            ss_ours, ss_theirs = server_side_tok_s(mine), server_side_tok_s(their)
            if ss_ours and ss_theirs:
                print(
                    f"   tok/s as the simulator saw it (tokens / first arrival -> last token due): sglang_bench "
                    f"{ss_ours:.1f}, bench_serving {ss_theirs:.1f} (ratio {ss_ours / ss_theirs:.4f}); each client's "
                    f"own figure / this: sglang_bench {ours['output_tok_s'] / ss_ours:.4f}, bench_serving "
                    f"{theirs['output_throughput'] / ss_theirs:.4f}"
                )
            # which TTFT is right: what the simulator scheduled for each client's requests
            sched_ttft = [
                statistics.median(
                    1000 * (e["first_token"] - e["arrival"]) for e in es if e.get("first_token")
                )
                if es
                else float("nan")
                for es in (mine, their)
            ]
            print(
                f"   TTFT the simulator scheduled (first token due - request parsed), median: sglang_bench's "
                f"requests {sched_ttft[0]:.3f} ms, bench_serving's {sched_ttft[1]:.3f} ms; measured - scheduled: "
                f"sglang_bench {ours['ttft_ms']['p50'] - sched_ttft[0]:+.3f} ms, bench_serving "
                f"{theirs['median_ttft_ms'] - sched_ttft[1]:+.3f} ms (client and loopback overhead)"
            )
            probe = (
                ttft_probe(oracle_py, url, args, rate, log)
                if args.ttft_probe and not math.isinf(rate)
                else None
            )
            if probe:
                print(
                    f"   bench_serving's own request function, {probe['n']} requests at the mean gap (medians): "
                    f"TTFT {probe['measured']:.3f} ms = request delivery (its st -> simulator parsed it) "
                    f"{probe['delivery']:.3f} + scheduled {probe['scheduled']:.3f} + first token written after "
                    f"due {probe['written']:.3f} + written -> it stamped the chunk {probe['read']:.3f} ms"
                )
            if args.vllm:
                all_ok = compare_vllm(url, args, rate_arg, work, tokenizer, log) and all_ok
            lag = ours["schedule"]["send_lag_ms"]
            print(
                f"   sglang_bench send lag vs its schedule: p50 {lag['p50']:.3f} ms, p99 {lag['p99']:.3f} ms, "
                f"max {ours['schedule']['send_lag_ms_max']:.3f} ms; warnings: {ours['warnings'] or 'none'}"
            )
    print("\nresult:", "targets met" if all_ok else "TARGET MISSED (see the lines marked MISSED)")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
