"""The log classifier on SGLang's real log lines (docs/sglang.md 3.3-3.5, 6.1, 7).

Every fatal class has its real line; the lines that look alarming but are not
fatal must not classify; across a traceback the specific line beats the generic one.
"""

import pytest
from sglang_layouts import logclass

PREFIX = "[2026-11-29 10:00:00 TP3] "

FATAL = [
    # kv_cache_no_memory: 0.5.10.post1 (model_runner_kv_cache_mixin.py) and the newest source
    (
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
        "Current value: mem_fraction_static=0.88",
        "kv_cache_no_memory",
    ),
    (
        "ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.88. "
        "Raise --mem-fraction-static above 0.93 (minimum viable = 1 - available/pre = 0.93).",
        "kv_cache_no_memory",
    ),
    # cuda_oom: torch's message inside a scheduler traceback
    (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.31 GiB. GPU 0 has a total capacity "
        "of 94.97 GiB of which 139.50 MiB is free.",
        "cuda_oom",
    ),
    ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB", "cuda_oom"),
    ("RuntimeError: CUDA error: out of memory", "cuda_oom"),
    # nccl_timeout: torch's NCCL watchdog (issue #3932) and SGLang's scheduler watchdog
    (
        "[rank3]:[E1129 10:00:00.000000000 ProcessGroupNCCL.cpp:632] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
        "600012 milliseconds before timing out.",
        "nccl_timeout",
    ),
    (PREFIX + "Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)", "nccl_timeout"),
    (
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275",
        "nccl_timeout",
    ),
    # rank_died: engine.py and the SubprocessWatchdog (PR #18582)
    (
        "RuntimeError: Rank 3 scheduler died during initialization (exit code: -9). If exit code is -9 "
        "(SIGKILL), a common cause is the OS OOM killer. Run `dmesg -T | grep -i oom` to check.",
        "rank_died",
    ),
    (
        "Subprocess scheduler_2 (pid=4242) crashed with exit code -6. Triggering SIGQUIT for cleanup...",
        "rank_died",
    ),
    # port_in_use: uvicorn's bind error
    (
        "ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 30000): address already in use",
        "port_in_use",
    ),
    ("OSError: [Errno 98] Address already in use", "port_in_use"),
    # bad_args: argparse, verified against 0.5.10.post1's parser (docs/sglang.md 1.2)
    ("launch_server.py: error: unrecognized arguments: --enable-ep-moe", "bad_args"),
    (
        "launch_server.py: error: ambiguous option: --pp could match --pp-size, --pp-max-micro-batch-size, "
        "--pp-async-batch-depth",
        "bad_args",
    ),
    ("launch_server.py: error: argument --tp-size: invalid int value: 'eight'", "bad_args"),
    # import_error: a broken venv or missing CUDA libraries; systemd's exec failure
    ("ModuleNotFoundError: No module named 'sglang'", "import_error"),
    ("/opt/sglang/venv/bin/python: No module named sglang.launch_server", "import_error"),
    (
        "ImportError: libcudart.so.13: cannot open shared object file: No such file or directory",
        "import_error",
    ),
    (
        "sglang-kimi-k2-6-ep8.service: Failed to locate executable /opt/sglang/venv/bin/python: "
        "No such file or directory",
        "import_error",
    ),
    # crashed: definitive causes outside the named classes, and the generic lines
    ("RuntimeError: CUDART error: peer access is not supported between these two devices", "crashed"),
    (
        "RuntimeError: The memory capacity is unbalanced. Some GPUs may be occupied by other processes. "
        "pre_model_load_memory=80.1, min_per_gpu_memory=60.2",
        "crashed",
    ),
    ("Initialization failed. warmup error: Traceback (most recent call last):", "crashed"),
    (PREFIX + "Scheduler hit an exception: Traceback (most recent call last):", "crashed"),
    ("Received sigquit from a child process. It usually means the child failed.", "crashed"),
]

