"""The simulator and SGLang's own bench_serving as benchmarks/bench_client.py and bench_rate.py run them.

- simulator(): `python -m sglang_sim` with a fixed decode step and its schedule log (when each request was
  parsed and each token was due, per rid), for as long as the block runs;
- oracle_python(), oracle_env(), find_tokenizer(): the oracle venv (`make oracle`) and the offline tokenizer
  the conformance tests build;
- run_bench_serving(): `python -m sglang.bench_serving` (random-ids, fixed lengths) against a URL;
- read_schedule(), bench_serving_entries(), server_side_tok_s(): what the simulator's log says about each
  client's requests.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "module_utils"), str(REPO)]

from sglang_sim.launcher import SimProcess  # noqa: E402


def host_line():
    return f"host: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} (other processes share them)"


def load_parser(doc: str, num_prompts: int, output_len: int) -> argparse.ArgumentParser:
    """A script's parser (its docstring's first line) with the settings run_bench_serving reads from
    args (both clients get them) and the simulator's decode step."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--num-prompts", type=int, default=num_prompts)
    ap.add_argument("--input-len", type=int, default=64)
    ap.add_argument("--output-len", type=int, default=output_len)
    ap.add_argument("--decode-step-ms", type=float, default=10.0)
    return ap


def oracle_python(required=True, hint=""):
    """SGLANG_ORACLE_PY or .venv/sglang/bin/python; exits with how to build it when required and missing."""
    path = os.environ.get("SGLANG_ORACLE_PY") or str(REPO / ".venv" / "sglang" / "bin" / "python")
    if required and not Path(path).is_file():
        sys.exit(f"no SGLang oracle python at {path}: run `make oracle`{hint}")
    return path


@contextlib.contextmanager
def simulator(work, decode_step_ms, prefill_ms_per_token=0.0, max_running=64):
    """The simulator for the block: yields (url, schedule log path)."""
    with SimProcess(
        ["--tp-size", "8", "--max-running-requests", str(max(64, max_running))],
        env={"SGLANG_SIM_WARMUP_SECONDS": "0.1"},
        python=sys.executable,
        decode_step_ms=decode_step_ms,
        prefill_ms_per_token=prefill_ms_per_token,
        schedule_log=Path(work) / "schedule.jsonl",
    ) as sim:
        sim.wait_ready()
        yield f"http://127.0.0.1:{sim.port}", sim.schedule_log


def read_schedule(path):
    out = {}
    with open(path) as fh:
        for line in fh:
            if line.strip():
                e = json.loads(line)
                out[e["rid"]] = e
    return out


def bench_serving_entries(schedule, ours, t0, n):
    """bench_serving's n measured requests in the simulator's log: not ours (rid prefix `ours`), not health
    checks, parsed after its run started (t0); its warmup request(s) come first and are left out."""
    return sorted(
        (
            e
            for rid, e in schedule.items()
            if not rid.startswith((ours, "HEALTH_CHECK")) and e["arrival"] >= t0
        ),
        key=lambda e: e["arrival"],
    )[-n:]


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


# Not passed to the oracle: this process's own Python (a PYTHONPATH would put the repo's or this
# venv's packages before the oracle's), and PYTHONDONTWRITEBYTECODE: the oracle venv's installer (uv)
# compiles no bytecode, so with it set (as on CI's machines) every oracle process compiled torch,
# transformers and SGLang anew, ~13 CPU-s before its first line; allowed, the first process leaves
# the bytecode in the machine cache's venv.
ORACLE_ENV_DROPPED = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONDONTWRITEBYTECODE")
ORACLE_OFFLINE = {
    "HF_HUB_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "PYTHONWARNINGS": "ignore",
    "PYTHONUNBUFFERED": "1",
}


def oracle_env(extra: dict | None = None) -> dict:
    """The environment of an oracle process (SGLang's own code): offline, nothing of this process's
    Python leaking in; `extra` last."""
    env = {k: v for k, v in os.environ.items() if k not in ORACLE_ENV_DROPPED}
    return {**env, **ORACLE_OFFLINE, **(extra or {})}


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
