"""The simulator's process: start-up as SGLang does it, then SGLang's HTTP API.

Sim is one server process; each concept has its file: http_conn.py (HTTP/1.1 connections),
startup.py (the start-up phases and their log lines), multinode.py (rank 0 vs ranks > 0),
pd.py (prefill/decode disaggregation), routes.py (the OpenAI and SGLang endpoints). This file holds what they share: the process's
state, its signals and shutdown, the bookkeeping of finished requests, and the injected faults.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections import deque

from . import dist, failures
from .cost import env_float
from .engine import Req, Scheduler
from .flags import parse_args
from .http_conn import now
from .log import Log
from .multinode import MultiNode
from .pd import PD
from .plan import hardware_from_env
from .prefix_cache import PrefixCache
from .routes import Routes
from .startup import Startup

LOG_IDLE_S = 0.02  # schedule log: written after the schedulers have been idle this long
LOG_MAX_PENDING = 4096  # ... or when this many records wait


def parse_faults(spec: str | None) -> dict:
    """`crash_after:N,hang_after:N,nccl_timeout_after:N,killed_at_in_flight:N,slow_start:S,jit_missing:TOOL,
    bootstrap_timeout_after:N,transfer_error_after:N` (the last two: a prefill server, pd.py)
    -> {name: value} (a number; for jit_missing the build tool's name, ninja when not given)."""
    out: dict = {}
    for part in (spec or "").split(","):
        part = part.strip()
        if not part:
            continue
        name, _colon, value = part.partition(":")
        if name not in (
            "crash_after",
            "hang_after",
            "nccl_timeout_after",
            "killed_at_in_flight",
            "slow_start",
            "jit_missing",
            "bootstrap_timeout_after",
            "transfer_error_after",
        ):
            raise SystemExit(f"SGLANG_SIM_FAULT: unknown fault {name!r}")
        if name == "jit_missing":
            out[name] = value or "ninja"
        else:
            out[name] = float(value) if name == "slow_start" else int(value or 0)
    return out


class Sim(Startup, MultiNode, PD, Routes):
    """One SGLang server process: its state, signals, request bookkeeping and faults; the start-up,
    multi-node and HTTP-route parts come from the classes it is made of."""

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
        self.eos_mean = int(env_float("SGLANG_SIM_EOS_MEAN", 256))
        self.dist: dist.Rendezvous | None = None  # multi-node: the connection(s) to the other nodes
        self._pd_init()

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
            await asyncio.sleep(env_float("SGLANG_SIM_DRAIN_POLL_SECONDS", 0.5))
        if self.dist is not None:  # ShutdownReq to every TP rank, the other nodes' included
            self.dist.shutdown()
        self.log.main(
            f"kill_process_tree called: parent_pid={os.getpid()}, include_parent=True, pid={os.getpid()}"
        )
        failures.kill_self()

    # -- requests -------------------------------------------------------------------------
    def pick(self) -> Scheduler:
        s = self.schedulers[self._rr % len(self.schedulers)]
        self._rr += 1
        return s

    def finish(self, r: Req, t_end: float) -> None:
        if r.pd_room is not None:
            self.pd_prefilled(r, t_end)  # a prefill server answers once the KV has left (pd.py)
        elif r.kind != "health" and r.conn is not None:
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
        if busy or now() - self.last_output < LOG_IDLE_S:
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

    def check_in_flight(self) -> None:
        """killed_at_in_flight:N: SIGKILL, with no line of its own, as the N-th request at once
        arrives (an operator's kill -9, the OOM killer): an event of the load itself, such as the
        first level of a benchmark with more than N - 1 streams, not a moment a test must hit."""
        n = self.faults.get("killed_at_in_flight")
        if n and sum(r.kind != "health" for s in self.schedulers for r in (*s.running, *s.waiting)) >= n:
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGKILL)

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
        self.log.rank(prefix, "Scheduler hit an exception: " + failures.crash_traceback())
        self.log.main("SIGQUIT received. signum=None, frame=None. It usually means one child failed.")
        self.log.main(
            f"kill_process_tree called: parent_pid={os.getpid()}, include_parent=True, pid={os.getpid()}"
        )
        failures.kill_self()

    async def _nccl_timeout(self, timeout_s: float | None = None) -> None:
        if timeout_s is None:
            timeout_s = env_float("SGLANG_SIM_NCCL_TIMEOUT_SECONDS", float(self.args.dist_timeout or 600))
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


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    log = Log()
    sim = Sim(args, log)
    with contextlib.suppress(KeyboardInterrupt):
        sim.run()
