"""arrival_rng vllm: our request-rate schedule is the one the pinned vLLM's `vllm bench serve` computes.

The judge is vLLM's own code in .venv/vllm (ci/vllm.sh, `make vllm`): oracle_vllm_schedule.py runs its
argument parser and main_async (seeding, tokenizer, random dataset) up to its own get_request, with the
clock stopped at 0 so that each recorded sleep is vLLM's delay_ts[i] itself. Our side is
module_utils/sglang_layouts/bench/schedule.py, standard library only.
"""

from __future__ import annotations

import pytest
from conftest import HERE, run_schedule_oracle, schedule_argv
from sglang_layouts.bench import schedule

# (seed, request rate, burstiness, num_prompts)
CASES = [
    (1, 8.0, 1.0, 80),
    (0, 2.5, 1.0, 33),
    (12345, 100.0, 0.5, 200),
    (7, 8.0, 3.0, 40),
    (4294967295, 0.7, 1.0, 12),
]


@pytest.fixture(scope="module")
def vllm_delays(vllm_venv, oracle_tokenizer, tmp_path_factory):
    work = tmp_path_factory.mktemp("vllm-schedule")
    cases = [
        [
            *schedule_argv("vllm", oracle_tokenizer, seed, rate, n),
            "--dataset-name",
            "random",
            "--random-input-len",
            "16",
            "--random-output-len",
            "16",
            "--burstiness",
            str(b),
        ]
        for seed, rate, b, n in CASES
    ]
    return run_schedule_oracle(
        vllm_venv / "bin" / "python", HERE / "oracle_vllm_schedule.py", cases, work, timeout=600
    )


@pytest.mark.parametrize(
    "index", range(len(CASES)), ids=[f"seed{c[0]}-rate{c[1]:g}-b{c[2]:g}" for c in CASES]
)
def test_schedule_equals_vllms_to_the_float(vllm_delays, index):
    seed, rate, burstiness, n = CASES[index]
    theirs = vllm_delays[index]
    assert theirs["num_requests"] == n
    assert schedule.vllm_delays(rate, burstiness, seed, n) == theirs["delays"]  # exact
    assert theirs["delays"][-1] == pytest.approx(n / rate, rel=1e-12)  # vLLM's rescaling
    offsets = schedule.vllm_offsets(rate, burstiness, seed, n)
    assert offsets == [d - theirs["delays"][0] for d in theirs["delays"]]
