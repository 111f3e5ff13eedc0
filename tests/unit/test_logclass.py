"""The log classifier on SGLang's real log lines (docs/sglang.md 3.3-3.5, 6.1, 7).

Every fatal class has its real line; the lines that look alarming but are not
fatal must not classify; across a traceback the specific line beats the generic one.
"""

import pytest
from sglang_layouts.gate import logclass

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
    # jit_build_failed: a build tool the JIT runs is not on PATH (subprocess names it), or the build failed
    ("FileNotFoundError: [Errno 2] No such file or directory: 'ninja'", "jit_build_failed"),
    (
        "FileNotFoundError: [Errno 2] No such file or directory: '/usr/local/cuda/bin/nvcc'",
        "jit_build_failed",
    ),
    ("FileNotFoundError: [Errno 2] No such file or directory: 'c++'", "jit_build_failed"),
    (
        "Exception: Capture cuda graph failed: [Errno 2] No such file or directory: 'ninja'",
        "jit_build_failed",
    ),
    ("RuntimeError: Ninja is required to load C++ extensions", "jit_build_failed"),
    (
        "RuntimeError: Failed to find C compiler. Please specify via CC environment variable.",
        "jit_build_failed",
    ),
    # gpu_unavailable: a rank's device index past the visible GPUs (torch >= 2.8 and older, the C++ check)
    ("torch.AcceleratorError: CUDA error: invalid device ordinal", "gpu_unavailable"),
    ("RuntimeError: CUDA error: invalid device ordinal", "gpu_unavailable"),
    (
        "THCudaCheck FAIL file=/opt/conda/conda-bld/pytorch/work/torch/csrc/cuda/Module.cpp line=59 error=101 : "
        "invalid device ordinal",
        "gpu_unavailable",
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
    # prefill/decode disaggregation: real lines from SGLang issue reports (0.5.8-0.5.12, mooncake/nixl)
    (
        "[2026-02-19 16:33:31 TP0] Prefill bootstrap failed for request rank=0 req.rid='be001b94bbc848f2b1aa71e1e2b70aa8' "
        "req.bootstrap_room=2148295886124306552 with exception KVTransferError(bootstrap_room=2148295886124306552): "
        "Request 2148295886124306552 timed out after 300.0s in KVPoll.Bootstrapping",
        "kv_bootstrap_timeout",
    ),
    (
        "[2026-02-27 15:01:51 TP3] Decode transfer failed for request rank=3 decode_req.req.rid='63b1b22dad53465b92560ebdda56d075' "
        "decode_req.req.bootstrap_room=6593551520068383758 with exception KVTransferError(bootstrap_room=6593551520068383758): "
        "Request 6593551520068383758 timed out after 1800.0s in KVPoll.WaitingForInput",
        "kv_transfer_timeout",
    ),
    (
        "[2026-02-26 16:00:13 TP10] Prefill transfer failed for request rank=10 req.rid='05d7da4356e3481b93e3312fa7397608' "
        "req.bootstrap_room=887504041590801090 with exception KVTransferError(bootstrap_room=887504041590801090): Decode "
        "instance could be dead, remote mooncake session 10.99.91.35:16581 is not alive",
        "kv_transfer_failed",
    ),
    (
        "[2026-02-27 15:01:51 TP5] Decode transfer failed for request rank=5 decode_req.req.rid='63b1b22dad53465b92560ebdda56d075' "
        "decode_req.req.bootstrap_room=6593551520068383758 with exception KVTransferError(bootstrap_room=6593551520068383758): "
        "Failed to get kvcache from prefill instance, it might be dead",
        "kv_transfer_failed",
    ),
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
    # a missing file that is no build tool: not a JIT failure (and outside a traceback, nothing)
    "FileNotFoundError: [Errno 2] No such file or directory: '/models/kimi/config.json'",
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


# A scheduler's traceback as SGLang 0.5.16 logs it: one record, its first line stamped.
TB = [
    PREFIX + "Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/tmp/site/flashinfer/jit/cpp_ext.py", line 368, in run_ninja',
    "    subprocess.run(",
    '  File "/usr/lib/python3.12/subprocess.py", line 1955, in _execute_child',
    "    raise child_exception_type(errno_num, err_msg, err_filename)",
    "FileNotFoundError: [Errno 2] No such file or directory: 'ninja'",
    "",
    "During handling of the above exception, another exception occurred:",
    "",
    "Traceback (most recent call last):",
    '  File "/tmp/site/sglang/srt/managers/scheduler.py", line 4623, in run_scheduler_process',
    "    scheduler = Scheduler(",
    "Exception: Capture cuda graph failed: [Errno 2] No such file or directory: 'ninja'",
    "Possible solutions:",
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)",
    "",
]
SIGQUIT = "[2026-11-29 10:00:00] Received sigquit from a child process. It usually means the child failed."


def _open_after(lines):
    c = logclass.LogClassifier()
    for line in lines:
        c.feed(line)
    return c


