"""sglang_bench against sglang.bench_serving on one live server: same shape, alternating runs.

    python benchmarks/bench_real_server.py --url http://127.0.0.1:30000 --tokenizer /path/to/model \\
        --bench-serving-python /opt/sglang/venv/bin/python [--concurrency 16 --num-prompts 64 \\
        --input-len 256 --output-len 256 --runs 2] [--json FILE]

Each round runs sglang_bench (this repo's client, module_utils/sglang_layouts/bench/loadgen.py) and then
SGLang's own `python -m sglang.bench_serving --backend sglang --dataset-name random-ids
--random-range-ratio 1.0 --tokenize-prompt` with the same concurrency, prompt count and lengths
against the same server, so drift of the server (warm-up, JIT, clocks) falls on both. Prints per
run output tok/s, TTFT and ITL medians, and the ratio of the two clients' output tok/s per round.
Target: within 2 % on a real GPU server.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "module_utils"), str(REPO / "benchmarks")]

from bench_client import oracle_env, run_bench_serving  # noqa: E402
from sglang_layouts.bench import loadgen  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True)
    ap.add_argument(
        "--tokenizer", required=True, help="the served model's folder (bench_serving loads its tokenizer)"
    )
    ap.add_argument("--bench-serving-python", default=sys.executable, help="a python that imports sglang")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--num-prompts", type=int, default=64)
    ap.add_argument("--input-len", type=int, default=256)
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--json", help="also write every run here")
    args = ap.parse_args(argv)
    if "/" in args.bench_serving_python:  # bench_serving runs in a scratch folder
        args.bench_serving_python = str(Path(args.bench_serving_python).absolute())
    rounds = []
    print(f"{'run':>3} {'client':<20} {'output tok/s':>12} {'TTFT p50 ms':>12} {'ITL p50 ms':>11}")
    with tempfile.TemporaryDirectory(prefix="bench-real-") as work:
        for i in range(1, args.runs + 1):
            cfg = loadgen.make_config(
                args.url,
                concurrency=[args.concurrency],
                num_prompts=args.num_prompts,
                input_len=args.input_len,
                output_len=args.output_len,
                warmup=1,
                rid_prefix=f"bench-real-{i}",
            )
            level = loadgen.run_benchmark(cfg)["levels"][0]
            theirs = run_bench_serving(
                args.bench_serving_python, args.url, args, work, tokenizer=args.tokenizer, env=oracle_env()
            )
            ours_tok = level["output_tok_s"]
            rounds.append(
                {
                    "run": i,
                    "sglang_bench": {
                        "output_tok_s": ours_tok,
                        "ttft_ms_p50": level["ttft_ms"]["p50"],
                        "itl_ms_p50": level["itl_ms"]["p50"],
                        "completed": level["completed"],
                    },
                    "bench_serving": {
                        "output_tok_s": theirs["output_throughput"],
                        "ttft_ms_p50": theirs["median_ttft_ms"],
                        "itl_ms_p50": theirs["median_itl_ms"],
                        "completed": theirs.get("completed"),
                    },
                    "ratio": ours_tok / theirs["output_throughput"],
                }
            )
            r = rounds[-1]
            for name in ("sglang_bench", "bench_serving"):
                c = r[name]
                print(
                    f"{i:>3} {name:<20} {c['output_tok_s']:>12.1f} {c['ttft_ms_p50']:>12.2f} {c['itl_ms_p50']:>11.3f}"
                )
            print(f"{i:>3} {'ratio ours/theirs':<20} {r['ratio']:>12.4f}")
    worst = max(abs(r["ratio"] - 1) for r in rounds)
    print(
        f"median ratio {statistics.median(r['ratio'] for r in rounds):.4f}, worst |ratio - 1| {100 * worst:.2f} % "
        + ("(within 2 %)" if worst <= 0.02 else "(OVER 2 %)")
    )
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "rounds": rounds}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