BENIGN = [
    # start-up lines (docs/sglang.md 3.3)
    PREFIX + "Load weight begin. avail mem=94.47 GB",
    PREFIX
    + "Load weight end. elapsed=35.2 s, type=DeepseekV3ForCausalLM, avail mem=22.65 GB, mem usage=71.82 GB.",
    PREFIX + "KV Cache is allocated. #tokens: 172906, KV size: 11.32 GB",
    PREFIX + "Memory pool end. avail mem=10.21 GB",
    PREFIX + "Capture cuda graph begin. This can take up to several minutes. avail mem=10.10 GB",
    "Attention backend not specified. Use fa3 backend by default.",
    "The server is fired up and ready to roll!",
    # alarming but not fatal
    "CustomAllreduce is disabled because it's not supported on more than two PCIe-only GPUs. To silence this "
    "warning, specify disable_custom_all_reduce=True explicitly.",
    "Health check failed. Server couldn't get a response from detokenizer for last 20 seconds. tic start "
    "time: 10:00:00 last_heartbeat time: 09:59:30",
    PREFIX
    + "KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_token_ratio: 0.4567 -> 0.7000",
    "[W1129 10:00:00.000000000 ProcessGroupNCCL.cpp:1250] Warning: WARNING: process group has NOT been destroyed "
    "before we destruct ProcessGroupNCCL.",
    "Entering DeepGEMM JIT Pre-Compile session. It may take a long time (typically 10-20 mins) if you have not "
    "run `sglang.compile_deep_gemm`.",
    "WARNING registry.py:89: Ignore import error when loading sglang.srt.models.mllama4: No module named 'xyz'",
    "/opt/sglang/venv/lib/python3.11/site-packages/sglang/launch_server.py:12: UserWarning: 'python -m "
    "sglang.launch_server' is still supported, but 'sglang serve' is the recommended entry point.",
    "SIGTERM received. signum=15 frame=None. Draining requests and shutting down...",
    PREFIX + "Decode batch, #running-req: 64, #token: 8192, token usage: 0.05, cuda graph: True, gen "
    "throughput (token/s): 961.20, #queue-req: 0",
    PREFIX
    + "Prefill batch, #new-seq: 1, #new-token: 1024, #cached-token: 0, token usage: 0.01, #running-req: 0, "
    "#queue-req: 0",
    "",
]


@pytest.mark.parametrize(("line", "cls"), FATAL, ids=[c + ":" + line[:40] for line, c in FATAL])
def test_fatal_lines(line, cls):
    m = logclass.classify_line(line)
    assert m is not None, line
    assert m.cls == cls
    assert m.line == line
    assert m.cls in logclass.CLASSES


@pytest.mark.parametrize("line", BENIGN, ids=[line[:50] for line in BENIGN])
def test_alarming_but_not_fatal(line):
    assert logclass.classify_line(line) is None


def test_specific_line_beats_the_generic_announcement():
    # SGLang logs the exception header first; the cause comes at the end of the traceback.
    lines = [
        PREFIX + "Load weight begin. avail mem=94.47 GB",
        PREFIX + "Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/opt/sglang/venv/lib/python3.11/site-packages/sglang/srt/managers/scheduler.py", line 3612',
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.31 GiB.",
        "Received sigquit from a child process. It usually means the child failed.",
    ]
    m = logclass.classify(lines)
    assert m.cls == "cuda_oom"
    assert m.line.startswith("torch.OutOfMemoryError")
    assert m.definitive


def test_nccl_timeout_beats_the_watchdog_that_reports_the_dead_rank():
    lines = [
        "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE) ran for 600010 ms",
        "Subprocess scheduler_0 (pid=11) crashed with exit code -6. Triggering SIGQUIT for cleanup...",
    ]
    assert logclass.classify(lines).cls == "nccl_timeout"


def test_generic_lines_are_not_definitive():
    m = logclass.classify_line("Traceback (most recent call last):")
    assert m.cls == "crashed"
    assert not m.definitive


def test_nothing_fatal():
    assert logclass.classify(BENIGN) is None


@pytest.mark.parametrize(
    ("code", "sig", "cls"),
    [
        (203, None, "import_error"),
        (2, None, "bad_args"),
        (None, "KILL", "crashed"),
        (1, None, "crashed"),
    ],
)
def test_exit_without_a_fatal_line(code, sig, cls):
    assert logclass.classify_exit(code, sig)[0] == cls


def test_ready_line():
    assert logclass.is_ready_line("[2026-11-29 10:00:00] The server is fired up and ready to roll!")
