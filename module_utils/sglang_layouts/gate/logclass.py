"""Engine log lines (SGLang, its simulator, vLLM) -> failure class.

A line is fatal because of what it *is*, not because it names an error:

- the exception that ends a traceback (`torch.OutOfMemoryError: ...`,
  `ValueError: Loaded weights leave no GPU memory ...`, the interpreter's own
  `python: No module named sglang`): it is what was raised, so it killed
  whatever raised it;
- a message the engine logs only on its way down (`Scheduler hit an
  exception`, `Subprocess scheduler_2 ... crashed with exit code -6`, uvicorn's
  bind error).

A logged message that merely *mentions* an exception is not fatal: a live
server reports optional features it disabled that way (SGLang 0.5.16: `OpenAI
Responses API (/v1/responses) disabled: ... (ModuleNotFoundError: No module
named 'openai_harmony')`, `Ignore import error when loading ...`). Rules therefore
carry a scope: `raised` rules only read exception lines, `logged` rules any line.
A raised exception inside a traceback that a live server announced as handled
(`Exception in ASGI application`, ...) is demoted to generic.

Rules are *definitive* (the line names the cause) or *generic* (something
died, the cause may follow: wait for a definitive line or the process exit).
Across several lines the row with the highest priority (lowest index) wins, so
the traceback's `OutOfMemoryError` beats the `Scheduler hit an exception` that
announced it.

A traceback is read whole. Its header (`Scheduler hit an exception: Traceback
(most recent call last):`) decides nothing: the classifier says the traceback
is open (`traceback_open`) from the header through its frames, its exception
line and that exception's message lines, across chained tracebacks (`The above
exception was the direct cause ...`), until a new log record starts or the
caller ends it (the process exited, or no line came for a quiet period). A
caller holds its verdict while a traceback is open, so the class comes from the
final exception and the lines logged before it, and the evidence is the line
that says what happened: the exception that ended the traceback when no rule
names a cause.

A requested stop is not a failure: after the stop marker (the supervisor's
STOP_MARKER, systemd's `Stopping <unit>`, SGLang's SIGTERM drain line) and with
the caller saying it asked for the stop, the cascade SGLang logs on a SIGTERM
(`Subprocess scheduler_0 ... crashed with exit code -15`, `SIGQUIT received`,
`kill_process_tree`, exit status 137) classifies as nothing.

Each rule says where its line was seen (`seen`): the SGLang or vLLM version and
whether from a real run's log (`run`) or the engine's source (`source`).

Pure Python, standard library only: used by the sglang_health module, the
simulator's tests and benchmarks/bench_health.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .. import engines

CLASSES = (
    "cuda_oom",
    "kv_cache_no_memory",
    "jit_build_failed",
    "gpu_unavailable",
    "nccl_timeout",
    "rank_died",
    "port_in_use",
    "bad_args",
    "import_error",
    "model_not_found",
    "crashed",
    "ready_timeout",
    # prefill/decode disaggregation (a pd layout): a request's KV did not reach the decode server
    "kv_bootstrap_timeout",
    "kv_transfer_timeout",
    "kv_transfer_failed",
)

READY_LINE = "The server is fired up and ready to roll!"
# vLLM: its own last start-up line, then uvicorn's (docs/vllm.md, start-up table).
READY_LINES = (READY_LINE, "Starting vLLM server on http", "Application startup complete.")

# Written into the engine's log by the process supervisor just before it signals a stop.
STOP_MARKER = "sglang-layouts: stop requested"

# ---------------------------------------------------------------- line anatomy

# SGLang: `[2026-12-01 20:21:01] ` or `[2026-12-01 20:21:01 DP0 TP3] `
_SGLANG_PREFIX = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?(?: [A-Z]+\d+)*\] ")
# vLLM: `(EngineCore pid=5738) ERROR 11-29 15:43:15 [core.py:1510] ` (either part alone too)
_VLLM_PROC = re.compile(r"^\((?:\w+)(?: pid=\d+)?\) ")
_VLLM_LEVEL = re.compile(
    r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[[^\]]*\] "
)
# torch's C++ log prefix: `[rank3]:[E1129 10:00:00.000000000 ProcessGroupNCCL.cpp:632] `
_TORCH_PREFIX = re.compile(r"^(?:\[rank\d+\]:)?\[[EWI]\d{4} [\d:.]+ [^\]]+\] ")
# What Python prints as the last line of a traceback: a dotted exception name, then `: message`.
_RAISED = re.compile(
    r"^(?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*(?:Error|Exception)|Exception|KeyboardInterrupt)(?::\s|$)"
)
# The interpreter itself, before any code runs: `/opt/sglang/venv/bin/python: No module named sglang`.
_INTERPRETER = re.compile(r"^\S*python[\d.]*: (?:No module named |Error while finding module specification)")

# Messages of a live server that announce a traceback it handled (the server goes on).
_HANDLED = re.compile(
    r"Exception in ASGI application|Exception in callback|Task exception was never retrieved"
    r"|Error in request|Failed to process request|Exception when handling request"
)
_TRACEBACK = re.compile(r"Traceback \(most recent call last\):\s*$")
# Python's lines between the tracebacks of a chain.
_CHAIN = re.compile(
    r"^(?:The above exception was the direct cause of the following exception:"
    r"|During handling of the above exception, another exception occurred:)\s*$"
)
# uvicorn's own records (`INFO:     Started server process`), systemd's lines about the unit.
_UVICORN = re.compile(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):\s")
_SYSTEMD_UNIT = re.compile(r"^\S+\.service: ")

# Proof that a stop was asked for: the supervisor's marker, systemd's stop job.
_STOP_REQUESTS = re.compile(re.escape(STOP_MARKER) + r"|^Stopping \S+\.service")
# The engine's own stop lines: a stop, but from whom? They count only when the caller asked for one.
_STOP_LINES = re.compile(
    r"SIGTERM received\. .*Draining requests|\[shutdown\] API server: shutdown triggered|^(?:INFO:\s+)?Shutting down$"
)


def body_of(line: str) -> str:
    """The message of a log line, without the engine's timestamp/rank/process prefixes."""
    body = _SGLANG_PREFIX.sub("", line, count=1)
    body = _VLLM_PROC.sub("", body, count=1)
    body = _VLLM_LEVEL.sub("", body, count=1)
    return _TORCH_PREFIX.sub("", body, count=1)


