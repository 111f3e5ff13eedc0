"""Prefill/decode disaggregation (`--disaggregation-mode prefill|decode`), as SGLang 0.5.x acts it.

sglang-router (`--pd-disaggregation`) sends each request to a prefill server and a decode server
at once, both carrying `bootstrap_host`, `bootstrap_port` and `bootstrap_room`. Here:

- the prefill server listens on `--disaggregation-bootstrap-port` (its bootstrap server: `GET
  /health` answers 200, and the simulator's handshake `ROOM <room>`);
- the decode server connects to the request's bootstrap address and says `ROOM <room>` (the
  handshake: it has room for the KV); the prefill server waits for that handshake up to
  SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT, prefills the prompt (its scheduler, one token), then
  "sends" the KV: the plan's `kv_bytes_per_token` x prompt tokens / the link (speed.kv_transfer_s,
  the speed model's one formula), one transfer at a time on the server's link (prompts that finish
  together queue, as speed.predict_pd assumes), and answers the handshake `KV` (the stage seconds,
  queue included, go to its metrics);
- the decode server waits up to SGLANG_DISAGGREGATION_WAITING_TIMEOUT for that answer, then
  decodes from the prefill's token (no prefill of its own).

Failures log SGLang's lines (sglang/srt/disaggregation/prefill.py, decode.py, mooncake/conn.py) and
answer the request 500: a handshake that never comes (`Prefill bootstrap failed ... timed out after
Xs in KVPoll.Bootstrapping`), a KV that never arrives (`Decode transfer failed ... in
KVPoll.WaitingForInput`), a transfer error (`Prefill transfer failed ... Decode instance could be
dead, remote mooncake session ... is not alive` on prefill, `Decode transfer failed ... Failed to get
kvcache from prefill instance, it might be dead` on decode). Faults (SGLANG_SIM_FAULT) on the
prefill server: `bootstrap_timeout_after:N`, `transfer_error_after:N` (after N finished requests).

A request whose `bootstrap_host` is SGLang's placeholder (2.2.2.2: its warm-up and health probes,
and the gate's confirmation) is served by one server alone, with no peer and no transfer.
"""

from __future__ import annotations

import asyncio
import contextlib

from sglang_layouts.gate.probe import FAKE_BOOTSTRAP_HOST
from sglang_layouts.speed import kv_link, kv_transfer_s

from .cost import env_float

DEFAULT_TIMEOUT_S = 300.0  # SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT / _WAITING_TIMEOUT in 0.5.x

BOOTSTRAP_WARNING = (
    "Some requests timed out when bootstrapping, which means prefill instances fail to receive the KV "
    "indices from the decode instance of this request. If a greater mean TTFT is acceptable, you can "
    "'export SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT=600' (10 minutes) to relax the timeout condition. "
)
WAITING_WARNING = (
    "Some requests fail to receive KV Cache transfer done signal after bootstrapping. If a greater mean "
    "TTFT is acceptable, you can 'export SGLANG_DISAGGREGATION_WAITING_TIMEOUT=600' (10 minutes) to "
    "relax the timeout condition. "
)
DECODE_DEAD = "Failed to get kvcache from prefill instance, it might be dead"


class _Room:
    """One bootstrap room on the prefill server: the decode's handshake, then the KV's outcome."""

    def __init__(self, loop):
        self.handshake = asyncio.Event()
        self.result: asyncio.Future = loop.create_future()  # ("KV",) | ("FAIL", msg)


