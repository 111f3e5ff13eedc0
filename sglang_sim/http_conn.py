"""HTTP/1.1 as SGLang's uvicorn speaks it (keep-alive, chunked responses), on
asyncio.BufferedProtocol: small and fast. The server (Sim) answers each parsed request."""

from __future__ import annotations

import asyncio
import json
import time
from email.utils import formatdate
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .engine import Req
    from .log import Log

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
MAX_HEADER = 64 * 1024
MAX_BODY = 256 * 1024 * 1024
now = time.monotonic  # = asyncio's loop.time(): one clock for arrival and the schedule
_date_cache = [0, ""]


class Server(Protocol):
    """What a Conn uses of the server object (server.Sim): naming the protocol rather than Sim keeps
    this module free of imports from server, multinode, routes and startup, which all import it."""

    halted: bool
    log: Log

    def dispatch(self, conn: Conn, method: str, target: str, headers: dict, body: bytes) -> None: ...


def _http_date() -> str:
    """The Date header, formatted once per second (email.utils.formatdate costs ~10 us a call)."""
    t = int(time.time())
    if _date_cache[0] != t:
        _date_cache[0] = t
        _date_cache[1] = formatdate(t, usegmt=True)
    return _date_cache[1]


class Conn(asyncio.BufferedProtocol):
    def __init__(self, sim: Server):
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
        t = now()
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
                k, _colon, v = line.partition(":")
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
                    self.error(500, repr(e))

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

    def error(self, status: int, message: str):
        """OpenAI's error body, which SGLang's handlers answer with too."""
        self.json(status, {"error": {"message": message}})

    def start_stream(self):
        self.write(
            f"{self._head(200, 'text/event-stream; charset=utf-8', '')}transfer-encoding: chunked\r\n\r\n".encode()
        )

    def done(self):
        self.req = None
        self.busy = False
        if not self.keep_alive:
            if self.transport is not None:
                self.transport.close()
            self.closed = True
        elif self.buf:
            asyncio.get_running_loop().call_soon(self._next)
