"""Multi-node: node rank 0 serves the API and hosts the rendezvous; ranks > 0 join it, serve
SGLang's dummy health server only, and follow rank 0 (its shutdown, its death).

torch.distributed's rendezvous itself is dist.py; this is what the server does around it.
"""

from __future__ import annotations

import asyncio
import os
import sys

from . import dist, failures
from .http_conn import Conn
from .log import SIGQUIT_FROM_CHILD


class MultiNode:
    """The multi-node side of Sim (server.py)."""

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
            text = failures.bind_error_traceback(self.dist.port, e.strerror)
            self.log.rank(self.prefix(ranks[0]) if ranks else " TP0", "Scheduler hit an exception: " + text)
            self._die_of_sigquit()

    def _die_of_sigquit(self) -> None:
        """A scheduler died during launch: the main process's launch-phase SIGQUIT handler."""
        self.log.main(SIGQUIT_FROM_CHILD)
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

    def dispatch_dummy(self, conn: Conn, method: str, path: str) -> None:
        """Non-zero node ranks run SGLang's dummy health server only (utils/common.py
        launch_dummy_health_check_server: FastAPI, GET, 200 whatever the schedulers do)."""
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
