"""Start-up as SGLang does it (docs/sglang.md 3.1), phase by phase, with its log lines.

Parse flags, ask the planner, init torch distributed (the rendezvous when multi-node), "load
weights" with the port closed, allocate the KV cache, capture CUDA graphs, then fail as SGLang
fails or open the port, warm up (/health answers 503) and log "The server is fired up and ready
to roll!". The gate's classifier and the tests read these lines: change none of them lightly.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
import time

from . import failures
from .cost import GIB, env_float, from_plan
from .engine import Scheduler
from .flags import server_args_repr
from .http_conn import Conn
from .log import SIGQUIT_FROM_CHILD, rank_prefix
from .plan import make_plan, read_hf_config, text_config

_KV_DTYPES = {"fp8_e4m3": "torch.float8_e4m3fn", "fp8_e5m2": "torch.float8_e5m2"}


class Startup:
    """The start-up phases of Sim (server.py)."""

    # -- ranks ----------------------------------------------------------------------------------
    def prefix(self, rank: dict) -> str:
        a = self.args
        dp_rank = None
        if a.dp_size > 1 and a.enable_dp_attention:
            per = max(1, a.tp_size // a.dp_size)
            dp_rank = rank.get("tp_rank", 0) // per
        tp_rank = rank.get("tp_rank", rank.get("rank", 0))
        moe_tp = max(1, a.tp_size // max(1, a.ep_size))
        return rank_prefix(
            tp_rank=tp_rank,
            pp_rank=rank.get("pp_rank", 0),
            pp_size=a.pp_size,
            ep_rank=tp_rank // moe_tp,
            ep_size=a.ep_size,
            dp_rank=dp_rank,
        )

    def my_ranks(self) -> list[dict]:
        a = self.args
        ranks = self.plan.get("ranks") or [
            {
                "rank": i,
                "tp_rank": i % a.tp_size,
                "pp_rank": i // a.tp_size,
                "gpu": i,
                "weights_gib": self.plan.get("weights_gib_per_gpu") or 0,
            }
            for i in range(max(1, a.tp_size * a.pp_size))
        ]
        nnodes = max(1, self.args.nnodes)
        if nnodes == 1:
            return ranks
        per = max(1, len(ranks) // nnodes)
        return ranks[self.args.node_rank * per : (self.args.node_rank + 1) * per]

    def weights_of(self, r: dict) -> float:
        return float(r.get("weights_gib", self.plan.get("weights_gib_per_gpu", 0)))

    def kv_of(self, r: dict) -> float:
        """A PP stage holds the KV of its own layers only."""
        per_token = float(r.get("kv_bytes_per_token") or self.plan.get("kv_bytes_per_token") or 0)
        return self.kv_tokens * per_token / GIB

    def free_before_load_gib(self) -> float:
        for key in ("free_before_load_gib", "pre_load_free_gib"):
            if self.plan.get(key) is not None:
                return float(self.plan[key])
        context = getattr(self.planner, "CUDA_CONTEXT_GIB", 0.5)
        return self.hardware["gpu_memory_gib"] - env_float("SGLANG_SIM_CUDA_CONTEXT_GIB", context)

    def _scheduler_died(self, rank: dict, text: str) -> None:
        """A scheduler's exception during launch: its traceback, then the main process's SIGQUIT."""
        self.log.rank(self.prefix(rank), "Scheduler hit an exception: " + text)
        self.log.main(SIGQUIT_FROM_CHILD)
        failures.kill_self()

    # -- the main process, before the event loop -------------------------------------------------
    def run(self) -> None:
        a, log = self.args, self.log
        log.main("server_args=" + server_args_repr(a))
        if a.attention_backend is None:
            log.main("Attention backend not specified. Use fa3 backend by default.")
        try:
            self.hf = read_hf_config(a.model_path)
            self.planner, self.spec, self.plan = make_plan(a, self.hardware)
        except Exception as e:  # SGLang fails in its config loader: traceback, exit 1
            log.raw(failures.config_traceback(f"{type(e).__name__}: {e}"))
            sys.exit(1)
        plan = self.plan
        if plan.get("failure") == "invalid":
            reasons = [r.removeprefix("sim: ") for r in plan.get("reasons") or ["invalid layout"]]
            self.plan["reasons"] = reasons
            if a.ep_size > a.tp_size:
                for text in failures.zero_division_tracebacks(
                    max(1, a.tp_size * a.pp_size // max(1, a.nnodes))
                ):
                    log.raw(text)
                sys.exit(1)
            text = " ".join(reasons)
            if re.search(r"needs \d+ GPUs", text):
                self.invalid_mode = "device"  # a rank's torch.cuda.set_device fails
            elif re.search(r"do(?:es)? not (?:split|divide)", text):
                self.invalid_mode = "split"  # a layer's shape assert fails while the model is built
            else:
                log.raw(failures.assertion_traceback(reasons[0]))
                sys.exit(1)
        asyncio.run(self.main_async())

    # -- the schedulers' start-up, then the HTTP server -------------------------------------------
    async def main_async(self) -> None:
        loop = asyncio.get_running_loop()
        self._install_signals(loop)
        ranks = self.my_ranks()
        free0 = self.free_before_load_gib()
        await self._init_distributed(ranks, free0)
        for r in ranks:
            self.log.rank(self.prefix(r), f"Load weight begin. avail mem={free0:.2f} GB")
        if self.invalid_mode == "split":
            reason = (self.plan.get("reasons") or ["shape does not split"])[0]
            self._scheduler_died(ranks[0], failures.split_traceback(reason))
        await self._load_weights(ranks, free0)
        self._allocate_kv(ranks, free0)
        self._capture_graphs(ranks, free0)
        self._start_schedulers(loop, ranks, free0)
        await self.serve(loop)

    async def _held(self, phase: str) -> None:
        """With SGLANG_SIM_HOLD_DIR, the phase ends only once <dir>/<phase> exists: a test looks at
        the loading or warming server for as long as it needs, however busy the host."""
        hold = os.environ.get("SGLANG_SIM_HOLD_DIR")
        while hold and not os.path.exists(os.path.join(hold, phase)):
            await asyncio.sleep(0.02)

    async def _init_distributed(self, ranks: list[dict], free0: float) -> None:
        cap = self.hardware["gpu_memory_gib"]
        for r in ranks:
            self.log.rank(self.prefix(r), "Init torch distributed begin.")
        if self.args.nnodes > 1:
            await self._rendezvous(ranks)
        for r in ranks:
            self.log.rank(
                self.prefix(r), f"Init torch distributed ends. elapsed=0.42 s, mem usage={cap - free0:.2f} GB"
            )
        if self.invalid_mode == "device":
            bad = next((r for r in ranks if r["gpu"] >= self.hardware["gpu_count"]), ranks[-1])
            self._scheduler_died(bad, failures.device_traceback())

    async def _load_weights(self, ranks: list[dict], free0: float) -> None:
        plan = self.plan
        load_s = self.faults.get("slow_start", env_float("SGLANG_SIM_LOAD_SECONDS", 1.5))
        t0 = time.monotonic()
        await asyncio.sleep(load_s)
        await self._held("load")
        if plan.get("failure") == "oom_at_load":
            self._die_oom(ranks)
        tc = text_config(self.hf)
        arch = (self.hf.get("architectures") or tc.get("architectures") or ["?"])[0]
        qc = self.hf.get("quantization_config") or tc.get("quantization_config") or {}
        quant = f"quant={qc.get('quant_method', 'quantized')}, " if qc else ""
        for field in ("bits", "quant_algo", "fmt"):
            if field in qc:
                quant += f"{field}={qc[field]}, "
        for r in ranks:
            w = self.weights_of(r)
            self.log.rank(
                self.prefix(r),
                f"Load weight end. elapsed={time.monotonic() - t0:.2f} s, type={arch}, {quant}"
                f"avail mem={free0 - w:.2f} GB, mem usage={w:.2f} GB.",
            )
        if plan.get("failure") == "kv_no_memory" or plan.get("verdict") == "oom":
            mem_fraction = self.args.mem_fraction_static or plan.get("mem_fraction_static")
            self._scheduler_died(ranks[0], failures.kv_no_memory_traceback(mem_fraction))

    def _allocate_kv(self, ranks: list[dict], free0: float) -> None:
        self.kv_tokens = kv_tokens = int(self.plan.get("kv_tokens") or 0)
        kv_dtype = _KV_DTYPES.get(self.args.kv_cache_dtype or "auto", "torch.bfloat16")
        mla = "kv_lora_rank" in text_config(self.hf)
        for r in ranks:
            kv, p = self.kv_of(r), self.prefix(r)
            sizes = f"KV size: {kv:.2f} GB" if mla else f"K size: {kv / 2:.2f} GB, V size: {kv / 2:.2f} GB"
            self.log.rank(p, f"KV Cache is allocated. dtype: {kv_dtype}, #tokens: {kv_tokens}, {sizes}")
            self.log.rank(p, f"Memory pool end. avail mem={free0 - self.weights_of(r) - kv:.2f} GB")

    def _capture_graphs(self, ranks: list[dict], free0: float) -> None:
        self.graph_gib = graph = env_float("SGLANG_SIM_GRAPH_GIB", 0.4)
        left = [free0 - self.weights_of(r) - self.kv_of(r) for r in ranks]
        for r, avail in zip(ranks, left, strict=True):
            self.log.rank(
                self.prefix(r),
                f"Capture cuda graph begin. This can take up to several minutes. avail mem={avail:.2f} GB",
            )
        if self.faults.get("jit_missing"):  # the first capture JIT-builds a kernel: its tool is not on PATH
            self._scheduler_died(ranks[0], failures.jit_missing_tool_traceback(self.faults["jit_missing"]))
        for r, avail in zip(ranks, left, strict=True):
            self.log.rank(
                self.prefix(r),
                f"Capture cuda graph end. Time elapsed: 0.50 s. mem usage={graph:.2f} GB. "
                f"avail mem={avail - graph:.2f} GB.",
            )

    def _start_schedulers(self, loop, ranks: list[dict], free0: float) -> None:
        a, plan, kv_tokens = self.args, self.plan, self.kv_tokens
        cap = self.hardware["gpu_memory_gib"]
        self.context_len = int(
            a.context_length or text_config(self.hf).get("max_position_embeddings") or 4096
        )
        self.chunked_prefill_size = a.chunked_prefill_size or (8192 if cap >= 60 else 4096)
        self.max_prefill_tokens = a.max_prefill_tokens or 16384
        dp = max(1, a.dp_size)
        max_req_pool = min(max(int(kv_tokens / self.context_len * 512), 2048), 4096)
        if a.max_running_requests:
            self.max_running = max(1, a.max_running_requests // dp)
        else:
            self.max_running = min(max(1, kv_tokens // 2), max_req_pool)
        self.cost = from_plan(plan, self.hardware)
        w0 = float(ranks[0].get("weights_gib", 0)) if ranks else 0.0
        if ranks:
            self.kv_gib = self.kv_of(ranks[0])
        else:
            self.kv_gib = kv_tokens * float(plan.get("kv_bytes_per_token") or 0) / GIB
        if a.node_rank == 0:  # global TP0 only
            self.log.rank(
                self.prefix(ranks[0]) if ranks else " TP0",
                f"max_total_num_tokens={kv_tokens}, chunked_prefill_size={self.chunked_prefill_size}, "
                f"max_prefill_tokens={self.max_prefill_tokens}, max_running_requests={self.max_running}, "
                f"context_len={self.context_len}, "
                f"available_gpu_mem={free0 - w0 - self.kv_gib - self.graph_gib:.2f} GB",
            )
        for d in range(dp):
            prefix = (
                f" DP{d} TP{d * max(1, a.tp_size // dp)}"
                if dp > 1
                else (self.prefix(ranks[0]) if ranks else "")
            )
            s = Scheduler(
                self,
                dp_rank=d,
                max_running=self.max_running,
                kv_tokens=kv_tokens,
                cost=self.cost,
                log_prefix=prefix,
            )
            self.schedulers.append(s)
            self._tasks.add(loop.create_task(s.run()))

    def _die_oom(self, ranks: list[dict]) -> None:
        plan, cap = self.plan, self.hardware["gpu_memory_gib"]
        worst = max(ranks, key=lambda r: float(r.get("weights_gib", 0)))
        non_torch = cap - self.free_before_load_gib()
        fig = None
        seq_fn = getattr(self.planner, "allocation_sequence", None)
        if seq_fn is not None:
            fig = failures.oom_figures(seq_fn(self.spec, plan, worst.get("rank", 0)), cap, non_torch)
        if fig is None:
            # No allocation sequence: spread the rank's weights over its layers.
            total = self.weights_of(worst) * GIB
            layers = int(text_config(self.hf).get("num_hidden_layers") or 1)
            seq = [(f"model.layers.{i}.mlp.experts.w13_weight_packed", total / layers) for i in range(layers)]
            fig = failures.oom_figures(seq, cap, non_torch) or ("model.layers.0", total, 0, 0.0, 0.0)
        name, tried, allocated, free, reserved = fig
        text = failures.oom_traceback(
            name=name,
            tried=tried,
            gpu=int(worst.get("gpu", 0)),
            capacity_gib=cap,
            free=free,
            allocated=allocated,
            reserved=reserved,
        )
        self._scheduler_died(worst, text)

    # -- the HTTP server ------------------------------------------------------------------------
    async def serve(self, loop) -> None:
        a, log = self.args, self.log
        if a.node_rank > 0:
            await self._serve_dummy(loop)
            return
        if self.pd_mode == "prefill":  # SGLang starts the bootstrap server before the API (pd.py)
            await self.start_bootstrap_server(loop)
        try:
            server = await loop.create_server(lambda: Conn(self), a.host, a.port, reuse_address=True)
        except OSError as e:
            log.uvicorn("INFO", f"Started server process [{os.getpid()}]")
            log.uvicorn("INFO", "Waiting for application startup.")
            log.uvicorn("INFO", "Application startup complete.")
            log.uvicorn("ERROR", str(e))
            log.uvicorn("INFO", "Waiting for application shutdown.")
            log.uvicorn("INFO", "Application shutdown complete.")
            sys.stderr.flush()
            os._exit(1)
        log.uvicorn("INFO", f"Started server process [{os.getpid()}]")
        log.uvicorn("INFO", "Waiting for application startup.")
        log.uvicorn("INFO", "Application startup complete.")
        port = server.sockets[0].getsockname()[1]
        log.uvicorn("INFO", f"Uvicorn running on http://{a.host}:{port} (Press CTRL+C to quit)")
        warm = 0.0 if a.skip_server_warmup else env_float("SGLANG_SIM_WARMUP_SECONDS", 0.5)
        await asyncio.sleep(warm)
        await self._held("warmup")
        if a.node_rank == 0 and not self.halted:
            self.status = "Up"
            log.main("The server is fired up and ready to roll!")
        await asyncio.Future()
