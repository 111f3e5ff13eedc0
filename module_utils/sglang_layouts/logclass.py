"""SGLang log lines -> failure class.

One ordered table of regular expressions over SGLang's real log lines
(notes/sglang.md sections 3.3-3.5, 0.5.10.post1 and newer). The first row
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
    "crashed",
    "ready_timeout",
)

READY_LINE = "The server is fired up and ready to roll!"


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
    # Generic: something failed, the cause may follow.
    _r(
        "crashed",
        r"Scheduler hit an exception|Received sigquit from a child process|SIGQUIT received"
        r"|Traceback \(most recent call last\)|Segmentation fault|core dumped|Fatal Python error",
        False,
        "the engine failed",
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


def classify_exit(exit_code: int | None, signal_name: str | None = None) -> tuple[str, str]:
    """The class of a process exit without a fatal log line: (class, hint)."""
    if exit_code == 203:  # systemd's status=203/EXEC: ExecStart's binary is missing
        return "import_error", "the unit's executable could not be started (203/EXEC): is the venv there?"
    if exit_code == 2 and not signal_name:
        return "bad_args", "exit status 2 is argparse's usage error"
    if signal_name in ("KILL", "SIGKILL") or exit_code in (-9, 137):
        return "crashed", "killed by SIGKILL (SGLang kills itself after a child failure; or the OOM killer)"
    return "crashed", "the engine exited"


def is_ready_line(line: str) -> bool:
    return READY_LINE in line
