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

import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "module_utils"), str(REPO)]

import sim_oracle  # noqa: E402
from sglang_layouts.bench import client, common, loadgen  # noqa: E402

TTFT_TARGET_MS = 1.0
ITL_TARGET_MS = 1.0
RATIO_TARGET = 0.03


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
        # nan where no stream ran a second request (num_prompts <= concurrency)
        "reissue_lag_ms_median": statistics.median(reissue) if reissue else float("nan"),
        "reissue_lag_ms_p99": common.percentile(reissue, 99) if reissue else float("nan"),
        "matched": matched,
        "ttft_abs_diff_ms_median": statistics.median(d_ttft) if d_ttft else None,
        "itl_abs_diff_ms_median": statistics.median(d_itl) if d_itl else None,
        "itl_abs_diff_ms_p99": common.percentile(d_itl, 99) if d_itl else None,
        "itl_gaps_compared": len(d_itl),
        "request_delivery_ms_median": statistics.median(req_delivery) if req_delivery else None,
        "first_token_delivery_ms_median": statistics.median(tok_delivery) if tok_delivery else None,
        "first_token_written_ms_median": statistics.median(tok_written) if tok_written else float("nan"),
        "first_token_read_ms_median": statistics.median(tok_read) if tok_read else float("nan"),
    }


def main(argv=None):
    ap = sim_oracle.load_parser(__doc__, num_prompts=256, output_len=128)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument(
        "--prefill-ms-per-token",
        type=float,
        default=0.0,
        help="simulated prefill cost (0 by default: a prefill then takes one decode step); bench_serving gets "
        "--tokenize-prompt so both clients send 64 input_ids (the script prints the counts the simulator saw)",
    )
    ap.add_argument("--skip-oracle", action="store_true", help="only the comparison with the schedule")
    args = ap.parse_args(argv)
    oracle_py = sim_oracle.oracle_python(required=not args.skip_oracle, hint=" (or pass --skip-oracle)")

    print(sim_oracle.host_line())
    with (
        tempfile.TemporaryDirectory(prefix="bench-client-") as work,
        sim_oracle.simulator(work, args.decode_step_ms, args.prefill_ms_per_token, args.concurrency) as (
            url,
            log,
        ),
    ):
        cfg = loadgen.make_config(
            url,
            concurrency=[args.concurrency],
            num_prompts=args.num_prompts,
            input_len=args.input_len,
            output_len=args.output_len,
            warmup=1,
            rid_prefix="bench-client",
        )
        client.http_json(url + "/sim/stats?reset=1")
        ours = loadgen.run_benchmark(cfg, keep_requests=True)
        level = ours["levels"][0]
        _, sim_stats = client.http_json(url + "/sim/stats?reset=1")
        time.sleep(0.5)
        cmp_ = compare_with_schedule(level, sim_oracle.read_schedule(log))
        theirs = None
        if not args.skip_oracle:
            theirs = sim_oracle.run_bench_serving(oracle_py, url, args, work)
            time.sleep(0.5)
            sched = sim_oracle.read_schedule(log)
            their = sim_oracle.bench_serving_entries(sched, "bench-client", theirs["_t0"], args.num_prompts)
            theirs["_prompt_tokens"] = statistics.mean(e["prompt_tokens"] for e in their) if their else None
            theirs["_completion_tokens"] = (
                statistics.mean(e["completion_tokens"] for e in their) if their else None
            )
            their_sched_ttft = [1000 * (e["first_token"] - e["arrival"]) for e in their]
            theirs["_server_side"] = sim_oracle.server_side_tok_s(their)
            ours_sched = [sched[r["rid"]] for r in level["requests"] if r["rid"] in sched]
            level["_server_side"] = sim_oracle.server_side_tok_s(ours_sched)

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
    warm, stall = level.get("warmup") or {}, level.get("stall") or {}
    print(
        f"   warm-up: {warm.get('requests', 0)} requests ({warm.get('at_once', 0)} at once) in "
        f"{warm.get('seconds', 0.0):.2f} s; longest silence on every stream {level['progress_gap_ms']:.1f} ms; "
        + (
            f"STALLED, measured again ({'; '.join(stall['reasons'])})"
            if stall.get("detected")
            else "no stall"
        )
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
