"""Tracebacks and exit paths shaped like SGLang's (docs/sglang.md 3.4, 3.5).

Frames name SGLang's real files and functions; line numbers are illustrative.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

MIB = 1 << 20
GIB = 1 << 30

_PY = f"python{sys.version_info.major}.{sys.version_info.minor}"
SITE = os.environ.get("SGLANG_SIM_SITE_PACKAGES", f"/opt/sglang/venv/lib/{_PY}/site-packages")


def format_size(nbytes: float) -> str:
    """torch's format_size (c10/cuda/CUDACachingAllocator.cpp)."""
    if nbytes <= 1024:
        return f"{int(nbytes)} bytes"
    if nbytes < MIB:
        return f"{nbytes / 1024:.2f} KiB"
    if nbytes < GIB:
        return f"{nbytes / MIB:.2f} MiB"
    return f"{nbytes / GIB:.2f} GiB"


def _frame(path: str, line: int, func: str, code: str) -> str:
    return f'  File "{SITE}/{path}", line {line}, in {func}\n    {code}\n'


def stack(table: str) -> str:
    """Frames written one a line as `path:line function | code` (path under SITE), innermost last:
    a table reads like the traceback it prints, and every stack shares this one formatter."""
    out = []
    for row in table.strip().splitlines():
        where, _bar, code = row.partition("|")
        path_line, func = where.split()
        path, line = path_line.rsplit(":", 1)
        out.append(_frame(path, int(line), func, code.strip()))
    return "".join(out)


def traceback(frames: str, exc: str) -> str:
    return "Traceback (most recent call last):\n" + frames + exc


_SCHED_INIT = stack(
    """
sglang/srt/managers/scheduler.py:3612 run_scheduler_process | scheduler = Scheduler(
sglang/srt/managers/scheduler.py:368 __init__ | self.init_model_worker()
sglang/srt/managers/scheduler.py:561 init_model_worker | self.tp_worker = TpModelWorker(
sglang/srt/managers/tp_worker.py:246 __init__ | self._model_runner = ModelRunner(
sglang/srt/model_executor/model_runner.py:359 __init__ | self.initialize(min_per_gpu_memory)
"""
)
_LOAD_MODEL = stack(
    """
sglang/srt/model_executor/model_runner.py:445 initialize | self.load_model()
sglang/srt/model_executor/model_runner.py:915 load_model | self.model = get_model(
"""
)
_FROZEN_RUNPY = (
    '  File "<frozen runpy>", line 198, in _run_module_as_main\n'
    '  File "<frozen runpy>", line 88, in _run_code\n'
)