def starts_record(line: str) -> bool:
    """The line begins a new log record (a logger's prefix), so it is no continuation of the
    multi-line message before it (a traceback's frames and exception message carry no prefix)."""
    rest = _VLLM_PROC.sub("", line, count=1)
    return bool(
        _SGLANG_PREFIX.match(rest)
        or _VLLM_LEVEL.match(rest)
        or _TORCH_PREFIX.match(rest)
        or _UVICORN.match(rest)
        or _SYSTEMD_UNIT.match(rest)
    )


def is_raised(body: str) -> bool:
    """The body is an exception as Python prints it (or the interpreter's own start-up error)."""
    return bool(_RAISED.match(body) or _INTERPRETER.match(body))


# ---------------------------------------------------------------- rules


@dataclass(frozen=True)
class Rule:
    cls: str
    pattern: re.Pattern
    definitive: bool
    hint: str
    scope: str  # "raised": exception lines only; "logged": any line
    seen: str  # where the line was seen: engine version, run or source


def _r(cls: str, pattern: str, definitive: bool, hint: str, scope: str, seen: str) -> Rule:
    return Rule(cls, re.compile(pattern), definitive, hint, scope, seen)


_JIT_HINT = (
    "a JIT kernel build failed (SGLang, flashinfer and tvm-ffi compile CUDA kernels with nvcc and ninja "
    "on first use): check that nvcc 13 and ninja are on the service's PATH (a FileNotFoundError names the "
    "one it could not run; a venv's bin/ is not on a unit's PATH by itself) and CUDA_HOME points at the "
    "CUDA toolkit, that flashinfer-python is complete (its flashinfer/data/ sources), and that the JIT "
    "caches (~/.cache/flashinfer, TVM_FFI_CACHE_DIR) are writable by the service user"
)

