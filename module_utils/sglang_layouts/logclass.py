"""Engine log lines (SGLang, its simulator, vLLM) -> failure class.

One ordered table of regular expressions over SGLang's real log lines
(notes/sglang.md sections 3.3-3.5, 0.5.10.post1 and newer) and vLLM's
(docs/vllm.md "Failures", 0.32.0). The rows of both engines share the table:
their lines do not overlap, and a class means the same thing for either
engine (kv_cache_no_memory is SGLang's "Not enough memory" and vLLM's "No
available memory for the cache blocks"). The first row
that matches a line gives the line's class; across several lines the row with
the highest priority (lowest index) wins, so the traceback's
`torch.OutOfMemoryError` beats the `Scheduler hit an exception` that
announces it.

Rows are *definitive* (the line names the cause: the verdict can be given at
once) or *generic* (something died, the cause may follow in the next lines:
wait a moment for a definitive line or the process exit). Lines that look
alarming but are not fatal (the PCIe custom-all-reduce warning, the 20 s
health-check message under load, request retractions, NCCL's destructor
warning) are listed in BENIGN and never classify.

Pure Python, standard library only: used by the sglang_health module, the
simulator's tests and benchmarks/bench_health.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CLASSES = (
    "cuda_oom",
    "kv_cache_no_memory",
    "nccl_timeout",
    "rank_died",
    "port_in_use",
    "bad_args",
    "import_error",
    "model_not_found",
    "crashed",
    "ready_timeout",
)

READY_LINE = "The server is fired up and ready to roll!"
# vLLM: its own last start-up line, then uvicorn's (docs/vllm.md, start-up table).
READY_LINES = (READY_LINE, "Starting vLLM server on http", "Application startup complete.")


@dataclass(frozen=True)
class Rule:
    cls: str
    pattern: re.Pattern
    definitive: bool
    hint: str


def _r(cls: str, pattern: str, definitive: bool, hint: str) -> Rule:
    return Rule(cls, re.compile(pattern), definitive, hint)


# Lines that must never classify, although they contain alarming words.
BENIGN = tuple(
    re.compile(p)
    for p in (
        # custom all-reduce off on >2 PCIe GPUs (custom_all_reduce_utils.py)
        r"is disabled because it's not supported on more than two PCIe-only GPUs",
        # /health under long prefill (#22511): the server keeps working
        r"Health check failed\. Server couldn't get a response from detokenizer",
        # KV pool full at run time: requests are retracted, the server lives on
        r"KV cache pool is full\. Retract requests",
        # torch's destructor warning at a clean exit
        r"process group has NOT been destroyed before",
        # DeepGEMM JIT notice: slow, not fatal
        r"Entering DeepGEMM JIT Pre-Compile session",
        # optional model modules that fail to import are skipped by SGLang's registry
        r"Ignore import error when loading",
        # the deprecation notice of `python -m sglang.launch_server`
        r"UserWarning: .*launch_server",
        # SIGTERM drain during a normal stop
        r"SIGTERM received\. .*Draining requests",
        # vLLM on CPU without triton (ci/vllm.sh removes it): the V1 model runner is used
        r"Triton is not installed\. triton-cpu is expected",
        # vLLM's AOT cache miss on CPU: it compiles again (docs/vllm.md, warm start)
        r"Compiling model again due to a load failure",
        # vLLM's normal stop (SIGTERM) leaves shared memory to the resource tracker
        r"resource_tracker: There appear to be \d+ leaked shared_memory objects",
    )
)

# Ordered: priority = position. Definitive rows first within each cause.
RULES: tuple[Rule, ...] = (
    _r(
        "kv_cache_no_memory",
        r"Not enough memory\. Please try to increase --mem-fraction-static"
        r"|Loaded weights leave no GPU memory for the KV cache",
        True,
        "weights fit but leave no room for the KV cache: raise --mem-fraction-static or use more GPUs",
    ),
    # vLLM (v1/core/kv_cache_utils.py, v1/worker/cpu_worker.py): the KV budget is empty, or smaller
    # than one --max-model-len request, or (CPU) larger than the free RAM.
    _r(
        "kv_cache_no_memory",
        r"No available memory for the cache blocks",
        True,
        "vLLM: weights and activations use the whole budget: raise --gpu-memory-utilization or use more GPUs",
    ),
    _r(
        "kv_cache_no_memory",
        r"To serve at least one request with the model's max seq len"
        r"|on kv cache allocation is less than requested memory for kv",
        True,
        "vLLM: the KV cache cannot hold one --max-model-len request: lower --max-model-len "
        "(the line says what fits) or raise --gpu-memory-utilization",
    ),
    # vLLM: the GPU's free memory is below --gpu-memory-utilization x total before anything loads.
    _r(
        "cuda_oom",
        r"on startup is less than desired GPU memory utilization",
        True,
        "vLLM: the GPU is not free enough for --gpu-memory-utilization (another process holds memory)",
    ),
    _r(
        "cuda_oom",
        r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|cudaErrorMemoryAllocation",
        True,
        "a GPU ran out of memory (weights or activations do not fit this layout)",
    ),
    _r(
        "nccl_timeout",
        r"Watchdog caught collective operation timeout"
        r"|NCCL (?:communicator|operation).*(?:timed out|timeout)"
        r"|DistStoreError: .*[Tt]imed out|Socket Timeout|ncclSystemError|NCCL error",
        True,
        "a collective or the distributed rendezvous timed out (NCCL, P2P, --dist-timeout)",
    ),
    _r(
        "nccl_timeout",
        r"Scheduler watchdog timeout",
        True,
        "a forward batch hung longer than --watchdog-timeout (usually a stuck collective)",
    ),
    _r(
        "port_in_use",
        r"[Aa]ddress already in use|\[Errno 98\]|[Pp]ort \d+ is (?:already )?in use",
        True,
        "the port is taken by another process",
    ),
    _r(
        "bad_args",
        r"(?:^|: )error: (?:unrecognized arguments|ambiguous option|argument |the following arguments are required"
        r"|invalid choice)",
        True,
        "SGLang's argument parser rejected the command line",
    ),
    # vLLM's config validation (pydantic): e.g. --max-model-len above the model's.
    _r(
        "bad_args",
        r"User-specified max_model_len \(|ValidationError: \d+ validation errors? for \w*Config",
        True,
        "vLLM rejected the configuration (the next line says which value)",
    ),
    # vLLM given a local model path that does not exist takes it for a Hub repo id.
    _r(
        "model_not_found",
        r"HFValidationError: Repo id must be|Repo id must use alphanumeric chars"
        r"|RepositoryNotFoundError|LocalEntryNotFoundError|OfflineModeIsEnabled",
        True,
        "the model path does not exist on the host (or is not a model folder), so it was taken for a Hub repo id",
    ),
    _r(
        "import_error",
        r"ModuleNotFoundError: |ImportError: |No module named |cannot open shared object file"
        r"|Failed to locate executable|Failed at step EXEC",
        True,
        "the engine cannot be imported or executed (venv, CUDA libraries)",
    ),
    _r(
        "rank_died",
        r"Rank \d+ scheduler died during initialization|Subprocess \S+ \(pid=\d+\) crashed with exit code",
        True,
        "a scheduler rank died (exit -9 is usually the host's OOM killer: dmesg -T | grep -i oom)",
    ),
    _r(
        "crashed",
        r"peer access is not supported between these two devices",
        True,
        "GPUs without P2P: add --disable-custom-all-reduce or --enable-p2p-check",
    ),
    _r(
        "crashed",
        r"The memory capacity is unbalanced",
        True,
        "GPU memory differs between ranks: another process holds a GPU",
    ),
    _r(
        "crashed",
        r"Initialization failed\. warmup error",
        True,
        "the warmup request failed",
    ),
    # vLLM: the engine core died while serving; the API server then exits 0 (docs/vllm.md).
    # (EngineDeadError alone is generic: a normal SIGTERM stop can log it too, below.)
    _r(
        "crashed",
        r"engine core exited unexpectedly",
        True,
        "vLLM's engine core died (the API server exits with status 0 after it): see the lines above for why",
    ),
    _r(
        "crashed",
        r"Unsupported CPU attention configuration",
        True,
        "vLLM's CPU attention does not support this head_dim",
    ),
    # Generic: something failed, the cause may follow.
    _r(
        "crashed",
        r"Scheduler hit an exception|Received sigquit from a child process|SIGQUIT received"
        r"|Traceback \(most recent call last\)|Segmentation fault|core dumped|Fatal Python error",
        False,
        "the engine failed",
    ),
    # vLLM's generic start-up failure: the specific cause is the ValueError/Error line before it.
    _r(
        "crashed",
        r"Engine core initialization failed|EngineCore failed to start"
        r"|Worker proc \S+ died unexpectedly"
        # also logged by a normal stop, when the API server's output handler sees the engine core go
        r"|EngineDeadError",
        False,
        "vLLM's engine core did not start",
    ),
)


@dataclass(frozen=True)
class Match:
    cls: str
    line: str
    definitive: bool
    hint: str
    priority: int


def classify_line(line: str) -> Match | None:
    """The class of one log line, or None for a line that is not fatal."""
    if not line:
        return None
    for benign in BENIGN:
        if benign.search(line):
            return None
    for i, rule in enumerate(RULES):
        if rule.pattern.search(line):
            return Match(rule.cls, line.rstrip("\n"), rule.definitive, rule.hint, i)
    return None


def best(a: Match | None, b: Match | None) -> Match | None:
    """The more specific of two matches (earlier rule wins; ties keep the first line)."""
    if a is None:
        return b
    if b is None:
        return a
    return b if b.priority < a.priority else a


def classify(lines) -> Match | None:
    """The most specific failure among `lines` (an iterable of str), or None."""
    found = None
    for line in lines:
        found = best(found, classify_line(line))
    return found


def classify_exit(
    exit_code: int | None, signal_name: str | None = None, engine: str = "sglang"
) -> tuple[str, str]:
    """The class of a process exit without a fatal log line: (class, hint).

    Any exit the gate did not ask for is a failure, status 0 included: vLLM's API server exits 0
    when its engine core dies."""
    if exit_code == 203:  # systemd's status=203/EXEC: ExecStart's binary is missing
        return "import_error", "the unit's executable could not be started (203/EXEC): is the venv there?"
    if exit_code == 2 and not signal_name:
        return "bad_args", "exit status 2 is argparse's usage error"
    if signal_name in ("KILL", "SIGKILL") or exit_code in (-9, 137):
        return "crashed", "killed by SIGKILL (SGLang kills itself after a child failure; or the OOM killer)"
    if exit_code == 0 and not signal_name and engine == "vllm":
        return "crashed", "vLLM exited with status 0 without being asked to stop (its engine core died)"
    return "crashed", "the engine exited"


def is_ready_line(line: str) -> bool:
    return any(ready in line for ready in READY_LINES)


KV_TOKENS = re.compile(r"(?:GPU|CPU|XPU|TPU|HPU)? ?KV cache size: ([0-9][0-9,_]*) tokens")


def kv_tokens(line: str) -> int | None:
    """vLLM's KV capacity from its start-up line `GPU KV cache size: 2,097,152 tokens, ...` (or CPU ...)."""
    m = KV_TOKENS.search(line)
    return int(m.group(1).replace(",", "").replace("_", "")) if m else None