def oom_figures(seq, capacity_gib: float, non_torch_gib: float):
    """Walk the planner's allocation sequence until one tensor does not fit.

    Returns (tensor_name, tried_bytes, allocated_bytes, free_bytes, reserved_unallocated)
    or None if everything fits. Large blocks are rounded to 2 MiB like the caching allocator.
    """
    cap = capacity_gib * GIB
    base = non_torch_gib * GIB
    allocated = 0
    for name, nbytes in seq:
        block = -(-int(nbytes) // (2 * MIB)) * (2 * MIB) if nbytes > MIB else -(-int(nbytes) // 512) * 512
        if base + allocated + block > cap:
            left = max(0.0, cap - base - allocated)
            reserved = min(left * 0.5, 12.5 * MIB)
            return name, int(nbytes), allocated, left - reserved, reserved
        allocated += block
    return None


def oom_traceback(
    *, name: str, tried: int, gpu: int, capacity_gib: float, free: float, allocated: float, reserved: float
) -> str:
    in_use = capacity_gib * GIB - free
    msg = (
        f"CUDA out of memory. Tried to allocate {format_size(tried)}. GPU {gpu} has a total capacity of "
        f"{format_size(capacity_gib * GIB)} of which {format_size(free)} is free. Including non-PyTorch "
        f"memory, this process has {format_size(in_use)} memory in use. Of the allocated memory "
        f"{format_size(allocated)} is allocated by PyTorch, and {format_size(reserved)} is reserved by "
        "PyTorch but unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
        "Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )
    param = name.rsplit(".", 1)[-1]
    frames = stack(
        f"""
sglang/srt/model_loader/__init__.py:28 get_model | return loader.load_model(
sglang/srt/model_loader/loader.py:594 load_model | model = _initialize_model(
sglang/srt/model_loader/loader.py:262 _initialize_model | return model_class(**kwargs)
sglang/srt/layers/moe/fused_moe_triton/layer.py:262 __init__ | self.quant_method.create_weights(
sglang/srt/layers/quantization/compressed_tensors/compressed_tensors_moe.py:178 create_weights | {param} = torch.nn.Parameter(
torch/utils/_device.py:104 __torch_function__ | return func(*args, **kwargs)
"""
    )
    return traceback(_SCHED_INIT + _LOAD_MODEL + frames, f"torch.OutOfMemoryError: {msg}")


def kv_no_memory_traceback(mem_fraction_static) -> str:
    msg = "Not enough memory. Please try to increase --mem-fraction-static."
    if mem_fraction_static is not None:
        msg += f" Current value: mem_fraction_static={mem_fraction_static}"
    frames = stack(
        """
sglang/srt/model_executor/model_runner.py:470 initialize | self.init_memory_pool(
sglang/srt/model_executor/model_runner_kv_cache_mixin.py:212 init_memory_pool | pool_config = self.kv_cache_configurator.configure(
<string>:14 __init__ |
sglang/srt/model_executor/pool_configurator.py:99 __post_init__ | raise RuntimeError(msg)
"""
    )
    return traceback(_SCHED_INIT + frames, f"RuntimeError: {msg}")


def zero_division_tracebacks(n_ranks: int) -> list[str]:
    """ep > tp on SGLang 0.5.23: every scheduler child dies deriving its MoE ranks (before any
    rank log line), then the main process reports the dead rank and exits 1."""
    mp = f"/usr/lib/{_PY}/multiprocessing/process.py"
    child = traceback(
        f'  File "{mp}", line 314, in _bootstrap\n    self.run()\n'
        f'  File "{mp}", line 108, in run\n    self._target(*self._args, **self._kwargs)\n'
        + stack(
            """
sglang/srt/managers/scheduler.py:6327 run_scheduler_process | publish(
sglang/srt/runtime_context.py:1515 publish | return _configure_context(_CONTEXT, server_args, role=role, ranks=ranks)
sglang/srt/runtime_context.py:1575 _configure_context | placement = derive_spawn_ranks(
sglang/srt/runtime_context.py:131 derive_spawn_ranks | // (tp_size // moe_dp_size // moe_ep_size)
"""
        ),
        "ZeroDivisionError: integer division or modulo by zero",
    )
    out = [f"Process SpawnProcess-{i + 1}:\n{child}" for i in range(max(1, n_ranks))]
    main = stack(
        """
sglang/launch_server.py:84 <module> | run_server(server_args)
sglang/launch_server.py:67 run_server | launch_server(server_args)
sglang/srt/entrypoints/http_server.py:3156 launch_server | ) = Engine._launch_subprocesses(
sglang/srt/entrypoints/engine.py:1236 _launch_subprocesses | scheduler_init_result.wait_for_ready()
sglang/srt/entrypoints/engine.py:995 wait_for_ready | infos = _wait_for_scheduler_ready(scheduler_pipe_readers, scheduler_procs)
sglang/srt/entrypoints/engine.py:2029 _wait_for_scheduler_ready | raise _scheduler_died_error(i, scheduler_procs[i])
"""
    )
    out.append(
        traceback(
            _FROZEN_RUNPY + main,
            "RuntimeError: Rank 0 scheduler died during initialization (exit code: 1). If exit code is -9 "
            "(SIGKILL), a common cause is the OS OOM killer. Run `dmesg -T | grep -i oom` to check.",
        )
    )
    return out


def assertion_traceback(reason: str) -> str:
    frames = stack(
        """
sglang/launch_server.py:79 <module> | server_args = prepare_server_args(sys.argv[1:])
sglang/srt/server_args.py:6230 prepare_server_args | return ServerArgs.from_cli_args(raw_args)
sglang/srt/server_args.py:6063 check_server_args | assert (
"""
    )
    return traceback(_FROZEN_RUNPY + frames, f"AssertionError: {reason}")


_CRASH_FRAMES = stack(
    """
sglang/srt/managers/scheduler.py:3625 run_scheduler_process | scheduler.event_loop_overlap()
torch/utils/_contextlib.py:120 decorate_context | return func(*args, **kwargs)
sglang/srt/managers/scheduler.py:1142 event_loop_overlap | batch_result = self.run_batch(batch)
sglang/srt/managers/scheduler.py:2398 run_batch | batch_result = self.model_worker.forward_batch_generation(
sglang/srt/managers/tp_worker.py:421 forward_batch_generation | logits_output, can_run_cuda_graph = self.model_runner.forward(
"""
)
_CRASH_EXC = (
    "torch.AcceleratorError: CUDA error: an illegal memory access was encountered\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
    "might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."
)


_DEVICE_FRAMES = stack(
    """
sglang/srt/managers/scheduler.py:6361 run_scheduler_process | scheduler = Scheduler(server_args, port_args)
sglang/srt/managers/scheduler.py:368 __init__ | self.init_model_worker()
sglang/srt/managers/scheduler.py:561 init_model_worker | self.tp_worker = TpModelWorker(
sglang/srt/managers/tp_worker.py:246 __init__ | self._model_runner = ModelRunner(
sglang/srt/model_executor/model_runner.py:352 __init__ | self.init_torch_distributed()
sglang/srt/model_executor/model_runner.py:812 init_torch_distributed | torch.get_device_module(self.device).set_device(self.gpu_id)
torch/cuda/__init__.py:567 set_device | torch._C._cuda_setDevice(device)
"""
)
_DEVICE_EXC = (
    "torch.AcceleratorError: CUDA error: invalid device ordinal\n"
    "GPU device may be out of range, do you have enough GPUs?\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
    "might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."
)


_CAPTURE_FAILED_HELP = (
    "Possible solutions:\n"
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
    "3. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)\n"
    "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"
)


def jit_missing_tool_traceback(tool: str = "ninja") -> str:
    """flashinfer's first JIT build (its RMSNorm, at the first CUDA-graph capture) cannot start the
    build tool: subprocess's FileNotFoundError names it, then the graph runner re-raises it as
    `Capture cuda graph failed` while handling it (the chain of SGLang 0.5.16's real JIT failure)."""
    inner = stack(
        """
sglang/srt/model_executor/cuda_graph_runner.py:371 __init__ | self.capture()
sglang/srt/model_executor/cuda_graph_runner.py:702 capture | self._capture_one_stream()
sglang/srt/model_executor/cuda_graph_runner.py:846 capture_one_shape | out = run_once()
sglang/srt/layers/layernorm.py:345 forward_cuda | out = rmsnorm(x, self.weight.data, self.variance_epsilon)
sgl_kernel/elementwise.py:120 rmsnorm | return _flashinfer_norm.rmsnorm(input, weight, eps, out, enable_pdl)
flashinfer/norm/__init__.py:83 get_norm_module | return gen_norm_module().build_and_load()
flashinfer/jit/core.py:302 build | run_ninja(self.build_dir, self.ninja_path, verbose)
flashinfer/jit/cpp_ext.py:368 run_ninja | subprocess.run(
"""
    ) + (
        f'  File "/usr/lib/{_PY}/subprocess.py", line 548, in run\n'
        "    with Popen(*popenargs, **kwargs) as process:\n"
        f'  File "/usr/lib/{_PY}/subprocess.py", line 1955, in _execute_child\n'
        "    raise child_exception_type(errno_num, err_msg, err_filename)\n"
    )
    outer = stack(
        """
sglang/srt/managers/scheduler.py:3612 run_scheduler_process | scheduler = Scheduler(
sglang/srt/managers/scheduler.py:368 __init__ | self.init_model_worker()
sglang/srt/managers/tp_worker.py:396 init_cuda_graphs | self.model_runner.init_cuda_graphs(
sglang/srt/model_executor/model_runner.py:839 init_cuda_graphs | self.cuda_graph_runner = CudaGraphRunner(self)
sglang/srt/model_executor/cuda_graph_runner.py:373 __init__ | raise Exception(
"""
    )
    cause = f"[Errno 2] No such file or directory: '{tool}'"
    return (
        traceback(inner, f"FileNotFoundError: {cause}")
        + "\n\nDuring handling of the above exception, another exception occurred:\n\n"
        + traceback(outer, f"Exception: Capture cuda graph failed: {cause}\n{_CAPTURE_FAILED_HELP}")
    )


def crash_traceback() -> str:
    """A scheduler's forward pass hits a CUDA fault (the crash_after fault)."""
    return traceback(_CRASH_FRAMES, _CRASH_EXC)


def device_traceback() -> str:
    """A rank whose GPU index is past the host's GPUs: torch.cuda.set_device fails."""
    return traceback(_DEVICE_FRAMES, _DEVICE_EXC)


def config_traceback(exc: str) -> str:
    """The model's config cannot be read: SGLang's config loader raises in the main process."""
    return traceback(
        stack("sglang/srt/configs/model_config.py:104 __init__ | self.hf_config = get_config("), exc
    )


def split_traceback(reason: str) -> str:
    """A layer whose shape does not split tp ways: SGLang's assert while the model is built."""
    frames = stack(
        """
sglang/srt/model_loader/loader.py:262 _initialize_model | return model_class(**kwargs)
sglang/srt/layers/linear.py:380 __init__ | self.output_size_per_partition = divide(
sglang/srt/utils/common.py:1210 divide | assert numerator % denominator == 0
"""
    )
    return traceback(_SCHED_INIT + _LOAD_MODEL + frames, f"AssertionError: {reason}")


BEFORE_EXIT: list = []  # callables run before the process kills itself (the schedule log's flush)


def kill_self() -> None:
    """kill_process_tree(os.getpid()): the main process dies by SIGKILL of itself."""
    for fn in BEFORE_EXIT:
        with contextlib.suppress(Exception):
            fn()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


# -- multi-node (torch.distributed's TCP store, gloo) -------------------------------------------
DIST_INIT = stack(
    """
sglang/srt/managers/scheduler.py:6361 run_scheduler_process | scheduler = Scheduler(server_args, port_args)
sglang/srt/managers/scheduler.py:536 __init__ | bootstrap.init_parallel_runtime(
sglang/srt/distributed/bootstrap.py:152 init_parallel_runtime | _init_parallel_groups(
sglang/srt/distributed/bootstrap.py:322 _init_parallel_groups | init_distributed_environment(
sglang/srt/distributed/parallel_state.py:2517 init_distributed_environment | torch.distributed.init_process_group(
torch/distributed/c10d_logger.py:83 wrapper | return func(*args, **kwargs)
torch/distributed/c10d_logger.py:97 wrapper | func_return = func(*args, **kwargs)
torch/distributed/distributed_c10d.py:1892 init_process_group | store, rank, world_size = next(rendezvous_iterator)
torch/distributed/rendezvous.py:232 _tcp_rendezvous_handler | store = _create_c10d_store(
torch/distributed/rendezvous.py:199 _create_c10d_store | return TCPStore(
"""
)


def store_timeout_traceback(timeout_s: float, joined: int, world: int) -> str:
    """Node rank 0's TP0 hosts the TCPStore; torch 2.x (TCPStore.cpp), checked against torch 2.13:
    `Timed out after {timeout + 1} seconds waiting for clients. {joined}/{world} clients joined.`"""
    return traceback(
        DIST_INIT,
        f"torch.distributed.DistStoreError: Timed out after {int(timeout_s) + 1} seconds waiting for clients. "
        f"{joined}/{world} clients joined.",
    )


def client_timeout_traceback(timeout_s: float, host: str, port: int, connected: bool) -> str:
    """A non-zero rank whose store never answered: torch's client socket timeout (never connected),
    or the store's `Socket Timeout` (connected, but the other ranks never came)."""
    if connected:
        exc = "torch.distributed.DistStoreError: Socket Timeout"
    else:
        exc = (
            f"torch.distributed.DistNetworkError: The client socket has timed out after {int(timeout_s * 1000)}ms "
            f"while trying to connect to ({host}, {port})."
        )
    return traceback(DIST_INIT, exc)


def bind_error_traceback(port: int, strerror: str) -> str:
    """Node rank 0's rendezvous port is taken: TCPStore's bind error."""
    return traceback(
        DIST_INIT,
        f"torch.distributed.DistNetworkError: The server socket has failed to listen on any local "
        f"network address. port: {port}, useIpv6: false, code: -98, name: EADDRINUSE, "
        f"message: address already in use ({strerror})",
    )


def peer_closed_traceback(host: str, port: int) -> str:
    """A non-zero node whose rank 0 went away: the scheduler's request broadcast over the gloo CPU
    group fails first (every loop iteration broadcasts, idle or not)."""
    frames = stack(
        """
sglang/srt/managers/scheduler.py:6368 run_scheduler_process | scheduler.run_event_loop()
sglang/srt/managers/scheduler.py:1989 run_event_loop | dispatch_event_loop(self)
sglang/srt/managers/scheduler.py:6215 dispatch_event_loop | return _dispatch_event_loop_once(scheduler)
sglang/srt/managers/scheduler.py:6231 _dispatch_event_loop_once | scheduler.event_loop_overlap()
sglang/srt/managers/scheduler.py:2091 event_loop_overlap | self.ingest_requests()
sglang/srt/managers/scheduler_components/request_receiver.py:121 recv_requests | recv_reqs = broadcast_pyobj(
sglang/srt/utils/common.py:2715 broadcast_pyobj | dist.broadcast(tensor_size, src=src, group=dist_group)
torch/distributed/c10d_logger.py:83 wrapper | return func(*args, **kwargs)
torch/distributed/distributed_c10d.py:2836 broadcast | work.wait()
"""
    )
    return traceback(
        frames,
        f"RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [{host}]:{port}",
    )