# Executables a JIT build runs (ninja, the CUDA and host compilers, the linker, CUDA's back ends).
_BUILD_TOOLS = (
    r"ninja|nvcc|cicc|ptxas|fatbinary|nvlink|c\+\+|g\+\+|gcc|cc|clang\+\+|clang|ld|cmake|make|hipcc"
)

_GPU_HINT = (
    "the layout asks for more GPUs than the host shows (a rank's GPU index is past the last visible "
    "GPU): use a layout whose tp x pp (x dp) per node fits the host's GPUs, and check nvidia-smi -L, "
    "CUDA_VISIBLE_DEVICES and --base-gpu-id"
)

# Ordered: priority = position. Definitive rows first within each cause.
RULES: tuple[Rule, ...] = (
    _r(
        "kv_cache_no_memory",
        r"Not enough memory\. Please try to increase --mem-fraction-static"
        r"|Loaded weights leave no GPU memory for the KV cache",
        True,
        "weights fit but leave no room for the KV cache: raise --mem-fraction-static or use more GPUs",
        "logged",
        "SGLang 0.5.16 run (H200); 0.5.10.post1 and 0.5.23 source",
    ),
    # vLLM (v1/core/kv_cache_utils.py, v1/worker/cpu_worker.py): the KV budget is empty, or smaller
    # than one --max-model-len request, or (CPU) larger than the free RAM.
    _r(
        "kv_cache_no_memory",
        r"No available memory for the cache blocks",
        True,
        "vLLM: weights and activations use the whole budget: raise --gpu-memory-utilization or use more GPUs",
        "logged",
        "vLLM 0.32.0 source and CPU run",
    ),
    _r(
        "kv_cache_no_memory",
        r"To serve at least one request with the model's max seq len"
        r"|on kv cache allocation is less than requested memory for kv",
        True,
        "vLLM: the KV cache cannot hold one --max-model-len request: lower --max-model-len "
        "(the line says what fits) or raise --gpu-memory-utilization",
        "logged",
        "vLLM 0.32.0 source and CPU run",
    ),
    # Before cuda_oom: a graph capture that failed on a JIT build also suggests lowering the memory fraction.
    # A JIT build that failed, or could not start because a build tool is not on the service's
    # PATH: subprocess's FileNotFoundError names the executable (`[Errno 2] No such file or
    # directory: 'ninja'`), and the wrapper exceptions above it repeat that message.
    _r(
        "jit_build_failed",
        r"Ninja build failed|^ninja: error: |^nvcc fatal|nvcc: (?:command )?not found"
        r"|Error building extension|CalledProcessError: Command '\['ninja'"
        r"|No such file or directory: '(?:\S*/)?(?:" + _BUILD_TOOLS + r")'"
        r"|Ninja is required to load C\+\+ extensions|Failed to find C compiler",
        True,
        _JIT_HINT,
        "raised",
        "SGLang 0.5.16 run (H200, flashinfer 0.6.14 without its data/); a flashinfer JIT without ninja "
        "on PATH (constructed, issue #28); torch cpp_extension and triton source",
    ),
    # A rank's CUDA device index past the GPUs the process can see: torch.cuda.set_device fails
    # (`CUDA error: invalid device ordinal`, cudaErrorInvalidDevice = 101).
    _r(
        "gpu_unavailable",
        r"invalid device ordinal|cudaErrorInvalidDevice\b|CUDA_ERROR_INVALID_DEVICE"
        r"|GPU device may be out of range",
        True,
        _GPU_HINT,
        "logged",
        "SGLang issue reports (#3470, #6455: RuntimeError / torch.AcceleratorError); tp 2 on a one-GPU "
        "host (constructed, issue #28)",
    ),
    # vLLM: the GPU's free memory is below --gpu-memory-utilization x total before anything loads.
    _r(
        "cuda_oom",
        r"on startup is less than desired GPU memory utilization",
        True,
        "vLLM: the GPU is not free enough for --gpu-memory-utilization (another process holds memory)",
        "raised",
        "vLLM 0.32.0 source",
    ),
    # Before the generic row: torch's message names what its caching allocator holds but does not
    # use; a GiB or more of it is fragmentation the allocator's own setting returns.
    _r(
        "cuda_oom",
        r"OutOfMemoryError: CUDA out of memory.* [1-9][0-9]*(\.[0-9]+)? GiB is reserved by PyTorch but unallocated",
        True,
        "a GPU ran out of memory with a GiB or more reserved by PyTorch but unallocated: the caching "
        "allocator's free fragments (SGLang's MXFP4 weight swizzle leaves them on Hopper); "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True in the layout's env returns them",
        "raised",
        "SGLang 0.5.16 run (H100, gpt-oss-120b with PyTorch's default allocator, 5.27 GiB unallocated); torch 2.11",
    ),
    _r(
        "cuda_oom",
        r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|cudaErrorMemoryAllocation",
        True,
        "a GPU ran out of memory (weights or activations do not fit this layout)",
        "raised",
        "SGLang 0.5.16 run (H200, while constructing MoE weights); torch 2.11",
    ),
    _r(
        "nccl_timeout",
        r"Watchdog caught collective operation timeout"
        r"|NCCL (?:communicator|operation).*(?:timed out|timeout)"
        r"|DistStoreError: .*[Tt]imed out|Socket Timeout|ncclSystemError|NCCL error",
        True,
        "a collective or the distributed rendezvous timed out (NCCL, P2P, --dist-timeout)",
        "logged",
        "torch 2.x source (ProcessGroupNCCL); SGLang issue reports",
    ),
    _r(
        "nccl_timeout",
        r"Scheduler watchdog timeout",
        True,
        "a forward batch hung longer than --watchdog-timeout (usually a stuck collective)",
        "logged",
        "SGLang 0.5.10.post1 source",
    ),
    _r(
        "port_in_use",
        r"[Aa]ddress already in use|\[Errno 98\]|[Pp]ort \d+ is (?:already )?in use",
        True,
        "the port is taken by another process",
        "logged",
        "uvicorn (SGLang 0.5.x and vLLM 0.32.0)",
    ),
    _r(
        "bad_args",
        r"(?:^|: )error: (?:unrecognized arguments|ambiguous option|argument |the following arguments are required"
        r"|invalid choice)",
        True,
        "SGLang's argument parser rejected the command line",
        "logged",
        "argparse of SGLang 0.5.10.post1, 0.5.16 and 0.5.23",
    ),
    # vLLM's config validation (pydantic): e.g. --max-model-len above the model's.
    _r(
        "bad_args",
        r"User-specified max_model_len \(|ValidationError: \d+ validation errors? for \w*Config",
        True,
        "vLLM rejected the configuration (the next line says which value)",
        "logged",
        "vLLM 0.32.0 CPU run",
    ),
    # vLLM given a local model path that does not exist takes it for a Hub repo id.
    _r(
        "model_not_found",
        r"HFValidationError: Repo id must be|Repo id must use alphanumeric chars"
        r"|RepositoryNotFoundError|LocalEntryNotFoundError|OfflineModeIsEnabled",
        True,
        "the model path does not exist on the host (or is not a model folder), so it was taken for a Hub repo id",
        "raised",
        "vLLM 0.32.0 CPU run; huggingface_hub 1.x",
    ),
    # A pd server whose transfer backend's package does not import (SGLang raises this when its KV
    # manager starts, after the weights and the KV pool; the chained cause above it names the file).
    _r(
        "import_error",
        r"Please install (?:mooncake|NIXL) by following the instructions",
        True,
        "the pd layout's transfer backend does not import in the SGLang venv: install its package there "
        "(mooncake, mooncake_tcp: mooncake-transfer-engine, which also needs libibverbs, libnuma and CUDA "
        "12's runtime on the host; nixl: nixl) or name another pd.transfer_backend",
        "raised",
        "SGLang 0.5.16 source (mooncake_transfer_engine.py, disaggregation/nixl/conn.py)",
    ),
    _r(
        "import_error",
        r"^(?:[\w.]+\.)?(?:ModuleNotFoundError|ImportError): |No module named |cannot open shared object file",
        True,
        "the engine cannot be imported (venv, a missing wheel, CUDA libraries)",
        "raised",
        "SGLang 0.5.16 and vLLM 0.32.0; the interpreter's own `python: No module named X`",
    ),
    # systemd cannot exec the unit's binary.
    _r(
        "import_error",
        r"Failed to locate executable|Failed at step EXEC",
        True,
        "the unit's executable could not be started (is the venv there?)",
        "logged",
        "systemd 252",
    ),
    _r(
        "rank_died",
        r"Rank \d+ scheduler died during initialization|Subprocess \S+ \(pid=\d+\) crashed with exit code",
        True,
        "a scheduler rank died (exit -9 is usually the host's OOM killer: dmesg -T | grep -i oom)",
        "logged",
        "SGLang 0.5.16 run (H200; exit code -15 on a SIGTERM stop); 0.5.10.post1 source",
    ),
    _r(
        "crashed",
        r"peer access is not supported between these two devices",
        True,
        "GPUs without P2P: add --disable-custom-all-reduce or --enable-p2p-check",
        "logged",
        "SGLang issue reports (CUDART, PCIe hosts)",
    ),
    _r(
        "crashed",
        r"The memory capacity is unbalanced",
        True,
        "GPU memory differs between ranks: another process holds a GPU",
        "logged",
        "SGLang 0.5.10.post1 source",
    ),
    _r(
        "crashed",
        r"Initialization failed\. warmup error",
        True,
        "the warmup request failed",
        "logged",
        "SGLang 0.5.10.post1 source",
    ),
    # vLLM: the engine core died while serving; the API server then exits 0 (docs/vllm.md).
    # (EngineDeadError alone is generic: a normal SIGTERM stop can log it too, below.)
    _r(
        "crashed",
        r"engine core exited unexpectedly",
        True,
        "vLLM's engine core died (the API server exits with status 0 after it): see the lines above for why",
        "logged",
        "vLLM 0.32.0 CPU run",
    ),
    _r(
        "crashed",
        r"Unsupported CPU attention configuration",
        True,
        "vLLM's CPU attention does not support this head_dim",
        "raised",
        "vLLM 0.32.0 CPU run",
    ),
    # Prefill/decode disaggregation: a request failed between a prefill and a decode server (the
    # servers live on; sglang/srt/disaggregation/prefill.py, decode.py, mooncake/conn.py). The two
    # timeouts before the transfer error: their lines name KVTransferError as well.
    _r(
        "kv_bootstrap_timeout",
        r"timed out after [\d.]+s in KVPoll\.Bootstrapping|Some requests timed out when bootstrapping",
        True,
        "a prefill server waited SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT (300 s by default) for a decode "
        "server's handshake (its KV indices): the decode pool is full or the decode server cannot reach "
        "the prefill's bootstrap port; check the decode server's log and KV usage, the bootstrap port between "
        "the hosts, and raise the timeout (or add decode capacity) if a longer TTFT is acceptable",
        "logged",
        "SGLang 0.5.x source (disaggregation/prefill.py, mooncake/conn.py); issue reports (300 s under load)",
    ),
    _r(
        "kv_transfer_timeout",
        r"in KVPoll\.WaitingForInput|fail to receive KV Cache transfer done signal",
        True,
        "a decode server waited SGLANG_DISAGGREGATION_WAITING_TIMEOUT (300 s by default) for a request's KV: "
        "the transfer backend is stuck or slow (mooncake/nixl: the IB device, --disaggregation-ib-device; "
        "NIXL needs UCX_NET_DEVICES; a first UCX transfer can take ~38 s) or the prefill server gave the "
        "request up (its log says why)",
        "logged",
        "SGLang 0.5.x source (disaggregation/decode.py, mooncake/conn.py); issue reports",
    ),
    _r(
        "kv_transfer_failed",
        r"(?:Prefill|Decode) transfer failed for request|Prefill bootstrap failed for request"
        r"|KVTransferError|Transfer thread failed",
        True,
        "a KV transfer between a prefill and a decode server failed: the peer died or its transfer "
        "session dropped (`remote mooncake session ... is not alive`, `Failed to get kvcache from prefill "
        "instance`); check the other role's log, the transfer backend and the IB device",
        "logged",
        "SGLang 0.5.x source (disaggregation/prefill.py, decode.py); issue reports",
    ),
    # Generic: something failed, the cause may follow.
    _r(
        "crashed",
        r"Scheduler hit an exception|Received sigquit from a child process|SIGQUIT received"
        r"|Traceback \(most recent call last\)|Segmentation fault|core dumped|Fatal Python error",
        False,
        "the engine failed",
        "logged",
        "SGLang 0.5.16 run (H200); 0.5.10.post1 source",
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
        "logged",
        "vLLM 0.32.0 CPU run",
    ),
)


