"""Multi-node rendezvous: what torch.distributed's TCP store and NCCL do between SGLang's nodes.

SGLang runs one model over several nodes with the same command on each but `--node-rank`
(docs/sglang.md section 2). Node rank 0's TP0 scheduler hosts torch's TCPStore at
`--dist-init-addr`; every other rank connects to it, and init_process_group returns only when all
`tp x pp` ranks have joined. Afterwards the ranks are tied by their collectives: a node that dies
makes the others' collectives fail.

The simulator acts this out with one TCP connection per non-zero node:

    rank >= 1 -> rank 0   SGLANG_SIM HELLO <node_rank> <nnodes>\\n
    rank 0 -> rank >= 1   SGLANG_SIM READY\\n       once every node has said hello
    rank 0 -> rank >= 1   SGLANG_SIM SHUTDOWN\\n    rank 0's graceful stop (SGLang's ShutdownReq broadcast)
    either way            SGLANG_SIM FATAL <why>\\n  optional, before closing (read; no node sends it now)

The open connection is the liveness: a closed connection (the process died, SIGKILL included:
the kernel closes its sockets) means the peer is gone. Standard library only.
"""

from __future__ import annotations

import asyncio
import contextlib
import os

MAGIC = "SGLANG_SIM"
DEFAULT_TIMEOUT_S = 20.0
RETRY_S = 0.5


def split_addr(addr: str | None, default_port: int = 50000) -> tuple[str, int]:
    """`host:port`, `[v6]:port` or `host` -> (host, port)."""
    addr = (addr or "").strip()
    if not addr:
        return "127.0.0.1", default_port
    if addr.startswith("["):  # [v6]:port
        host, _bracket, rest = addr[1:].partition("]")
        port = rest.removeprefix(":")
    elif addr.count(":") == 1:
        host, _colon, port = addr.partition(":")
    else:  # a bare name, or a bare IPv6 address
        host, port = addr, ""
    return host or "127.0.0.1", int(port) if port else default_port


def dist_timeout_s(args, env=None) -> float:
    """--dist-timeout (SGLang's flag) or SGLANG_SIM_DIST_TIMEOUT (default 20 s; SGLang's is torch's 600 s)."""
    env = os.environ if env is None else env
    if getattr(args, "dist_timeout", None):
        return float(args.dist_timeout)
    raw = env.get("SGLANG_SIM_DIST_TIMEOUT")
    return float(raw) if raw not in (None, "") else DEFAULT_TIMEOUT_S


class RendezvousTimeout(Exception):
    """Not every node joined in time. `joined`/`world` count torch ranks (tp x pp), as torch does."""

    def __init__(
        self,
        *,
        master: bool,
        timeout_s: float,
        joined: int,
        world: int,
        host: str,
        port: int,
        connected: bool = False,
    ):
        super().__init__(f"rendezvous timed out ({joined}/{world})")
        self.master, self.timeout_s, self.joined, self.world = master, timeout_s, joined, world
        self.host, self.port, self.connected = host, port, connected


