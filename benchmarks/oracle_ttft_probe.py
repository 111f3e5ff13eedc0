"""Run by the ORACLE python (benchmarks/bench_rate.py --ttft-probe): bench_serving's own request function.

    <oracle python> benchmarks/oracle_ttft_probe.py URL N GAP_S INPUT_LEN OUTPUT_LEN

Sends N requests, one every GAP_S seconds, each with SGLang 0.5.23's own
sglang.benchmark.serving.async_request_sglang_generate (a new aiohttp session per request, as
bench_serving does), and prints one JSON line per request: {"st", "ttft", "ok"}, where st is that
function's own time.perf_counter() just before session.post. perf_counter is CLOCK_MONOTONIC on
Linux, the clock of the simulator's schedule log, so st can be set against the moment the simulator
parsed the request and wrote its first token.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys


async def main(url, n, gap, input_len, output_len):
    from sglang.benchmark import serving

    # the module-level args its request functions read (bench_serving's defaults)
    serving.args = argparse.Namespace(
        temperature=0.0,
        top_p=1.0,
        disable_ignore_eos=False,
        disable_stream=False,
        return_logprob=False,
        return_routed_experts=False,
        logprob_start_len=-1,
        top_logprobs_num=0,
        token_ids_logprob=None,
        header=None,
        cache_report=False,
        print_requests=False,
    )
    tasks = []
    for i in range(n):
        inp = serving.RequestFuncInput(
            model="m",
            prompt=[(i * 7 + j) % 1000 for j in range(input_len)],
            api_url=url + "/generate",
            prompt_len=input_len,
            output_len=output_len,
            lora_name=None,
            image_data=None,
            extra_request_body={},
        )
        tasks.append(asyncio.create_task(serving.async_request_sglang_generate(inp)))
        await asyncio.sleep(gap)
    for out in await asyncio.gather(*tasks):
        print(json.dumps({"st": out.start_time, "ttft": out.ttft, "ok": out.success}))


if __name__ == "__main__":
    url, n, gap, input_len, output_len = sys.argv[1:6]
    asyncio.run(main(url, int(n), float(gap), int(input_len), int(output_len)))