@dataclass(frozen=True)
class Match:
    cls: str
    line: str
    definitive: bool
    hint: str
    priority: int
    raised: bool = False  # the line is (part of) an exception as Python prints it


# The generic row a traceback's exception line falls back to when no rule names its cause.
_GENERIC = next(i for i, rule in enumerate(RULES) if rule.pattern.search("Scheduler hit an exception"))
_EXCEPTION_HINT = "the engine failed: the evidence is the exception that ended its traceback"


def classify_line(line: str, handled: bool = False, raised: bool | None = None) -> Match | None:
    """The class of one log line, or None for a line that is not fatal.

    handled: the line belongs to a traceback a live server announced as handled (a raised
    exception there is only generic). raised: the line belongs to a raised exception's message
    (default: the line itself looks like one)."""
    if not line:
        return None
    body = body_of(line.rstrip("\n"))
    if raised is None:
        raised = is_raised(body)
    for i, rule in enumerate(RULES):
        if rule.scope == "raised" and not raised:
            continue
        if rule.pattern.search(body):
            return Match(
                rule.cls,
                line.rstrip("\n"),
                rule.definitive and not (handled and raised),
                rule.hint,
                i,
                raised,
            )
    return None


def best(a: Match | None, b: Match | None) -> Match | None:
    """The more specific of two matches: the earlier rule wins. Within one rule a raised exception
    beats the line that announced it, the final exception of a chain beats the earlier generic
    ones, and otherwise the first line stays."""
    if a is None:
        return b
    if b is None:
        return a
    if b.priority != a.priority:
        return b if b.priority < a.priority else a
    if b.raised and (not a.raised or not b.definitive):
        return b
    return a


