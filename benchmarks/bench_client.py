"""Is the load generator a trustworthy client? Two comparisons against the simulator.

1. Against the simulator's own schedule: the simulator runs with a fixed decode step
   (SGLANG_SIM_DECODE_STEP_MS=10, i.e. 100 tok/s per stream) and writes, per request, when it
   received it and when each token was due (SGLANG_SIM_SCHEDULE_LOG). sglang_bench runs 64
   streams against it; every request carries its rid, so each measured TTFT and each chunk gap
   (ITL) is compared with what the simulator scheduled for that request.
   Target: median |measured - scheduled| <= 1 ms for TTFT and for ITL.
2. Against SGLang's own client: `python -m sglang.bench_serving --backend sglang --dataset-name
   random-ids --random-range-ratio 1.0` from the pinned SGLang (the oracle venv, `make oracle`)
   with the same settings against the same simulator. Target: output tok/s within 3 %.

Because the simulator and the client share CLOCK_MONOTONIC on Linux, TTFT's difference is also
split into request delivery (client send -> simulator has parsed the request) and first-token
delivery (token due in the simulator -> client has read it).

    make bench-client        # SGLANG_ORACLE_PY=.venv/sglang/bin/python benchmarks/bench_client.py
    python benchmarks/bench_client.py --skip-oracle --concurrency 64
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "module_utils"), str(REPO)]

from sglang_layouts import bench  # noqa: E402

from sglang_sim.launcher import SimProcess  # noqa: E402

TTFT_TARGET_MS = 1.0
ITL_TARGET_MS = 1.0
RATIO_TARGET = 0.03


def read_schedule(path):
    out = {}
    with open(path) as fh:
        for line in fh:
            if line.strip():
                e = json.loads(line)
                out[e["rid"]] = e
    return out


def compare_with_schedule(level, schedule):
    d_ttft, d_itl, req_delivery, tok_delivery, tok_written, tok_read = [], [], [], [], [], []
    matched = 0
    for r in level["requests"]:
        e = schedule.get(r["rid"])
        if not r["ok"] or e is None or e.get("first_token") is None:
            continue
        matched += 1
        sched_ttft = 1000 * (e["first_token"] - e["arrival"])
        d_ttft.append(abs(r["ttft_ms"] - sched_ttft))
        gaps = [1000 * (b - a) for a, b in zip(e["token_times"], e["token_times"][1:], strict=False)]
        if len(gaps) == len(r["itl_ms"]):
            d_itl.extend(abs(a - b) for a, b in zip(r["itl_ms"], gaps, strict=True))
        req_delivery.append(1000 * (e["arrival"] - r["t_start"]))
        tok_delivery.append(r["ttft_ms"] - 1000 * (e["first_token"] - r["t_start"]))
        if e.get("first_sent") is not None:
            tok_written.append(1000 * (e["first_sent"] - e["first_token"]))
            tok_read.append(r["ttft_ms"] - 1000 * (e["first_sent"] - r["t_start"]))
    # the client's own re-issue lag: a stream's next request leaves after its previous answer ended
    by_worker = {}
    for r in level["requests"]:
        by_worker.setdefault(r["worker"], []).append(r)
    reissue = []
    for reqs in by_worker.values():
        reqs.sort(key=lambda r: r["t_start"])
        pairs = zip(reqs, reqs[1:], strict=False)  # noqa: RUF007
        reissue.extend(1000 * (b["t_start"] - (a["t_complete"] or a["t_end"])) for a, b in pairs)
    return {
        "reissue_lag_ms_median": statistics.median(reissue) if reissue else None,
        "reissue_lag_ms_p99": bench.percentile(reissue, 99) if reissue else None,
        "matched": matched,
        "ttft_abs_diff_ms_median": statistics.median(d_ttft) if d_ttft else None,
        "itl_abs_diff_ms_median": statistics.median(d_itl) if d_itl else None,
        "itl_abs_diff_ms_p99": bench.percentile(d_itl, 99) if d_itl else None,
        "itl_gaps_compared": len(d_itl),
        "request_delivery_ms_median": statistics.median(req_delivery) if req_delivery else None,
        "first_token_delivery_ms_median": statistics.median(tok_delivery) if tok_delivery else None,
        "first_token_written_ms_median": statistics.median(tok_written) if tok_written else float("nan"),
        "first_token_read_ms_median": statistics.median(tok_read) if tok_read else float("nan"),
    }


def server_side_tok_s(records):
    """The load a client generated, as the simulator saw it: tokens / (last token due - first arrival)."""
    if not records:
        return None
    span = max(e["token_times"][-1] for e in records) - min(e["arrival"] for e in records)
    return sum(e["completion_tokens"] for e in records) / span if span > 0 else None


def find_tokenizer(oracle_py):
    """The offline tokenizer the conformance tests build (bench_serving loads one even for random-ids)."""
    found = sorted((REPO / "build" / "conformance").glob("tokenizer-*/tokenizer.json"))
    if found:
        return found[-1].parent
    out = Path(tempfile.mkdtemp(prefix="bench-client-tok-")) / "tok"
    subprocess.run(
        [oracle_py, str(REPO / "tests" / "conformance" / "make_tokenizer.py"), str(out)],
        check=True,
        env=oracle_env(),
        timeout=300,
    )
    return out


def oracle_env():
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update({"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONWARNINGS": "ignore"})
    return env


def run_bench_serving(
    oracle_py,
    url,
    args,
    workdir,
    tokenizer=None,
    env=None,
    load=None,
    seed=1,
    name="bench_serving",
    timeout=900,
):
    """sglang.bench_serving (random-ids, fixed lengths) against url; its last JSON line.

    tokenizer: the server's tokenizer folder (default: the conformance tests' offline one).
    load: the load-shape flags (default: --max-concurrency args.concurrency)."""
    out = Path(workdir) / f"{name}.jsonl"
    if out.exists():
        out.unlink()
    argv = [
        oracle_py,
        "-m",
        "sglang.bench_serving",
        "--backend",
        "sglang",
        "--base-url",
        url,
        "--dataset-name",
        "random-ids",
        "--random-input-len",
        str(args.input_len),
        "--random-output-len",
        str(args.output_len),
        "--random-range-ratio",
        "1.0",
        # send the sampled ids as input_ids (backend sglang): without it bench_serving decodes them
        # to text, which the simulator counts as words (64 asked -> ~41 tokens)
        "--tokenize-prompt",
        "--num-prompts",
        str(args.num_prompts),
        *(load if load is not None else ["--max-concurrency", str(args.concurrency)]),
        "--warmup-requests",
        "1",
        "--flush-cache",
        "--tokenizer",
        str(tokenizer or find_tokenizer(oracle_py)),
        "--output-file",
        str(out),
        "--seed",
        str(seed),
    ]
    t0 = time.monotonic()
    proc = subprocess.run(
        argv, env=env or oracle_env(), cwd=workdir, capture_output=True, text=True, timeout=timeout
    )
    if proc.returncode != 0 or not out.is_file():
        sys.exit(
            f"bench_serving failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    row = json.loads([ln for ln in out.read_text().splitlines() if ln.strip()][-1])
    row["_t0"] = t0
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--num-prompts", type=int, default=256)
    ap.add_argument("--input-len", type=int, default=64)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--decode-step-ms", type=float, default=10.0)
    ap.add_argument(
        "--prefill-ms-per-token",
        type=float,
        default=0.0,
        help="simulated prefill cost (0 by default: a prefill then takes one decode step); bench_serving gets "
        "--tokenize-prompt so both clients send 64 input_ids (the script prints the counts the simulator saw)",
    )
    ap.add_argument("--skip-oracle", action="store_true", help="only the comparison with the schedule")
    args = ap.parse_args(argv)
    oracle_py = os.environ.get("SGLANG_ORACLE_PY") or str(REPO / ".venv" / "sglang" / "bin" / "python")
    if not args.skip_oracle and not Path(oracle_py).is_file():
        sys.exit(f"no SGLang oracle python at {oracle_py}: run `make oracle` (or pass --skip-oracle)")

    print(f"host: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} (other processes share them)")
    with tempfile.TemporaryDirectory(prefix="bench-client-") as work:
        log = Path(work) / "schedule.jsonl"
        env = {
            "SGLANG_SIM_SCHEDULE_LOG": str(log),
            "SGLANG_SIM_DECODE_STEP_MS": str(args.decode_step_ms),
            "SGLANG_SIM_PREFILL_MS_PER_TOKEN": str(args.prefill_ms_per_token),
            "SGLANG_SIM_LOAD_SECONDS": "0.2",
            "SGLANG_SIM_WARMUP_SECONDS": "0.1",
        }
        with SimProcess(
            ["--tp-size", "8", "--max-running-requests", str(max(64, args.concurrency))],
            env=env,
            python=sys.executable,
        ) as sim:
            sim.wait_ready()
            url = f"http://127.0.0.1:{sim.port}"
            cfg = bench.make_config(
                url,
                concurrency=[args.concurrency],
                num_prompts=args.num_prompts,
                input_len=args.input_len,
                output_len=args.output_len,
                warmup=1,
                rid_prefix="bench-client",
            )
            bench.http_json(url + "/sim/stats?reset=1")
            ours = bench.run_benchmark(cfg, keep_requests=True)
            level = ours["levels"][0]
            _, sim_stats = bench.http_json(url + "/sim/stats?reset=1")
            time.sleep(0.5)
            cmp_ = compare_with_schedule(level, read_schedule(log))
            theirs = None
            if not args.skip_oracle:
                theirs = run_bench_serving(oracle_py, url, args, work)
                time.sleep(0.5)
                sched = read_schedule(log)
                their = sorted(
                    (
                        e
                        for rid, e in sched.items()
                        if not rid.startswith(("bench-client", "HEALTH_CHECK"))
                        and e["arrival"] >= theirs["_t0"]
                    ),
                    key=lambda e: e["arrival"],
                )[-args.num_prompts :]  # its warmup request(s) first: left out
                theirs["_prompt_tokens"] = (
                    statistics.mean(e["prompt_tokens"] for e in their) if their else None
                )
                theirs["_completion_tokens"] = (
                    statistics.mean(e["completion_tokens"] for e in their) if their else None
                )
                their_sched_ttft = [1000 * (e["first_token"] - e["arrival"]) for e in their]
                theirs["_server_side"] = server_side_tok_s(their)
                ours_sched = [sched[r["rid"]] for r in level["requests"] if r["rid"] in sched]
                level["_server_side"] = server_side_tok_s(ours_sched)

    print(
        f"settings: {args.concurrency} streams, {args.num_prompts} requests, input {args.input_len} / output "
        f"{args.output_len} tokens, simulator decode step {args.decode_step_ms:g} ms (100 tok/s per stream at 10 ms), "
        f"prefill {args.prefill_ms_per_token:g} ms per prompt token"
    )
    print("\n1. sglang_bench vs the simulator's schedule (per request, matched by rid)")
    print(f"   requests matched:                 {cmp_['matched']} of {level['completed']} completed")
    print(
        f"   TTFT  median |measured - sched.|: {cmp_['ttft_abs_diff_ms_median']:.3f} ms   (target <= {TTFT_TARGET_MS} ms)"
    )
    print(
        f"   ITL   median |measured - sched.|: {cmp_['itl_abs_diff_ms_median']:.3f} ms   (target <= {ITL_TARGET_MS} ms; "
        f"p99 {cmp_['itl_abs_diff_ms_p99']:.3f} ms over {cmp_['itl_gaps_compared']} gaps)"
    )
    print(
        f"   TTFT split: request delivery (send -> simulator parsed it) median {cmp_['request_delivery_ms_median']:.3f} ms,"
        f" first-token delivery (due -> client read it) median {cmp_['first_token_delivery_ms_median']:.3f} ms"
    )
    print(
        f"   first-token delivery split: simulator wrote it {cmp_['first_token_written_ms_median']:.3f} ms after due "
        f"(median), client read it {cmp_['first_token_read_ms_median']:.3f} ms after it was written (median)"
    )
    print(
        f"   client re-issue lag (answer complete -> next request of that stream written): median "
        f"{cmp_['reissue_lag_ms_median']:.3f} ms, p99 {cmp_['reissue_lag_ms_p99']:.3f} ms"
    )
    lat = (sim_stats or {}).get("lateness_ms") or {}
    if lat.get("median") is not None:
        print(
            f"   the simulator's own lateness (chunk written - token due): median {lat['median']:.3f} ms, "
            f"p99 {lat['p99']:.3f} ms over {lat['n']} chunks"
        )
        wl = sim_stats.get("wake_lateness_ms") or {}
        if wl.get("median") is not None:
            print(
                f"   the simulator's wake-up lateness (loop back at a step's deadline, before its writes): median "
                f"{wl['median']:.3f} ms, p99 {wl['p99']:.3f} ms over {wl['n']} steps"
            )
        pl = sim_stats.get("prefill_wake_lateness_ms") or {}
        if pl.get("median") is not None:
            print(
                f"   ... of prefill steps only: median {pl['median']:.3f} ms, p99 {pl['p99']:.3f} ms over {pl['n']} steps"
            )
    print(
        f"   sglang_bench: {level['output_tok_s']:.1f} output tok/s, TTFT p50 {level['ttft_ms']['p50']:.1f} ms, "
        f"ITL p50 {level['itl_ms']['p50']:.2f} ms, achieved concurrency {level['achieved_concurrency']:.2f}"
    )
    ok = cmp_["ttft_abs_diff_ms_median"] <= TTFT_TARGET_MS and cmp_["itl_abs_diff_ms_median"] <= ITL_TARGET_MS
    if theirs is not None:
        ratio = level["output_tok_s"] / theirs["output_throughput"]
        print("\n2. sglang_bench vs sglang.bench_serving (same simulator, same settings)")
        print(f"   sglang_bench          output tok/s: {level['output_tok_s']:.1f}")
        print(f"   sglang.bench_serving  output tok/s: {theirs['output_throughput']:.1f}")
        print(
            f"   ratio: {ratio:.4f}  ({100 * (ratio - 1):+.2f} %, target within +-{100 * RATIO_TARGET:.0f} %)"
        )
        print(
            f"   duration: sglang_bench {level['duration_s']:.3f} s = first request sent -> last request's end; "
            f"bench_serving {theirs['duration']:.3f} s = perf_counter before its first task is created -> after "
            "gather() and its GET /server_info (serving.py benchmark())"
        )
        print(
            "   same tokens over the simulator's span (first arrival -> last token due), per client: "
            f"sglang_bench {level['_server_side']:.1f}, bench_serving {theirs['_server_side']:.1f} tok/s "
            f"(ratio {level['_server_side'] / theirs['_server_side']:.4f})"
        )
        print(
            f"   TTFT median: sglang_bench {level['ttft_ms']['p50']:.2f} ms, bench_serving {theirs['median_ttft_ms']:.2f} ms, "
            f"scheduled for bench_serving's requests "
            f"{statistics.median(their_sched_ttft) if their_sched_ttft else float('nan'):.2f} ms"
        )
        print(
            f"   ITL median: sglang_bench {level['itl_ms']['p50']:.3f} ms, bench_serving {theirs['median_itl_ms']:.3f} ms"
        )
        print(
            f"   tokens per request as the simulator counted them: sglang_bench prompt "
            f"{level['prompt_tokens'] / max(level['completed'], 1):.1f} / output "
            f"{level['output_tokens'] / max(level['completed'], 1):.1f}; bench_serving prompt "
            f"{theirs['_prompt_tokens']} / output {theirs['_completion_tokens']}"
        )
        ok = ok and abs(ratio - 1) <= RATIO_TARGET
    print("\nresult:", "targets met" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
