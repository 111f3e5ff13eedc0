"""arrival_rng bench_serving: our request-rate schedule is the one SGLang's bench_serving draws, to the float.

The judge is the pinned SGLang's own code in the oracle venv (oracle_bench_serving_schedule.py runs
bench_serving's cli_main up to its get_request generator, with the real seeding and dataset sampling) and,
for burstiness other than 1 (bench_serving 0.5.23 has no --burstiness), numpy's np.random.gamma after
the same dataset draws. Our side is module_utils/sglang_layouts/bench/schedule.py, standard library only.
"""

from __future__ import annotations

import json

import pytest
from conftest import HERE, run_oracle, run_schedule_oracle, schedule_argv
from sglang_layouts.bench import schedule

# (seed, request rate, num_prompts, input_len, output_len, range_ratio)
CASES = [
    (1, 8.0, 80, 64, 64, 1.0),
    (0, 2.5, 33, 128, 16, 1.0),
    (12345, 100.0, 200, 32, 32, 1.0),
    (7, 8.0, 40, 100, 50, 0.5),  # random lengths: bench_serving draws them before the schedule
    (4294967295, 0.7, 12, 8, 8, 0.0),
    (3, float("inf"), 10, 16, 16, 1.0),
]


def _dataset(input_len, output_len, ratio):
    if ratio == 1.0:
        return {"name": "random", "input_len": input_len, "output_len": output_len}
    return {"name": "random-range", "input_len": input_len, "output_len": output_len, "range_ratio": ratio}


@pytest.fixture(scope="module")
def oracle_gaps(oracle_python, oracle_tokenizer, tmp_path_factory):
    work = tmp_path_factory.mktemp("bench-serving-schedule")
    cases = [
        [
            *schedule_argv("sglang", oracle_tokenizer, seed, rate, n),
            "--dataset-name",
            "random-ids",
            "--tokenize-prompt",
            "--random-input-len",
            str(inp),
            "--random-output-len",
            str(out),
            "--random-range-ratio",
            str(ratio),
        ]
        for seed, rate, n, inp, out, ratio in CASES
    ]
    return run_schedule_oracle(oracle_python, HERE / "oracle_bench_serving_schedule.py", cases, work)


@pytest.mark.parametrize("index", range(len(CASES)), ids=[f"seed{c[0]}-rate{c[1]:g}-n{c[2]}" for c in CASES])
def test_schedule_equals_bench_servings_to_the_float(oracle_gaps, index):
    seed, rate, n, inp, out, ratio = CASES[index]
    theirs = oracle_gaps[index]
    assert theirs["num_requests"] == n
    gaps = schedule.bench_serving_gaps(rate, 1.0, seed, n, _dataset(inp, out, ratio), theirs["vocab_size"])
    assert gaps == theirs["gaps"]  # exact: same bits, not approx
    assert len(gaps) == (0 if rate == float("inf") else n - 1)
    # and the schedule a rate level sends on is their running sum
    t, offsets = 0.0, [0.0]
    for g in theirs["gaps"]:
        t += g
        offsets.append(t)
    assert schedule.bench_serving_offsets(
        rate, 1.0, seed, n, _dataset(inp, out, ratio), theirs["vocab_size"]
    ) == (offsets if rate != float("inf") else [0.0] * n)


_NUMPY_GAMMA = """
import json, sys
import numpy as np
seed, n, inp, out, ratio, vocab, rate, shape = json.loads(sys.argv[1])
np.random.seed(seed)
for full in (inp, out):  # bench_serving's compute_random_lens, input then output
    np.random.randint(max(int(full * ratio), 1), full + 1, size=n)
np.random.randint(0, vocab, size=n)
theta = 1.0 / (rate * shape)
print(json.dumps([float(np.random.gamma(shape=shape, scale=theta)) for _ in range(n - 1)]))
"""


@pytest.mark.parametrize("shape", [0.25, 0.5, 0.9, 1.0, 1.5, 2.0, 4.0])
@pytest.mark.parametrize("seed", [1, 99])
def test_burstiness_draws_numpys_legacy_gamma_to_the_float(oracle_python, shape, seed):
    n, inp, out, ratio, vocab, rate = 150, 32, 16, 0.5, 1024, 6.0
    proc = run_oracle(
        oracle_python, ["-c", _NUMPY_GAMMA, json.dumps([seed, n, inp, out, ratio, vocab, rate, shape])]
    )
    theirs = json.loads(proc.stdout.strip().splitlines()[-1])
    ds = _dataset(inp, out, ratio)
    assert schedule.bench_serving_gaps(rate, shape, seed, n, ds, vocab) == theirs