def _continues_traceback(body: str) -> bool:
    """A traceback line that a per-line prefix (vLLM's, Ray's) does not end: a frame, a chain marker,
    a new header, a blank line."""
    return not body.strip() or body[:1].isspace() or bool(_CHAIN.match(body) or _TRACEBACK.search(body))


class LogClassifier:
    """Reads an engine's log line by line, keeping what a single line cannot know: whether a
    traceback is open (and then whether a live server announced it as handled), and whether a stop
    was requested.

    A traceback opens at its header and stays open through its frames, its exception line, that
    exception's message and any chained traceback; a line that starts a new log record ends it, or
    the caller does (end_traceback: the process exited, or no line came for a quiet period). While
    it is open the verdict waits: `traceback_open`.

    stop_requested: the caller asked for a stop: from the engine's first stop line on (SGLang's
    SIGTERM drain), nothing classifies. The supervisor's and systemd's stop lines prove the request
    by themselves (`stopping` is then set, for classify_exit)."""

    def __init__(self, stop_requested: bool = False):
        self.stop_requested = stop_requested
        self.stopping = False
        self.found: Match | None = None
        self._handled = False
        # None | "frames" (header seen) | "message" (its exception line seen) | "chain" (between two)
        self._tb: str | None = None
        self.exception_line: str | None = None  # the newest traceback's exception line (for timing)

    @property
    def traceback_open(self) -> bool:
        return self._tb is not None

    def snapshot(self) -> dict:
        """What a later reader needs to go on where this one stopped (plain, JSON-able values)."""
        return {
            "found": self.found.__dict__ if self.found else None,
            "traceback": self._tb,
            "handled": self._handled,
            "exception_line": self.exception_line,
            "stopping": self.stopping,
        }

    def restore(self, snap: dict) -> None:
        """Go on from a snapshot (a traceback open across two slices of the gate stays open)."""
        self.found = Match(**snap["found"]) if snap.get("found") else None
        self._tb = snap.get("traceback")
        self._handled = bool(snap.get("handled"))
        self.exception_line = snap.get("exception_line")
        self.stopping = bool(snap.get("stopping"))

    def end_traceback(self) -> None:
        """No more of the open traceback will come (the process exited, or the log went quiet)."""
        self._tb = None
        self._handled = False

    def feed(self, line: str) -> Match | None:
        """The line's match (None: not fatal), folding it into `found`."""
        if self.stopping:
            return None
        body = body_of(line)
        if _STOP_REQUESTS.search(body) or (self.stop_requested and _STOP_LINES.search(body)):
            self.stopping = True
            return None
        if self._tb == "message" and starts_record(line) and not _continues_traceback(body):
            self.end_traceback()  # the next record: the exception's message is complete
        if _HANDLED.search(body):
            self._handled = True
            return None
        if _TRACEBACK.search(body):
            if self._tb == "message":  # a new traceback, not a chained one
                self.end_traceback()
            m = classify_line(line, handled=self._handled)
            self._tb = "frames"
        elif self._tb in ("frames", "chain") and self._is_exception_line(line, body):
            m = classify_line(line, handled=self._handled)
            # The exception says what happened even when no rule names its cause.
            m = best(m, Match("crashed", line, False, _EXCEPTION_HINT, _GENERIC, is_raised(body)))
            self._tb = "message"
            self.exception_line = line
        elif self._tb == "message" and _CHAIN.match(body):
            m = None
            self._tb = "chain"
        elif self._tb == "message":
            # A line of the exception's message (`ninja: error: ...`, torch's CUDA notes): raised too.
            m = classify_line(line, handled=self._handled, raised=True)
        else:
            m = classify_line(line, handled=self._handled)
        self.found = best(self.found, m)
        return m

    @staticmethod
    def _is_exception_line(line: str, body: str) -> bool:
        """The line that ends a traceback's frames: at column 0, and no other process's log record."""
        if not body.strip() or body[:1].isspace():
            return False
        return is_raised(body) or not starts_record(line)


