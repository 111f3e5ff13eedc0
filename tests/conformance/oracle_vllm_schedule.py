"""Print the arrival delays the pinned vLLM's own `vllm bench serve` computes. Run by the vLLM venv's python.

    .venv/vllm/bin/python tests/conformance/oracle_vllm_schedule.py CASES.json

CASES.json: [[`vllm bench serve` flags ...], ...] (give --model, --tokenizer and --ready-check-timeout-sec 0:
nothing is contacted). For each case vLLM's real argument parser and main_async run (random.seed /
np.random.seed(--seed), the tokenizer, the dataset sampling); its benchmark() is replaced by a stand-in
that only iterates vLLM's own get_request(input_requests, request_rate, burstiness), with time.time
returning 0.0 and asyncio.sleep recording each sleep: request i then sleeps exactly delay_ts[i] (its
precomputed, rescaled cumulative delay). The last stdout line is JSON, one entry per case:
[{"delays": [s, ...], "num_requests": n, "numpy": version}, ...].
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys

from oracle_sleeps import count_requests, recorded_sleeps  # this folder: the script's own sys.path[0]


def main() -> int:
    import numpy as np
    from vllm.benchmarks import serve

    with open(sys.argv[1]) as fh:
        cases = json.load(fh)
    results = []

    async def stand_in(**kw):
        with recorded_sleeps(serve, clock=0.0) as delays:
            requests = serve.get_request(kw["input_requests"], kw["request_rate"], kw["burstiness"])
            n = await count_requests(requests, pad_delays=delays)  # no sleep: its delay was 0
        results.append({"delays": delays, "num_requests": n, "numpy": np.__version__})
        raise SystemExit(0)

    serve.benchmark = stand_in
    for argv in cases:
        parser = argparse.ArgumentParser()
        serve.add_cli_args(parser)
        args = parser.parse_args(argv)
        with contextlib.suppress(SystemExit):  # the stand-in ends the run once it has the delays
            serve.main(args)
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
