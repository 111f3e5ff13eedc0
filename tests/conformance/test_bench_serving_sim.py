"""SGLang's own bench_serving (the pinned version, CPU install) against the simulator.

Both the native backend (`sglang`: /generate, cumulative text, server-side token counts) and
an OpenAI-compatible one (`sglang-oai`: /v1/completions deltas) must finish every request with
exactly the requested number of output tokens, and the simulator's schedule log must agree.
"""

from __future__ import annotations

import json
import statistics

import pytest

from tests.helpers.sims import scheduled_sim

NUM, IN_LEN, OUT_LEN = 12, 64, 24


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    args = ["--tp-size", "8", "--max-running-requests", "4", "--served-model-name", "kimi-sim"]
    with scheduled_sim(tmp_path_factory.mktemp("sim-bench"), args, decode_step_ms=5) as s:
        yield s


def _records(sim) -> list[dict]:
    return [json.loads(line) for line in sim.schedule_log.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("backend", ["sglang", "sglang-oai"])
def test_bench_serving_completes_with_exact_output_tokens(sim, run_bench_serving, backend):
    before = len(_records(sim))
    # --tokenize-prompt: the native backend sends input_ids, so prompt lengths are exact too
    extra = ["--tokenize-prompt"] if backend == "sglang" else []
    row = run_bench_serving(
        sim.url(),
        backend=backend,
        num_prompts=NUM,
        input_len=IN_LEN,
        output_len=OUT_LEN,
        concurrency=4,
        extra_args=extra,
        timeout=240,
    )
    assert row["completed"] == NUM, row.get("_stdout", "")[-3000:]
    assert row["total_output_tokens"] == NUM * OUT_LEN
    assert row["random_output_len"] == OUT_LEN and row["random_range_ratio"] == 1.0
    # the server generated exactly what the client asked for (the warm-up request included)
    new = _records(sim)[before:]
    assert len(new) >= NUM
    assert all(r["completion_tokens"] == OUT_LEN for r in new[-NUM:])
    if backend == "sglang":
        assert all(r["prompt_tokens"] == IN_LEN for r in new[-NUM:])
    # each request's latency as the client measured it holds the server's schedule for it (sent
    # before it arrived, read after its last token was due), so the medians are ordered too; how
    # much longer the client took is the host's load, which no test judges
    spans = [r["token_times"][-1] - r["arrival"] for r in new[-NUM:]]
    assert row["median_e2e_latency_ms"] >= statistics.median(spans) * 1000 - 0.01