def classify(lines, stop_requested: bool = False) -> Match | None:
    """The most specific failure among `lines` (an iterable of str), or None."""
    c = LogClassifier(stop_requested)
    for line in lines:
        c.feed(line)
    return c.found


def classify_exit(
    exit_code: int | None,
    signal_name: str | None = None,
    engine: str = "sglang",
    stop_requested: bool = False,
) -> tuple[str, str] | None:
    """The class of a process exit without a fatal log line: (class, hint), or None for the end
    of a stop the caller asked for.

    Any exit the gate did not ask for is a failure, status 0 included: vLLM's API server exits 0
    when its engine core dies (engines.py: exit_zero_hint)."""
    if stop_requested and (
        exit_code in (0, 137, -15, -9, 143) or signal_name in ("TERM", "SIGTERM", "KILL", "SIGKILL", "QUIT")
    ):
        return None  # SGLang ends a SIGTERM stop by SIGKILLing itself (137)
    if exit_code == 203:  # systemd's status=203/EXEC: ExecStart's binary is missing
        return "import_error", "the unit's executable could not be started (203/EXEC): is the venv there?"
    if exit_code == 2 and not signal_name:
        return "bad_args", "exit status 2 is argparse's usage error"
    if signal_name in ("KILL", "SIGKILL") or exit_code in (-9, 137):
        return "crashed", "killed by SIGKILL (SGLang kills itself after a child failure; or the OOM killer)"
    hint = engines.engine(engine).exit_zero_hint
    if exit_code == 0 and not signal_name and hint:
        return "crashed", hint
    return "crashed", "the engine exited"


