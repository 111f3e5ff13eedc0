"""The simulator's process: start-up as SGLang does it, then SGLang's HTTP API.

Start-up (notes/sglang.md 3.1): parse flags, ask the planner, log the scheduler lines,
"load weights" with the port closed, then fail as SGLang fails or open the port, warm up
(/health answers 503) and log "The server is fired up and ready to roll!".
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import sys
import time
import uuid
import zlib
from collections import deque
from email.utils import formatdate
from urllib.parse import parse_qs, urlsplit

from . import __version__, dist, failures
from .cost import GIB, from_plan
from .engine import CHUNK_END, Req, Scheduler, eos_position
from .flags import parse_args, server_args_repr
from .log import Log, rank_prefix
from .plan import hardware_from_env, make_plan, model_name, read_hf_config, text_config

REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    411: "Length Required",
    413: "Payload Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
_TOKEN_RE = re.compile(r"\w+|[^\w\s]")
MAX_HEADER = 64 * 1024
LOG_IDLE_S = 0.02  # schedule log: written after the schedulers have been idle this long
LOG_MAX_PENDING = 4096  # ... or when this many records wait
_now = time.monotonic  # = asyncio's loop.time(): one clock for arrival and the schedule
_date_cache = [0, ""]


def _http_date() -> str:
    """The Date header, formatted once per second (email.utils.formatdate costs ~10 us a call)."""
    now = int(time.time())
    if _date_cache[0] != now:
        _date_cache[0] = now
        _date_cache[1] = formatdate(now, usegmt=True)
    return _date_cache[1]


MAX_BODY = 256 * 1024 * 1024


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    return default if raw in (None, "") else float(raw)


def count_text_tokens(text: str) -> int:
    """The simulator's tokenizer: words and punctuation marks (at least one token)."""
    return max(1, len(_TOKEN_RE.findall(text)))


def parse_faults(spec: str | None) -> dict:
    """`crash_after:N,hang_after:N,nccl_timeout_after:N,slow_start:S` -> {name: number}."""
    out: dict = {}
    for part in (spec or "").split(","):
        part = part.strip()
        if not part:
            continue
        name, _, value = part.partition(":")
        if name not in ("crash_after", "hang_after", "nccl_timeout_after", "slow_start"):
            raise SystemExit(f"SGLANG_SIM_FAULT: unknown fault {name!r}")
        out[name] = float(value) if name == "slow_start" else int(value or 0)
    return out


# ----------------------------------------------------------------------------------------
# HTTP/1.1 (keep-alive, chunked responses) on asyncio.BufferedProtocol: small and fast.
# ----------------------------------------------------------------------------------------
class Conn(asyncio.BufferedProtocol):
    def __init__(self, sim: Sim):
        self.sim = sim
        self.buf = bytearray()
        self.busy = False
        self.closed = False
        self.keep_alive = True
        self.req: Req | None = None
        self.transport = None
        self.arrival = 0.0  # arrival of the request being served
        self.parse_pending = False
        self.continued = False  # "100 Continue" sent for the request being read
        self.t_data = self.t_last = 0.0  # loop time of the read that brought the request's first bytes
        # recv_into() this buffer: asyncio's plain-Protocol reads allocate 256 KiB per recv (~14 us)
        self.rbuf = memoryview(bytearray(65536))

    def connection_made(self, transport):
        self.transport = transport

    def get_buffer(self, sizehint):
        return self.rbuf

    def buffer_updated(self, nbytes):
        self.data_received(self.rbuf[:nbytes])

    def data_received(self, data):
        if self.sim.halted:
            return  # a hang: bytes are read and never answered
        t = _now()
        if not self.buf:
            # the request's arrival: when its first bytes are read, before any parsing (SGLang's
            # created_time is taken as the HTTP handler starts, also before the tokenizer)
            self.t_data = t
        self.t_last = t
        self.buf += data
        if not self.busy and not self.parse_pending:
            # parsed in the next loop pass: every socket that is readable now is read (and its
            # arrival stamped) first, so a burst of 64 requests is not stamped behind 63 parses
            self.parse_pending = True
            asyncio.get_running_loop().call_soon(self._parse_soon)

    def _parse_soon(self):
        self.parse_pending = False
        self._next()

    def connection_lost(self, exc):
        self.closed = True
        if self.req is not None:
            self.req.aborted = True

    def _next(self):
        while not self.busy and not self.closed and self.buf:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > MAX_HEADER:
                    self._bad(413)
                return
            head = bytes(self.buf[:end]).decode("latin-1")
            lines = head.split("\r\n")
            try:
                method, target, version = lines[0].split(" ", 2)
            except ValueError:
                self._bad(400)
                return
            headers = {}
            for line in lines[1:]:
                k, _, v = line.partition(":")
                headers[k.strip().lower()] = v.strip()
            if "chunked" in headers.get("transfer-encoding", "").lower():
                self._bad(411)
                return
            n = int(headers.get("content-length") or 0)
            if n > MAX_BODY:
                self._bad(413)
                return
            if len(self.buf) < end + 4 + n:
                if headers.get("expect", "").lower() == "100-continue" and not self.continued:
                    self.continued = True
                    self.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                return
            self.continued = False
            body = bytes(self.buf[end + 4 : end + 4 + n])
            del self.buf[: end + 4 + n]
            self.arrival = self.t_data
            if self.buf:  # a pipelined request already read: its bytes came by the last read at the latest
                self.t_data = self.t_last
            conn_hdr = headers.get("connection", "").lower()
            self.keep_alive = conn_hdr != "close" and (version != "HTTP/1.0" or conn_hdr == "keep-alive")
            self.busy = True
            try:
                self.sim.dispatch(self, method, target, headers, body)
            except Exception as e:  # a bug in a handler must not kill the server
                self.sim.log.main(f"Error in request handler: {e!r}")
                if self.busy:
                    self.json(500, {"error": {"message": repr(e)}})

    def _bad(self, status: int):
        self.keep_alive = False
        self.respond(status, b"")

    def write(self, data: bytes):
        if not self.closed:
            self.transport.write(data)

    def _head(self, status: int, ctype: str, extra: str) -> str:
        return (
            f"HTTP/1.1 {status} {REASONS.get(status, 'OK')}\r\ndate: {_http_date()}\r\n"
            f"server: uvicorn\r\ncontent-type: {ctype}\r\n{extra}"
            + ("" if self.keep_alive else "connection: close\r\n")
        )

    def respond(self, status: int, body: bytes, ctype: str = "application/json", extra: str = ""):
        self.write(f"{self._head(status, ctype, extra)}content-length: {len(body)}\r\n\r\n".encode() + body)
        self.done()

    def json(self, status: int, obj, extra: str = ""):
        self.respond(status, json.dumps(obj).encode(), "application/json", extra)

    def start_stream(self):
        self.write(
            f"{self._head(200, 'text/event-stream; charset=utf-8', '')}transfer-encoding: chunked\r\n\r\n".encode()
        )

    def end_stream(self):
        self.write(CHUNK_END)
        self.done()

    def done(self):
        self.req = None
        self.busy = False
        if not self.keep_alive:
            if self.transport is not None:
                self.transport.close()
            self.closed = True
        elif self.buf:
            asyncio.get_running_loop().call_soon(self._next)