def test_a_traceback_is_open_from_its_header_through_its_chain_until_the_next_record():
    c = logclass.LogClassifier()
    c.feed(TB[0])
    # the header decides nothing: generic, and the traceback is open
    assert c.traceback_open and not c.found.definitive
    for line in TB[1:]:
        c.feed(line)
        assert c.traceback_open, line
    assert c.found.cls == "jit_build_failed"
    assert c.found.line == "FileNotFoundError: [Errno 2] No such file or directory: 'ninja'"
    assert c.exception_line.startswith("Exception: Capture cuda graph failed")
    c.feed(SIGQUIT)
    assert not c.traceback_open
    assert c.found.cls == "jit_build_failed"


def test_an_exception_no_rule_knows_is_the_evidence_not_the_header():
    c = _open_after(
        [
            PREFIX + "Scheduler hit an exception: Traceback (most recent call last):",
            '  File "/tmp/site/sglang/srt/managers/scheduler.py", line 4623, in run_scheduler_process',
            "KeyError: 'model.layers.0.mlp.gate_proj.weight'",
            "",
            SIGQUIT,
        ]
    )
    assert c.found.cls == "crashed" and not c.found.definitive
    assert c.found.line == "KeyError: 'model.layers.0.mlp.gate_proj.weight'"
    assert not c.traceback_open


def test_the_final_exception_of_a_generic_chain_is_the_evidence():
    c = _open_after(
        [
            "Traceback (most recent call last):",
            '  File "a.py", line 1, in f',
            "KeyError: 'x'",
            "",
            "The above exception was the direct cause of the following exception:",
            "",
            "Traceback (most recent call last):",
            '  File "b.py", line 2, in g',
            "ValueError: the checkpoint has no tensor 'x'",
        ]
    )
    assert c.found.line == "ValueError: the checkpoint has no tensor 'x'"
    assert c.traceback_open  # nothing says it ended yet: the caller ends it (exit, quiet period)
    c.end_traceback()
    assert not c.traceback_open


def test_another_ranks_record_inside_the_frames_does_not_end_the_traceback():
    c = _open_after(
        [
            "[2026-11-29 10:00:00 TP1] Scheduler hit an exception: Traceback (most recent call last):",
            '  File "/tmp/site/torch/cuda/__init__.py", line 578, in set_device',
            "[2026-11-29 10:00:00 TP0] Init torch distributed begin.",
            "    torch._C._cuda_setDevice(device)",
        ]
    )
    assert c.traceback_open and not c.found.definitive
    c.feed("torch.AcceleratorError: CUDA error: invalid device ordinal")
    c.feed("GPU device may be out of range, do you have enough GPUs?")
    assert c.found.cls == "gpu_unavailable"
    assert c.found.line == "torch.AcceleratorError: CUDA error: invalid device ordinal"


def test_a_traceback_with_a_prefix_on_every_line_ends_at_the_next_record():
    # vLLM (and Ray) prefix every line of a multi-line record.
    p = "(EngineCore_DP0 pid=5738) ERROR 11-29 15:43:15 [core.py:1510] "
    c = _open_after(
        [
            p + "EngineCore failed to start.",
            p + "Traceback (most recent call last):",
            p
            + '  File "/venv/lib/python3.12/site-packages/vllm/v1/engine/core.py", line 1501, in run_engine_core',
            p + "    engine_core = EngineCoreProc(*args, **kwargs)",
            p + "torch.AcceleratorError: CUDA error: invalid device ordinal",
        ]
    )
    assert c.traceback_open and c.found.cls == "gpu_unavailable"
    c.feed("(APIServer pid=5600) ERROR 11-29 15:43:16 [serve.py:80] Engine core initialization failed.")
    assert not c.traceback_open
    assert c.found.cls == "gpu_unavailable"


def test_a_handled_traceback_stays_generic_through_its_chain():
    c = _open_after(
        [
            "[2026-11-29 10:00:00] ERROR:    Exception in ASGI application",
            "Traceback (most recent call last):",
            '  File "a.py", line 1, in f',
            "FileNotFoundError: [Errno 2] No such file or directory: 'ninja'",
            "",
            "During handling of the above exception, another exception occurred:",
            "",
            "Traceback (most recent call last):",
            '  File "b.py", line 2, in g',
            "RuntimeError: CUDA error: invalid device ordinal",
        ]
    )
    assert not c.found.definitive


def test_a_snapshot_taken_inside_a_traceback_goes_on_where_it_stopped():
    # The gate runs in slices; one may end in the middle of a traceback.
    first = _open_after(TB[:4])
    second = logclass.LogClassifier()
    second.restore(first.snapshot())
    assert second.traceback_open
    for line in [*TB[4:], SIGQUIT]:
        second.feed(line)
    whole = _open_after([*TB, SIGQUIT])
    assert second.found == whole.found and second.exception_line == whole.exception_line
    assert not second.traceback_open


def test_a_pd_transfer_backend_that_does_not_import_names_its_package():
    # SGLang 0.5.16 (mooncake_transfer_engine.py) raises this from the KV manager of a pd server
    line = (
        "ImportError: Please install mooncake by following the instructions at "
        "https://kvcache-ai.github.io/Mooncake/getting_started/build.html to run SGLang with MooncakeTransferEngine."
    )
    m = logclass.classify_line(line)
    assert m is not None and m.cls == "import_error", m
    assert "mooncake-transfer-engine" in m.hint and "pd.transfer_backend" in m.hint, m.hint