def is_ready_line(line: str) -> bool:
    return any(ready in line for ready in READY_LINES)


KV_TOKENS = re.compile(r"(?:GPU|CPU|XPU|TPU|HPU)? ?KV cache size: ([0-9][0-9,_]*) tokens")


def kv_tokens(line: str) -> int | None:
    """vLLM's KV capacity from its start-up line `GPU KV cache size: 2,097,152 tokens, ...` (or CPU ...)."""
    m = KV_TOKENS.search(line)
    return int(m.group(1).replace(",", "").replace("_", "")) if m else None


# ---------------------------------------------------------------- start-up phases

# SGLang's start-up, in order; the gate shows the newest phase while it waits. Seen in 0.5.16 (H200 runs).
PHASES: tuple[tuple[str, re.Pattern], ...] = tuple(
    (name, re.compile(p))
    for name, p in (
        ("starting", r"server_args=ServerArgs\(|Init torch distributed begin"),
        ("loading weights", r"Load weight begin"),
        ("weights loaded", r"Load weight end"),
        ("KV cache allocated", r"KV Cache is allocated|KV cache size: "),
        ("capturing CUDA graphs", r"Capture (?:\w+ )*cuda graph begin|Capture (?:\w+ )*CUDA graph begin"),
        (
            "JIT compiling kernels",
            r"Entering DeepGEMM JIT|[Cc]ompiling (?:kernel|module|JIT)|jit_kernel|ninja -v",
        ),
        ("CUDA graphs captured", r"Capture (?:\w+ )*(?:cuda|CUDA) graph end"),
        ("HTTP server up", r"Uvicorn running on|Application startup complete"),
        ("warming up", r"Started server process|Waiting for application startup"),
        ("ready", re.escape(READY_LINE)),
    )
)