class PD:
    """The PD part of Sim (server.py): the bootstrap server, the handshake and the KV transfer."""

    @property
    def pd_mode(self) -> str:
        return str(getattr(self.args, "disaggregation_mode", None) or "null")

    def _pd_init(self) -> None:
        self.pd_rooms: dict[int, _Room] = {}
        self.pd_warned: set[str] = set()
        # on a prefill server, per stage: [seconds summed, requests], for /metrics as SGLang's
        # sglang:per_stage_req_latency_seconds (prefill_forward: from its batch's start to the prefill's end)
        self.pd_stages = {"prefill_forward": [0.0, 0], "prefill_transfer_kv_cache": [0.0, 0]}
        self.pd_failures_total = 0
        # the link to the decode servers carries one request's KV at a time
        self.pd_link_busy = asyncio.Lock()

    def _pd_observe(self, stage: str, seconds: float) -> None:
        total = self.pd_stages[stage]
        total[0] += seconds
        total[1] += 1

    def _pd_prefix(self) -> str:
        return self.schedulers[0].prefix if self.schedulers else " TP0"

    def _warn_once(self, text: str) -> None:
        if text not in self.pd_warned:
            self.pd_warned.add(text)
            self.log.rank(self._pd_prefix(), text)

    def _pd_failed(self, conn, msg: str) -> None:
        """A request's KV bootstrap or transfer failed: SGLang's line, the failure counted, and the
        request answered with it while its connection is there to answer."""
        self.log.rank(self._pd_prefix(), msg)
        self.pd_failures_total += 1
        if conn is not None and not conn.closed:
            conn.error(500, msg)

    def pd_link(self) -> dict:
        """The link of this simulated host: the prefill and decode servers share it (one machine)."""
        link = kv_link(self.hardware, getattr(self.args, "disaggregation_transfer_backend", None), True)
        fixed = env_float("SGLANG_SIM_KV_LINK_GBS", None)
        if fixed is not None:  # tests pin the link
            link = {**link, "gbs": fixed, "source": "SGLANG_SIM_KV_LINK_GBS"}
        return link

    def _room(self, room: int) -> _Room:
        if room not in self.pd_rooms:
            self.pd_rooms[room] = _Room(asyncio.get_running_loop())
        return self.pd_rooms[room]

    # -- the prefill server's bootstrap server ------------------------------------------------
    async def start_bootstrap_server(self, loop) -> None:
        port = int(self.args.disaggregation_bootstrap_port)
        try:
            await asyncio.start_server(self._bootstrap_conn, self.args.host, port, reuse_address=True)
        except OSError as e:
            self.log.raw(
                f"OSError: [Errno 98] error while attempting to bind on address ('{self.args.host}', {port}): "
                f"address already in use ({e.strerror})"
            )
            from .failures import kill_self

            kill_self()

    async def _bootstrap_conn(self, reader, writer) -> None:
        try:
            line = await reader.readline()
            if line.startswith(b"GET "):
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass
                ok = line.split()[1:2] == [b"/health"]
                body = b"OK" if ok else b"Not Found"
                writer.write(
                    b"HTTP/1.1 %d %s\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%b"
                    % (200 if ok else 404, b"OK" if ok else b"Not Found", len(body), body)
                )
            elif line.startswith(b"ROOM "):
                st = self._room(int(line.split()[1]))
                st.handshake.set()
                result = await st.result
                writer.write((" ".join(map(str, result)) + "\n").encode())
            await writer.drain()
        except (OSError, ValueError, IndexError, asyncio.CancelledError):
            pass
        finally:
            with contextlib.suppress(OSError):
                writer.close()

    # -- a request with a bootstrap room ------------------------------------------------------
    def pd_admit(self, conn, r, data: dict, start) -> bool:
        """Take a disaggregated request (True), or leave it to the normal path (False). `start`
        starts the response stream and submits the request to a scheduler."""
        if self.pd_mode not in ("prefill", "decode"):
            return False
        room = data.get("bootstrap_room")
        if room is None:
            conn.error(400, "Disaggregated request received without bootstrap room id")
            return True
        if data.get("bootstrap_host") == FAKE_BOOTSTRAP_HOST:
            r.prefilled = self.pd_mode == "decode"  # SGLang's warm-up/probe: no peer, no transfer
            return False
        loop = asyncio.get_running_loop()
        if self.pd_mode == "prefill":
            task = loop.create_task(self._pd_prefill(conn, r, int(room), start))
        else:
            host = str(data.get("bootstrap_host") or "127.0.0.1")
            port = int(data.get("bootstrap_port") or 8998)
            task = loop.create_task(self._pd_decode(conn, r, int(room), host, port, start))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    def _fault_due(self, name: str) -> bool:
        n = self.faults.get(name)
        return n is not None and self.finished_count >= n

    async def _pd_prefill(self, conn, r, room: int, start) -> None:
        loop = asyncio.get_running_loop()
        st = self._room(room)
        t0 = loop.time()
        timeout = env_float("SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT", DEFAULT_TIMEOUT_S)
        try:
            if self._fault_due("bootstrap_timeout_after"):
                await asyncio.sleep(timeout)  # the decode's handshake is never seen
                raise TimeoutError
            await asyncio.wait_for(st.handshake.wait(), timeout)
        except TimeoutError:
            elapsed = loop.time() - t0
            self._warn_once(BOOTSTRAP_WARNING)
            msg = (
                f"Prefill bootstrap failed for request rank=0 req.rid={r.rid!r} req.bootstrap_room={room} "
                f"with exception KVTransferError(bootstrap_room={room}): Request {room} timed out after "
                f"{elapsed:.1f}s in KVPoll.Bootstrapping"
            )
            self.pd_rooms.pop(room, None)  # the decode side waits on, to its own timeout
            self._pd_failed(conn, msg)
            return
        # the prefill itself: one token (SGLang's prefill server samples the first token)
        r.pd_room = room
        r.max_new, r.eos_at, r.stream = 1, None, False
        start()

    def pd_prefilled(self, r, t_end: float) -> None:
        """A prefill server's request is prefilled: send its KV, then answer it."""
        # decided now, before this request counts as finished (faults count finished requests)
        fail = self._fault_due("transfer_error_after")
        task = asyncio.get_running_loop().create_task(self._pd_send(r, t_end, fail))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _pd_send(self, r, t_end: float, fail: bool) -> None:
        room, conn = r.pd_room, r.conn
        st = self.pd_rooms.pop(room, None) or _Room(asyncio.get_running_loop())
        if fail:
            msg = (
                f"Prefill transfer failed for request rank=0 req.rid={r.rid!r} req.bootstrap_room={room} "
                f"with exception KVTransferError(bootstrap_room={room}): Decode instance could be dead, "
                f"remote mooncake session 127.0.0.1:{15000 + room % 1000} is not alive"
            )
            if not st.result.done():
                st.result.set_result(("FAIL", DECODE_DEAD))
            self._pd_failed(conn, msg)
            return
        prefill_s = max(0.0, t_end - r.forward_t0)
        self._pd_observe("prefill_forward", prefill_s)
        transfer = kv_transfer_s(self.plan.get("kv_bytes_per_token"), r.prompt_tokens, self.pd_link()["gbs"])
        queued_at = asyncio.get_running_loop().time()
        async with self.pd_link_busy:
            await asyncio.sleep(transfer)
        self._pd_observe("prefill_transfer_kv_cache", asyncio.get_running_loop().time() - queued_at)
        if not st.result.done():
            st.result.set_result(("KV",))
        if conn is not None:
            conn.json(200, r.final_body(t_end))

    async def _pd_decode(self, conn, r, room: int, host: str, port: int, start) -> None:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        timeout = env_float("SGLANG_DISAGGREGATION_WAITING_TIMEOUT", DEFAULT_TIMEOUT_S)
        reason = None
        writer = None
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
            writer.write(f"ROOM {room}\n".encode())
            await writer.drain()
            left = max(0.0, timeout - (loop.time() - t0))
            answer = (await asyncio.wait_for(reader.readline(), left)).decode().split()
            if not answer:
                reason = DECODE_DEAD  # the prefill server went away
            elif answer[0] == "FAIL":
                reason = DECODE_DEAD
        except TimeoutError:
            self._warn_once(WAITING_WARNING)
            reason = f"Request {room} timed out after {loop.time() - t0:.1f}s in KVPoll.WaitingForInput"
        except OSError:
            reason = DECODE_DEAD
        finally:
            if writer is not None:
                with contextlib.suppress(OSError):
                    writer.close()
        if reason is not None:
            msg = (
                f"Decode transfer failed for request rank=0 decode_req.req.rid={r.rid!r} "
                f"decode_req.req.bootstrap_room={room} with exception KVTransferError(bootstrap_room={room}): "
                f"{reason}"
            )
            self._pd_failed(conn, msg)
            return
        r.prefilled = True  # the first token came with the KV: no prefill here
        start()