class PrefixCache:
    """Which prompt prefixes the simulated radix cache holds, at block granularity (counts only).

    A prompt's cached tokens = the longest run of leading BLOCK-token blocks seen before (since the last
    /flush_cache); the gauge sglang:cache_hit_rate is cached / prompt tokens over the last WINDOW prompts.
    The simulated prefill does not get cheaper with hits: this serves the metric, not the speed."""

    BLOCK = 16
    WINDOW = 64

    def __init__(self):
        self.blocks: set[int] = set()
        self.recent: deque = deque(maxlen=self.WINDOW)

    def lookup_insert(self, tokens) -> int:
        h, cached, hit = 0, 0, True
        for i in range(0, len(tokens) - len(tokens) % self.BLOCK, self.BLOCK):
            h = hash((h, tuple(tokens[i : i + self.BLOCK])))
            if hit and h in self.blocks:
                cached += self.BLOCK
            else:
                hit = False
                self.blocks.add(h)
        self.recent.append((cached, len(tokens)))
        return cached

    def hit_rate(self) -> float:
        total = sum(n for _, n in self.recent)
        return sum(c for c, _ in self.recent) / total if total else 0.0

    def flush(self) -> None:
        self.blocks.clear()
        self.recent.clear()


# ----------------------------------------------------------------------------------------
class Sim:
    def __init__(self, args, log: Log):
        self.args = args
        self.log = log
        self.hardware = hardware_from_env()
        self.faults = parse_faults(args.sim_fault)
        self.status = "Starting"  # Starting | Up | Draining
        self.halted = False
        self.finished_count = 0
        self.tokens_out = 0
        self.prompt_tokens_total = 0
        self.requests_total = 0
        self.prefix_cache = PrefixCache()
        self.last_output = 0.0
        self.lateness: deque[float] = deque(maxlen=1_000_000)  # per streamed chunk
        self.wake_lateness: deque[float] = deque(maxlen=100_000)  # per iteration, before the writes
        self.prefill_wake_lateness: deque[float] = deque(maxlen=100_000)  # the same, prefill iterations only
        self.schedulers: list[Scheduler] = []
        self._rr = 0
        self.schedule_log = None
        self._pending_log: list = []
        self._log_timer = None
        if args.sim_schedule_log:
            self.schedule_log = open(args.sim_schedule_log, "a", buffering=1)  # noqa: SIM115
            failures.BEFORE_EXIT.append(self._flush_schedule_log)
        self.hf = {}
        self.planner = self.spec = self.plan = None
        self.cost = None
        self.invalid_mode = None  # "device" | "split": an invalid layout that dies inside a scheduler
        self._tasks: set = set()  # strong references to background tasks
        self.eos_mean = int(_env_float("SGLANG_SIM_EOS_MEAN", 256))
        self.dist: dist.Rendezvous | None = None  # multi-node: the connection(s) to the other nodes

    # -- start-up -----------------------------------------------------------------------
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

    def free_before_load_gib(self) -> float:
        for key in ("free_before_load_gib", "pre_load_free_gib"):
            if self.plan.get(key) is not None:
                return float(self.plan[key])
        context = getattr(self.planner, "CUDA_CONTEXT_GIB", 0.5)
        return self.hardware["gpu_memory_gib"] - _env_float("SGLANG_SIM_CUDA_CONTEXT_GIB", context)

    def run(self) -> None:
        a, log = self.args, self.log
        log.main("server_args=" + server_args_repr(a))
        if a.attention_backend is None:
            log.main("Attention backend not specified. Use fa3 backend by default.")
        try:
            self.hf = read_hf_config(a.model_path)
            self.planner, self.spec, self.plan = make_plan(a, self.hardware)
        except Exception as e:  # SGLang fails in its config loader: traceback, exit 1
            log.raw(
                failures.runtime_traceback(
                    [("sglang/srt/configs/model_config.py", 104, "__init__", "self.hf_config = get_config(")],
                    f"{type(e).__name__}: {e}",
                )
            )
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

    async def main_async(self) -> None:
        a, log, plan = self.args, self.log, self.plan
        loop = asyncio.get_running_loop()
        self._install_signals(loop)
        ranks = self.my_ranks()
        cap = self.hardware["gpu_memory_gib"]
        free0 = self.free_before_load_gib()
        for r in ranks:
            p = self.prefix(r)
            log.rank(p, "Init torch distributed begin.")
        if a.nnodes > 1:
            await self._rendezvous(ranks)
        for r in ranks:
            log.rank(
                self.prefix(r), f"Init torch distributed ends. elapsed=0.42 s, mem usage={cap - free0:.2f} GB"
            )
        if self.invalid_mode == "device":
            bad = next((r for r in ranks if r["gpu"] >= self.hardware["gpu_count"]), ranks[-1])
            log.rank(
                self.prefix(bad),
                "Scheduler hit an exception: "
                + failures.runtime_traceback(failures.DEVICE_FRAMES, failures.DEVICE_EXC),
            )
            log.main("Received sigquit from a child process. It usually means the child failed.")
            failures.kill_self()
        for r in ranks:
            log.rank(self.prefix(r), f"Load weight begin. avail mem={free0:.2f} GB")
        if self.invalid_mode == "split":
            reason = (self.plan.get("reasons") or ["shape does not split"])[0]
            log.rank(self.prefix(ranks[0]), "Scheduler hit an exception: " + failures.split_traceback(reason))
            log.main("Received sigquit from a child process. It usually means the child failed.")
            failures.kill_self()
        load_s = self.faults.get("slow_start", _env_float("SGLANG_SIM_LOAD_SECONDS", 1.5))
        t0 = time.monotonic()
        await asyncio.sleep(load_s)
        if plan.get("failure") == "oom_at_load":
            self._die_oom(ranks)
        arch = (self.hf.get("architectures") or text_config(self.hf).get("architectures") or ["?"])[0]
        qc = self.hf.get("quantization_config") or text_config(self.hf).get("quantization_config") or {}
        quant = f"quant={qc.get('quant_method', 'quantized')}, " if qc else ""
        for field in ("bits", "quant_algo", "fmt"):
            if field in qc:
                quant += f"{field}={qc[field]}, "
        kv_dtype = {"fp8_e4m3": "torch.float8_e4m3fn", "fp8_e5m2": "torch.float8_e5m2"}.get(
            a.kv_cache_dtype or "auto", "torch.bfloat16"
        )
        for r in ranks:
            w = float(r.get("weights_gib", plan.get("weights_gib_per_gpu", 0)))
            log.rank(
                self.prefix(r),
                f"Load weight end. elapsed={time.monotonic() - t0:.2f} s, type={arch}, {quant}"
                f"avail mem={free0 - w:.2f} GB, mem usage={w:.2f} GB.",
            )
        if plan.get("failure") == "kv_no_memory" or plan.get("verdict") == "oom":
            r = ranks[0]
            log.rank(
                self.prefix(r),
                "Scheduler hit an exception: "
                + failures.kv_no_memory_traceback(a.mem_fraction_static or plan.get("mem_fraction_static")),
            )
            log.main("Received sigquit from a child process. It usually means the child failed.")
            failures.kill_self()
        kv_tokens = int(plan.get("kv_tokens") or 0)
        kv_gib = kv_tokens * float(plan.get("kv_bytes_per_token") or 0) / GIB

        def kv_of(r: dict) -> float:  # a PP stage holds the KV of its own layers only
            return kv_tokens * float(r.get("kv_bytes_per_token") or plan.get("kv_bytes_per_token") or 0) / GIB

        self.kv_of = kv_of
        mla = "kv_lora_rank" in text_config(self.hf)
        graph_gib = _env_float("SGLANG_SIM_GRAPH_GIB", 0.4)
        for r in ranks:
            w, kv = float(r.get("weights_gib", plan.get("weights_gib_per_gpu", 0))), kv_of(r)
            p = self.prefix(r)
            if mla:
                log.rank(
                    p,
                    f"KV Cache is allocated. dtype: {kv_dtype}, #tokens: {kv_tokens}, KV size: {kv:.2f} GB",
                )
            else:
                log.rank(
                    p,
                    f"KV Cache is allocated. dtype: {kv_dtype}, #tokens: {kv_tokens}, K size: {kv / 2:.2f} GB, "
                    f"V size: {kv / 2:.2f} GB",
                )
            log.rank(p, f"Memory pool end. avail mem={free0 - w - kv:.2f} GB")
        for r in ranks:
            w, kv = float(r.get("weights_gib", plan.get("weights_gib_per_gpu", 0))), kv_of(r)
            log.rank(
                self.prefix(r),
                "Capture cuda graph begin. This can take up to several minutes. "
                f"avail mem={free0 - w - kv:.2f} GB",
            )
        for r in ranks:
            w, kv = float(r.get("weights_gib", plan.get("weights_gib_per_gpu", 0))), kv_of(r)
            log.rank(
                self.prefix(r),
                f"Capture cuda graph end. Time elapsed: 0.50 s. mem usage={graph_gib:.2f} GB. "
                f"avail mem={free0 - w - kv - graph_gib:.2f} GB.",
            )
        self.kv_tokens = kv_tokens
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
        kv_gib = kv_of(ranks[0]) if ranks else kv_gib
        if a.node_rank == 0:  # global TP0 only
            log.rank(
                self.prefix(ranks[0]) if ranks else " TP0",
                f"max_total_num_tokens={kv_tokens}, chunked_prefill_size={self.chunked_prefill_size}, "
                f"max_prefill_tokens={self.max_prefill_tokens}, max_running_requests={self.max_running}, "
                f"context_len={self.context_len}, available_gpu_mem={free0 - w0 - kv_gib - graph_gib:.2f} GB",
            )
        self.graph_gib = graph_gib
        self.kv_gib = kv_gib
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
        await self.serve(loop)

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
            total = float(worst.get("weights_gib", plan.get("weights_gib_per_gpu", 0))) * GIB
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
        self.log.rank(self.prefix(worst), "Scheduler hit an exception: " + text)
        self.log.main("Received sigquit from a child process. It usually means the child failed.")
        failures.kill_self()

    # -- multi-node ---------------------------------------------------------------------------
    async def _rendezvous(self, ranks: list[dict]) -> None:
        """torch.distributed's TCP rendezvous at --dist-init-addr: every node, or a timeout."""
        a = self.args
        self.dist = dist.Rendezvous(
            nnodes=a.nnodes,
            node_rank=a.node_rank,
            addr=a.dist_init_addr,
            world=max(1, a.tp_size * a.pp_size),
            timeout_s=dist.dist_timeout_s(a),
            on_peer_lost=self._on_peer_lost,
            on_master_lost=self._on_master_lost,
            on_shutdown=self._on_dist_shutdown,
        )
        try:
            await self.dist.start()
        except dist.RendezvousTimeout as e:
            if e.master:
                text = failures.store_timeout_traceback(e.timeout_s, e.joined, e.world)
            else:
                text = failures.client_timeout_traceback(e.timeout_s, e.host, e.port, e.connected)
            self.log.rank(self.prefix(ranks[0]) if ranks else " TP0", "Scheduler hit an exception: " + text)
            self._die_of_sigquit()
        except OSError as e:  # the rendezvous port is taken: TCPStore's bind error
            self.log.rank(
                self.prefix(ranks[0]) if ranks else " TP0",
                "Scheduler hit an exception: "
                + failures.runtime_traceback(
                    failures._DIST_INIT,
                    f"torch.distributed.DistNetworkError: The server socket has failed to listen on any local "
                    f"network address. port: {self.dist.port}, useIpv6: false, code: -98, name: EADDRINUSE, "
                    f"message: address already in use ({e.strerror})",
                ),
            )
            self._die_of_sigquit()

    def _die_of_sigquit(self) -> None:
        """A scheduler died during launch: the main process's launch-phase SIGQUIT handler."""
        self.log.main("Received sigquit from a child process. It usually means the child failed.")
        self.log.main(
            f"kill_process_tree called: parent_pid={os.getpid()}, include_parent=True, pid={os.getpid()}"
        )
        failures.kill_self()

    def _on_peer_lost(self, node_rank: int, why: str) -> None:
        """Rank 0: a node went away. Its ranks' collectives never complete: the NCCL watchdog fires
        after the collective timeout (SGLANG_SIM_NCCL_TIMEOUT_SECONDS, else the dist timeout), then
        SGLang's exit path. Meanwhile nothing is generated (requests stall, /health hangs)."""
        if self.halted:
            return
        self.halted = True
        raw = os.environ.get("SGLANG_SIM_NCCL_TIMEOUT_SECONDS")
        timeout_s = float(raw) if raw not in (None, "") else dist.dist_timeout_s(self.args)
        self._tasks.add(asyncio.get_running_loop().create_task(self._nccl_timeout(timeout_s)))

    def _local_scheduler_pids(self) -> list[int]:
        return [os.getpid() + 1 + i for i in range(max(1, len(self.my_ranks()) if self.plan else 1))]

    def _on_master_lost(self, why: str) -> None:
        """Rank >= 1: rank 0 died. The schedulers' request broadcast (gloo) fails, one scheduler's
        exception reaches the main process as SIGQUIT, which kills its process tree."""
        ranks = self.my_ranks() if self.plan else []
        host = self.dist.host if self.dist else "127.0.0.1"
        port = (self.dist.port if self.dist else 50000) + 1000 + self.args.node_rank
        self.log.rank(
            self.prefix(ranks[0]) if ranks else f" TP{self.args.node_rank}",
            "Scheduler hit an exception: " + failures.peer_closed_traceback(host, port),
        )
        self._die_of_sigquit()

    def _on_dist_shutdown(self) -> None:
        """Rank >= 1: rank 0's ShutdownReq: the schedulers leave their loops, the main process returns."""
        for pid in self._local_scheduler_pids():
            self.log.main(f"Scheduler or DataParallelController {pid} terminated with 0")
        self._exit_nonzero_rank()

    def _sigterm_nonzero_rank(self) -> None:
        """SGLang 0.5.23 on node_rank >= 1: the main process only logs and waits for rank 0's
        ShutdownReq; under systemd (KillMode=control-group) the schedulers get the SIGTERM too and
        die of it, so the main process returns and exits 0. The sim acts out the systemd case."""
        self.log.main(
            f"SIGTERM received on node_rank {self.args.node_rank}; waiting for the rank-0 ShutdownReq "
            "broadcast to stop the schedulers."
        )
        for pid in self._local_scheduler_pids():
            self.log.main(f"Scheduler or DataParallelController {pid} terminated with -15")
        self._exit_nonzero_rank()

    def _exit_nonzero_rank(self) -> None:
        self.log.main(
            f"kill_process_tree called: parent_pid={os.getpid()}, include_parent=False, pid={os.getpid()}"
        )
        sys.stderr.flush()
        os._exit(0)

    async def _serve_dummy(self, loop) -> None:
        """SGLang's dummy health server on --port (uvicorn at log level warning: no INFO lines)."""
        a = self.args
        try:
            await loop.create_server(lambda: Conn(self), a.host, a.port, reuse_address=True)
        except OSError as e:
            self.log.uvicorn("ERROR", str(e))
        await asyncio.Future()

    def _install_signals(self, loop) -> None:
        loop.add_signal_handler(signal.SIGTERM, self._on_sigterm)
        loop.add_signal_handler(signal.SIGINT, self._on_sigint)

    def _on_sigint(self) -> None:
        self._flush_schedule_log()
        self.log.uvicorn("INFO", "Shutting down")
        sys.stderr.flush()
        os._exit(0)

    def _on_sigterm(self) -> None:
        if self.args.node_rank > 0:
            self._sigterm_nonzero_rank()
            return
        self.log.main(
            "SIGTERM received. signum=15 frame=<frame at 0x7f3c2a1b4c40, file "
            f"'{failures.SITE}/uvicorn/server.py', line 70, code serve>. "
            "Draining requests and shutting down..."
        )
        self.status = "Draining"
        loop = asyncio.get_running_loop()
        self._tasks.add(loop.create_task(self._drain()))

    async def _drain(self) -> None:
        force = os.environ.get("SGL_FORCE_SHUTDOWN")
        while not force and not self.halted and any(s.running or s.waiting for s in self.schedulers):
            await asyncio.sleep(_env_float("SGLANG_SIM_DRAIN_POLL_SECONDS", 0.5))
        if self.dist is not None:  # ShutdownReq to every TP rank, the other nodes' included
            self.dist.shutdown()
        self.log.main(
            f"kill_process_tree called: parent_pid={os.getpid()}, include_parent=True, pid={os.getpid()}"
        )
        failures.kill_self()

    async def serve(self, loop) -> None:
        a, log = self.args, self.log
        if a.node_rank > 0:
            await self._serve_dummy(loop)
            return
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
        warm = 0.0 if a.skip_server_warmup else _env_float("SGLANG_SIM_WARMUP_SECONDS", 0.5)
        await asyncio.sleep(warm)
        if a.node_rank == 0 and not self.halted:
            self.status = "Up"
            log.main("The server is fired up and ready to roll!")
        await asyncio.Future()

    # -- requests -------------------------------------------------------------------------
    def pick(self) -> Scheduler:
        s = self.schedulers[self._rr % len(self.schedulers)]
        self._rr += 1
        return s

    def finish(self, r: Req, t_end: float) -> None:
        if r.kind != "health" and r.conn is not None:
            # the client's clock stops at the end marker: send it before any bookkeeping
            if r.stream:
                r.conn.done()  # the last chunk already ended the body (Req.advance)
            else:
                r.conn.json(200, r.final_body(t_end))
        if self.schedule_log is not None:
            # Kept and written once the schedulers are idle (or on /sim/stats, at exit, or when
            # LOG_MAX_PENDING are waiting): serialising the records of 64 streams that end together
            # (128 token times each) takes ~5 ms, which delayed the requests that arrive right after.
            self._pending_log.append(r)
            if len(self._pending_log) >= LOG_MAX_PENDING:
                self._flush_schedule_log()
            elif self._log_timer is None:
                self._log_timer = asyncio.get_running_loop().call_later(LOG_IDLE_S, self._flush_when_idle)
        if r.kind == "health":
            return  # health probes count for nothing (SGLang: log_metrics=False), faults included
        self.finished_count += 1
        self.prompt_tokens_total += r.prompt_tokens
        self._check_faults()

    def _flush_when_idle(self) -> None:
        self._log_timer = None
        busy = any(sc.running or sc.waiting for sc in self.schedulers)
        if busy or _now() - self.last_output < LOG_IDLE_S:
            self._log_timer = asyncio.get_running_loop().call_later(LOG_IDLE_S, self._flush_when_idle)
        else:
            self._flush_schedule_log()

    def _flush_schedule_log(self) -> None:
        if self._log_timer is not None:
            self._log_timer.cancel()
            self._log_timer = None
        done, self._pending_log = self._pending_log, []
        if self.schedule_log is not None and done:
            self.schedule_log.write("".join(json.dumps(r.schedule_record()) + "\n" for r in done))

    def _check_faults(self) -> None:
        n = self.finished_count
        f = self.faults
        if f.get("crash_after") is not None and n >= f["crash_after"]:
            asyncio.get_running_loop().call_soon(self._crash)
        if f.get("hang_after") is not None and n >= f["hang_after"]:
            self.halted = True
        if f.get("nccl_timeout_after") is not None and n >= f["nccl_timeout_after"] and not self.halted:
            self.halted = True
            self._tasks.add(asyncio.get_running_loop().create_task(self._nccl_timeout()))

    def _crash(self) -> None:
        sched = self.schedulers[0] if self.schedulers else None
        prefix = sched.prefix if sched else " TP0"
        self.log.rank(
            prefix,
            "Scheduler hit an exception: "
            + failures.runtime_traceback(failures.CRASH_FRAMES, failures.CRASH_EXC),
        )
        self.log.main("SIGQUIT received. signum=None, frame=None. It usually means one child failed.")
        self.log.main(
            f"kill_process_tree called: parent_pid={os.getpid()}, include_parent=True, pid={os.getpid()}"
        )
        failures.kill_self()

    async def _nccl_timeout(self, timeout_s: float | None = None) -> None:
        if timeout_s is None:
            timeout_s = _env_float("SGLANG_SIM_NCCL_TIMEOUT_SECONDS", float(self.args.dist_timeout or 600))
        await asyncio.sleep(timeout_s)
        ms = int(timeout_s * 1000)
        ran = ms + 12
        stamp = time.strftime("%m%d %H:%M:%S") + f".{int((time.time() % 1) * 1e6):06d}"
        work = f"WorkNCCL(SeqNum=4711, OpType=ALLREDUCE, NumelIn=7168, NumelOut=7168, Timeout(ms)={ms})"
        pg = "[PG ID 0 PG GUID 0(default_pg) Rank 0]"
        for line in (
            f"[rank0]:[E{stamp} ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation timeout: "
            f"{work} ran for {ran} milliseconds before timing out.",
            f"[rank0]:[E{stamp} ProcessGroupNCCL.cpp:2268] {pg}  failure detected by watchdog at work sequence id: "
            "4711 PG status: last enqueued work: 4711, last completed work: 4710",
            f"[rank0]:[E{stamp} ProcessGroupNCCL.cpp:684] [Rank 0] Some NCCL operations have failed or timed out. "
            "Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on "
            "corrupted/incomplete data.",
            f"[rank0]:[E{stamp} ProcessGroupNCCL.cpp:698] [Rank 0] To avoid data inconsistency, we are taking the "
            "entire process down.",
            "terminate called after throwing an instance of 'c10::DistBackendError'",
            f"  what():  {pg} Process group watchdog thread terminated with exception: [Rank 0] Watchdog caught "
            f"collective operation timeout: {work} ran for {ran} milliseconds before timing out.",
        ):
            self.log.raw(line)
        self.log.main(
            f"Subprocess scheduler_0 (pid={os.getpid() + 1}) crashed with exit code -6. "
            "Triggering SIGQUIT for cleanup..."
        )
        self.log.main("SIGQUIT received. signum=None, frame=None. It usually means one child failed.")
        failures.kill_self()

    def dispatch(self, conn: Conn, method: str, target: str, headers: dict, body: bytes) -> None:
        url = urlsplit(target)
        path = url.path
        if self.args.node_rank > 0:
            # Non-zero node ranks run SGLang's dummy health server only (utils/common.py
            # launch_dummy_health_check_server: FastAPI, GET, 200 whatever the schedulers do).
            if path in ("/ping", "/health", "/health_generate") or (
                path == "/metrics" and self.args.enable_metrics
            ):
                if method != "GET":
                    conn.json(405, {"detail": "Method Not Allowed"})
                elif path == "/metrics":
                    conn.respond(200, b"", "text/plain; version=0.0.4; charset=utf-8")
                else:
                    conn.respond(200, b"", "text/plain; charset=utf-8")
            else:
                conn.json(404, {"detail": "Not Found"})
            return
        if self.args.api_key and not path.startswith(("/health", "/metrics")):
            auth = headers.get("authorization", "")
            if auth != f"Bearer {self.args.api_key}":
                conn.json(401, {"error": "Unauthorized"})
                return
        route = ROUTES.get(path)
        if route is None:
            conn.json(404, {"detail": "Not Found"})
            return
        methods, handler = route
        if method not in methods:
            conn.json(405, {"detail": "Method Not Allowed"})
            return
        if method == "POST" and handler not in (Sim.h_flush_cache,):
            try:
                data = json.loads(body or b"{}")
            except ValueError as e:
                conn.json(400, {"error": {"message": f"JSON decode error: {e}"}})
                return
            if not isinstance(data, dict):
                conn.json(400, {"error": {"message": "request body must be a JSON object"}})
                return
        else:
            data = parse_qs(url.query)
        handler(self, conn, data)

    # -- handlers -------------------------------------------------------------------------
    def h_health(self, conn: Conn, _data) -> None:
        if self.status == "Draining":
            self.log.main("Health check request received during shutdown. Returning 503.")
            conn.respond(503, b"")
            return
        if self.status != "Up":
            conn.respond(503, b"")
            return
        self._tasks.add(asyncio.get_running_loop().create_task(self._health(conn)))

    async def _health(self, conn: Conn) -> None:
        # SGLang: send a 1-token generate, then check every second whether any output arrived.
        tic = asyncio.get_running_loop().time()
        r = Req(
            rid=f"HEALTH_CHECK_{uuid.uuid4().hex}",
            kind="health",
            conn=None,
            stream=False,
            prompt_tokens=1,
            max_new=1,
            eos_at=None,
            seed=0,
            model="",
            include_usage=False,
            arrival=tic,
        )
        self.pick().submit(r)
        timeout = _env_float("SGLANG_HEALTH_CHECK_TIMEOUT", 20.0)
        step = _env_float("SGLANG_SIM_HEALTH_POLL_SECONDS", 1.0)
        while asyncio.get_running_loop().time() < tic + timeout:
            await asyncio.sleep(step)
            if self.last_output > tic:
                if not conn.closed:
                    conn.respond(200, b"")
                return
        now_loop, now_wall = asyncio.get_running_loop().time(), time.time()

        def hms(t_loop: float) -> str:
            return time.strftime("%H:%M:%S", time.localtime(now_wall - (now_loop - t_loop)))

        self.log.main(
            f"Health check failed. Server couldn't get a response from detokenizer for last "
            f"{timeout:g} seconds. tic start time: {hms(tic)}. last_heartbeat time: {hms(self.last_output)}"
        )
        conn.respond(503, b"")

    def model_info(self) -> dict:
        tc = text_config(self.hf)
        return {
            "model_path": self.args.model_path,
            "tokenizer_path": self.args.tokenizer_path or self.args.model_path,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "has_image_understanding": "vision_config" in self.hf,
            "has_audio_understanding": False,
            "model_type": self.hf.get("model_type", tc.get("model_type")),
            "architectures": self.hf.get("architectures", tc.get("architectures")),
        }

    def h_model_info(self, conn: Conn, _data) -> None:
        conn.json(200, self.model_info())

    def server_info(self) -> dict:
        a, plan = self.args, self.plan
        info = {k: v for k, v in vars(a).items() if not k.startswith("sim_")}
        info["api_key"] = None if a.api_key else a.api_key
        info.update(
            {
                "served_model_name": model_name(a) if a.served_model_name else a.model_path,
                "mem_fraction_static": a.mem_fraction_static or plan.get("mem_fraction_static"),
                "context_length": self.context_len,
                "chunked_prefill_size": self.chunked_prefill_size,
                "max_running_requests": a.max_running_requests,
                "max_total_num_tokens": self.kv_tokens,
                "max_req_input_len": self.context_len - 5,
                "version": __version__,
            }
        )
        ranks = self.my_ranks()
        states = []
        for s in self.schedulers:
            r = ranks[0] if ranks else {}
            states.append(
                {
                    "memory_usage": {
                        "weight": round(float(r.get("weights_gib", 0)), 2),
                        "kvcache": round(self.kv_of(r), 2),
                        "token_capacity": self.kv_tokens,
                        "graph": round(self.graph_gib, 2),
                    },
                    "effective_max_running_requests_per_dp": s.max_running,
                    "last_gen_throughput": s.last_gen_throughput,
                }
            )
        info["internal_states"] = states
        info["sim"] = {
            "engine": "sim",
            "hardware": self.hardware,
            "verdict": plan.get("verdict"),
            "cost_model": self.cost.describe(),
            "memory_usage_per_rank": [
                {
                    "rank": r.get("rank"),
                    "gpu": r.get("gpu"),
                    "weight": round(float(r.get("weights_gib", 0)), 2),
                    "kvcache": round(self.kv_of(r), 2),
                    "graph": round(self.graph_gib, 2),
                    "token_capacity": self.kv_tokens,
                }
                for r in ranks
            ],
        }
        return info

    def h_server_info(self, conn: Conn, _data) -> None:
        conn.json(200, self.server_info())

    def h_models(self, conn: Conn, _data) -> None:
        name = self.args.served_model_name or self.args.model_path
        conn.json(
            200,
            {
                "object": "list",
                "data": [
                    {
                        "id": name,
                        "object": "model",
                        "created": int(time.time()),
                        "owned_by": "sglang",
                        "root": name,
                        "max_model_len": self.context_len,
                    }
                ],
            },
        )

    def h_flush_cache(self, conn: Conn, _data) -> None:
        self.prefix_cache.flush()
        conn.respond(
            200,
            b"Cache flushed.\nPlease check backend logs for more details. (When there are running "
            b"or waiting requests, the operation will not be performed.)\n",
            "text/plain; charset=utf-8",
        )

    def h_loads(self, conn: Conn, _data) -> None:
        conn.json(
            200,
            [
                {
                    "dp_rank": s.dp_rank,
                    "num_reqs": len(s.running) + len(s.waiting),
                    "num_waiting_reqs": len(s.waiting),
                    "num_tokens": s.kv_in_use(),
                }
                for s in self.schedulers
            ],
        )

    def h_metrics(self, conn: Conn, _data) -> None:
        if not self.args.enable_metrics:
            conn.json(404, {"detail": "Not Found"})
            return
        labels = f'{{model_name="{model_name(self.args) if self.args.served_model_name else self.args.model_path}",'
        lines = []

        def metric(name, kind, help_, values):
            lines.append(f"# HELP sglang:{name} {help_}")
            lines.append(f"# TYPE sglang:{name} {kind}")
            for i, v in enumerate(values):
                lines.append(f'sglang:{name}{labels}tp_rank="0",pp_rank="0",dp_rank="{i}"}} {float(v)}')

        ss = self.schedulers
        metric("num_running_reqs", "gauge", "The number of running requests.", [len(s.running) for s in ss])
        metric(
            "num_queue_reqs",
            "gauge",
            "The number of requests in the waiting queue.",
            [len(s.waiting) for s in ss],
        )
        metric("num_used_tokens", "gauge", "The number of used tokens.", [s.kv_in_use() for s in ss])
        metric("token_usage", "gauge", "The token usage.", [s.kv_in_use() / s.kv_tokens for s in ss])
        metric(
            "cache_hit_rate",
            "gauge",
            "The prefix cache hit rate.",
            [self.prefix_cache.hit_rate() for _ in ss],
        )
        metric(
            "gen_throughput",
            "gauge",
            "The generation throughput (token/s).",
            [s.last_gen_throughput for s in ss],
        )
        metric(
            "max_total_num_tokens",
            "gauge",
            "Maximum total number of tokens in the KV cache pool.",
            [s.kv_tokens for s in ss],
        )
        metric(
            "prompt_tokens_total",
            "counter",
            "Number of prefill tokens processed.",
            [self.prompt_tokens_total],
        )
        metric(
            "generation_tokens_total", "counter", "Number of generation tokens processed.", [self.tokens_out]
        )
        metric("num_requests_total", "counter", "Number of requests processed.", [self.finished_count])
        conn.respond(200, ("\n".join(lines) + "\n").encode(), "text/plain; version=0.0.4; charset=utf-8")

    def h_sim_stats(self, conn: Conn, data) -> None:
        def summary(values) -> dict:
            v = sorted(values)
            if not v:
                return {"n": 0, "median": None, "p99": None, "max": None}
            return {
                "n": len(v),
                "median": v[len(v) // 2] * 1e3,
                "p99": v[min(len(v) - 1, int(0.99 * len(v)))] * 1e3,
                "max": v[-1] * 1e3,
            }

        self._flush_schedule_log()
        out = {
            "lateness_ms": summary(self.lateness),
            "wake_lateness_ms": summary(self.wake_lateness),
            "prefill_wake_lateness_ms": summary(self.prefill_wake_lateness),
            "tokens_out": self.tokens_out,
            "finished": self.finished_count,
            "cost_model": self.cost.describe() if self.cost else None,
        }
        if data.get("reset"):
            self.lateness.clear()
            self.wake_lateness.clear()
            self.prefill_wake_lateness.clear()
        conn.json(200, out)

    def _enqueue(
        self,
        conn: Conn,
        kind: str,
        *,
        rid: str,
        stream: bool,
        prompt_tokens: int,
        seed: int,
        max_new,
        ignore_eos: bool,
        include_usage: bool = False,
        model: str | None = None,
    ) -> None:
        if self.status != "Up" and self.status != "Starting":
            conn.json(503, {"error": {"message": "The server is shutting down."}})
            return
        if prompt_tokens >= self.context_len:
            conn.json(
                400,
                {
                    "error": {
                        "message": f"The input ({prompt_tokens} tokens) is longer than the model's "
                        f"context length ({self.context_len} tokens)."
                    }
                },
            )
            return
        if max_new is None:
            max_new = self.context_len - prompt_tokens
        max_new = int(max_new)
        if prompt_tokens + max_new > self.context_len:
            conn.json(
                400,
                {
                    "error": {
                        "message": (
                            f"Requested token count exceeds the model's maximum context length of {self.context_len} tokens. "
                            f"You requested a total of {prompt_tokens + max_new} tokens: {prompt_tokens} tokens from the input "
                            f"messages and {max_new} tokens for the completion. Please reduce the number of tokens in the input "
                            "messages or the completion to fit within the limit."
                        )
                    }
                },
            )
            return
        max_new = max(1, max_new)
        loop = asyncio.get_running_loop()
        r = Req(
            rid=rid,
            kind=kind,
            conn=conn,
            stream=stream,
            prompt_tokens=prompt_tokens,
            max_new=max_new,
            eos_at=eos_position(seed, max_new, ignore_eos, self.eos_mean),
            seed=seed,
            model=model or self.args.served_model_name or self.args.model_path,  # OpenAI: as requested
            include_usage=include_usage,
            arrival=conn.arrival or loop.time(),
        )
        conn.req = r
        self.requests_total += 1
        if stream:
            conn.start_stream()
            if kind == "chat":
                conn.write(r.first_chat_chunk())
        self.pick().submit(r)

    def h_generate(self, conn: Conn, data: dict) -> None:
        text, ids = data.get("text"), data.get("input_ids")
        if isinstance(text, list) or (isinstance(ids, list) and ids and isinstance(ids[0], list)):
            conn.json(400, {"error": {"message": "sglang_sim: batched /generate is not simulated"}})
            return
        if text is None and ids is None:
            conn.json(400, {"error": {"message": "Either text or input_ids should be provided."}})
            return
        sp = data.get("sampling_params") or {}
        if ids is not None:
            n = len(ids)
            seed = zlib.crc32(repr(ids).encode())
            self.prefix_cache.lookup_insert(ids)
        else:
            n = count_text_tokens(str(text))
            seed = zlib.crc32(str(text).encode())
            self.prefix_cache.lookup_insert(str(text).split())
        self._enqueue(
            conn,
            "generate",
            rid=str(data.get("rid") or uuid.uuid4().hex),
            stream=bool(data.get("stream")),
            prompt_tokens=n,
            seed=seed,
            max_new=sp.get("max_new_tokens", 128),
            ignore_eos=bool(sp.get("ignore_eos", False)),
        )

    def _stream_opts(self, data: dict) -> bool:
        so = data.get("stream_options") or {}
        return bool(so.get("include_usage", self.args.stream_response_default_include_usage))

    def h_completions(self, conn: Conn, data: dict) -> None:
        prompt = data.get("prompt", "")
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], int):
            n, seed = len(prompt), zlib.crc32(repr(prompt).encode())
            self.prefix_cache.lookup_insert(prompt)
        elif isinstance(prompt, list):
            if len(prompt) != 1:
                conn.json(400, {"error": {"message": "sglang_sim: batched prompts are not simulated"}})
                return
            n, seed = count_text_tokens(str(prompt[0])), zlib.crc32(str(prompt[0]).encode())
        else:
            n, seed = count_text_tokens(str(prompt)), zlib.crc32(str(prompt).encode())
        self._enqueue(
            conn,
            "completions",
            rid=str(data.get("rid") or uuid.uuid4().hex),
            stream=bool(data.get("stream")),
            prompt_tokens=n,
            seed=seed,
            max_new=data.get("max_tokens", 16),
            ignore_eos=bool(data.get("ignore_eos", False)),
            include_usage=self._stream_opts(data),
            model=str(data["model"]) if data.get("model") else None,
        )

    def h_chat(self, conn: Conn, data: dict) -> None:
        msgs = data.get("messages")
        if not isinstance(msgs, list) or not msgs:
            conn.json(400, {"error": {"message": "messages must be a non-empty list"}})
            return
        n = 0
        parts = []
        for m in msgs:
            c = m.get("content") if isinstance(m, dict) else None
            if isinstance(c, list):
                c = " ".join(str(p.get("text", "")) for p in c if isinstance(p, dict))
            c = str(c or "")
            parts.append(c)
            n += count_text_tokens(c) + 4  # the chat template's role markers
        max_new = data.get("max_completion_tokens", data.get("max_tokens"))
        self._enqueue(
            conn,
            "chat",
            rid=str(data.get("rid") or uuid.uuid4().hex),
            stream=bool(data.get("stream")),
            prompt_tokens=n,
            seed=zlib.crc32("\x00".join(parts).encode()),
            max_new=max_new,
            ignore_eos=bool(data.get("ignore_eos", False)),
            include_usage=self._stream_opts(data),
            model=str(data["model"]) if data.get("model") else None,
        )


ROUTES = {
    "/health": (("GET", "POST"), Sim.h_health),
    "/health_generate": (("GET", "POST"), Sim.h_health),
    "/model_info": (("GET",), Sim.h_model_info),
    "/get_model_info": (("GET",), Sim.h_model_info),
    "/server_info": (("GET",), Sim.h_server_info),
    "/get_server_info": (("GET",), Sim.h_server_info),
    "/v1/models": (("GET",), Sim.h_models),
    "/generate": (("POST", "PUT"), Sim.h_generate),
    "/v1/completions": (("POST",), Sim.h_completions),
    "/v1/chat/completions": (("POST",), Sim.h_chat),
    "/flush_cache": (("GET", "POST"), Sim.h_flush_cache),
    "/v1/loads": (("GET",), Sim.h_loads),
    "/get_load": (("GET",), Sim.h_loads),
    "/metrics": (("GET",), Sim.h_metrics),
    "/sim/stats": (("GET",), Sim.h_sim_stats),
}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    log = Log()
    sim = Sim(args, log)
    with contextlib.suppress(KeyboardInterrupt):
        sim.run()