def phase_of(line: str) -> str | None:
    """The start-up phase a line announces, or None."""
    for name, pattern in PHASES:
        if pattern.search(line):
            return name
    return None


# Figures SGLang logs while it starts (its "GB" are GiB: it divides by 1 << 30). Per rank; the gate keeps
# the largest. Seen in 0.5.16 (H200 runs).
_FIGURES = (
    ("weights_gib", re.compile(r"Load weight end\..*mem usage=([0-9.]+) GB")),
    ("kv_tokens", re.compile(r"max_total_num_tokens=([0-9]+)")),
    ("cuda_graph_gib", re.compile(r"Capture (?:\w+ )*(?:cuda|CUDA) graph end\..*mem usage=([0-9.]+) GB")),
    ("avail_gib_before_load", re.compile(r"Load weight begin\. avail mem=([0-9.]+) GB")),
    # the pools beside the KV pool: hybrid sliding-window models, hybrid linear-attention models
    (
        "swa_tokens",
        re.compile(r"Use sliding window memory pool\. full_layer_tokens=[0-9]+, swa_layer_tokens=([0-9]+)"),
    ),
    ("state_slots", re.compile(r"Mamba Cache is allocated\. max_mamba_cache_size: ([0-9]+)")),
)
_COUNTS = ("kv_tokens", "swa_tokens", "state_slots")
# Lines whose presence is the figure (1): SGLang's fused MoE found no tuned Triton config for the
# expert shape, GPU and dtype and runs its default one (moe_runner/triton_utils; seen in 0.5.16 on the
# H200 for every MoE model without a shipped config file, each then slower than the speed model).
_MARKS = (("moe_default_config", re.compile(r"Using default MoE kernel config\.")),)


def startup_figures(line: str) -> dict:
    """{name: value} of the start-up figures one line logs (weights GiB, KV tokens, graph GiB, the
    sliding-window tokens or linear-attention state requests of a hybrid pool, and 1 for a mark such as
    moe_default_config)."""
    out = {}
    for name, pattern in _FIGURES:
        m = pattern.search(line)
        if m:
            out[name] = int(m.group(1)) if name in _COUNTS else float(m.group(1))
    for name, pattern in _MARKS:
        if pattern.search(line):
            out[name] = 1
    return out