class Rendezvous:
    """One node's end. Callbacks (called on the event loop, at most once each):

    on_peer_lost(node_rank, why)  rank 0: a node's connection closed or it sent FATAL, after READY
    on_master_lost(why)           rank >= 1: rank 0's connection closed without SHUTDOWN
    on_shutdown()                 rank >= 1: rank 0 sent SHUTDOWN
    """

    def __init__(
        self,
        *,
        nnodes: int,
        node_rank: int,
        addr: str | None,
        world: int,
        timeout_s: float,
        on_peer_lost=None,
        on_master_lost=None,
        on_shutdown=None,
    ):
        self.nnodes, self.node_rank, self.world = nnodes, node_rank, max(world, nnodes)
        self.host, self.port = split_addr(addr)
        self.timeout_s = timeout_s
        self.on_peer_lost = on_peer_lost or (lambda rank, why: None)
        self.on_master_lost = on_master_lost or (lambda why: None)
        self.on_shutdown = on_shutdown or (lambda: None)
        self.ready = False
        self.closing = False  # our own shutdown: lost peers are expected
        self.peers: dict[int, asyncio.StreamWriter] = {}
        self._all_joined: asyncio.Event | None = None
        self._server: asyncio.AbstractServer | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._tasks: set = set()

    @property
    def ranks_per_node(self) -> int:
        return max(1, self.world // self.nnodes)

    async def start(self) -> None:
        """Return when every node has joined; raise RendezvousTimeout after timeout_s."""
        if self.node_rank == 0:
            await self._serve()
        else:
            await self._join()
        self.ready = True

    # -- node rank 0: the store ---------------------------------------------------------------
    async def _serve(self) -> None:
        self._all_joined = asyncio.Event()
        # torch's TCPStore server listens on every interface of the host (IPv4 unless the
        # rendezvous address is an IPv6 literal: containers often have IPv6 switched off).
        bind = "::" if ":" in self.host else "0.0.0.0"
        self._server = await asyncio.start_server(self._on_client, bind, self.port, reuse_address=True)
        try:
            await asyncio.wait_for(self._all_joined.wait(), self.timeout_s)
        except asyncio.TimeoutError:
            raise RendezvousTimeout(
                master=True,
                timeout_s=self.timeout_s,
                joined=self.ranks_per_node * (1 + len(self.peers)),
                world=self.world,
                host=self.host,
                port=self.port,
            ) from None
        for w in self.peers.values():
            w.write(f"{MAGIC} READY\n".encode())

    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        rank = None
        try:
            line = await asyncio.wait_for(reader.readline(), self.timeout_s)
            parts = line.decode("latin-1").split()
            if len(parts) != 4 or parts[:2] != [MAGIC, "HELLO"]:
                writer.close()
                return
            rank, nnodes = int(parts[2]), int(parts[3])
            late = self.ready or self._all_joined is None or self._all_joined.is_set()
            if nnodes != self.nnodes or not 0 < rank < self.nnodes or rank in self.peers or late:
                # A mismatched, duplicate or late node: torch would leave it waiting at the store.
                rank = None
                await reader.read()
                return
            self.peers[rank] = writer
            if len(self.peers) == self.nnodes - 1:
                self._all_joined.set()
            while True:
                line = await reader.readline()
                if not line:
                    why = "connection closed"
                    break
                text = line.decode("latin-1").strip()
                if text.startswith(f"{MAGIC} FATAL"):
                    why = text.removeprefix(f"{MAGIC} FATAL").strip() or "fatal"
                    break
        except (OSError, ValueError, asyncio.TimeoutError, asyncio.IncompleteReadError):
            why = "connection reset"
        finally:
            with contextlib.suppress(Exception):
                writer.close()
        if rank is None:
            return
        if self.peers.get(rank) is writer:
            del self.peers[rank]
        if self.ready and not self.closing:
            self.on_peer_lost(rank, why)

    def shutdown(self) -> None:
        """Rank 0's graceful stop: tell every node (SGLang broadcasts ShutdownReq to all TP ranks)."""
        self.closing = True
        for w in list(self.peers.values()):
            with contextlib.suppress(Exception):
                # transport.write sends at once when nothing is queued: the bytes leave before
                # the process SIGKILLs itself, and the kernel closes the socket after them.
                w.write(f"{MAGIC} SHUTDOWN\n".encode())

    # -- node rank >= 1: a client -------------------------------------------------------------
    async def _join(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        connected = False
        while True:
            left = deadline - loop.time()
            if left <= 0:
                raise RendezvousTimeout(
                    master=False,
                    timeout_s=self.timeout_s,
                    joined=0,
                    world=self.world,
                    host=self.host,
                    port=self.port,
                    connected=connected,
                )
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection(self.host, self.port), left)
            except (OSError, asyncio.TimeoutError):
                await asyncio.sleep(min(RETRY_S, max(0.0, deadline - loop.time())))
                continue
            connected = True
            writer.write(f"{MAGIC} HELLO {self.node_rank} {self.nnodes}\n".encode())
            try:
                line = await asyncio.wait_for(reader.readline(), max(0.01, deadline - loop.time()))
            except (OSError, asyncio.TimeoutError):
                line = b""
            if line.decode("latin-1").strip() == f"{MAGIC} READY":
                self._writer = writer
                task = loop.create_task(self._watch_master(reader))
                self._tasks.add(task)
                return
            with contextlib.suppress(Exception):
                writer.close()
            if loop.time() < deadline:
                await asyncio.sleep(min(RETRY_S, max(0.0, deadline - loop.time())))

    async def _watch_master(self, reader: asyncio.StreamReader) -> None:
        why = "connection closed"
        try:
            while True:
                line = await reader.readline()
                if not line:
                    break
                text = line.decode("latin-1").strip()
                if text == f"{MAGIC} SHUTDOWN":
                    self.closing = True
                    self.on_shutdown()
                    return
                if text.startswith(f"{MAGIC} FATAL"):
                    why = text.removeprefix(f"{MAGIC} FATAL").strip() or "fatal"
                    break
        except OSError:
            why = "connection reset"
        if not self.closing:
            self.on_master_lost(why)
