"""Print the arrival gaps the pinned SGLang's own bench_serving draws. Run by the ORACLE python.

    <oracle python> tests/conformance/oracle_bench_serving_schedule.py CASES.json

CASES.json: [[bench_serving flags ...], ...], the flags of `python -m sglang.bench_serving` (give
--tokenizer, --model and --ready-check-timeout-sec 0: nothing is contacted). For each case its real
cli_main runs: the argument parser, run_benchmark (random.seed / np.random.seed(--seed), the tokenizer,
the dataset sampling), then benchmark() is replaced by a stand-in that only iterates bench_serving's own
get_request(input_requests, request_rate), with asyncio.sleep recording each interval instead of
sleeping. The last stdout line is JSON, one entry per case:
[{"gaps": [s, ...], "num_requests": n, "vocab_size": the tokenizer's, "numpy": version}, ...].
"""

from __future__ import annotations

import json
import sys

from oracle_sleeps import count_requests, recorded_sleeps  # this folder: the script's own sys.path[0]


def main() -> int:
    import numpy as np
    from sglang.benchmark import serving

    with open(sys.argv[1]) as fh:
        cases = json.load(fh)
    results = []

    async def stand_in(**kw):
        with recorded_sleeps(serving) as gaps:
            n = await count_requests(serving.get_request(kw["input_requests"], kw["request_rate"]))
        # the generator draws (and sleeps) once more after the last request: that gap is never used
        results.append(
            {
                "gaps": gaps[: max(n - 1, 0)],
                "num_requests": n,
                "vocab_size": kw["tokenizer"].vocab_size,
                "numpy": np.__version__,
            }
        )

    serving.benchmark = stand_in
    for argv in cases:
        sys.argv = ["bench_serving", *argv]
        serving.cli_main()
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
