"""The load generator's HTTP/1.1 client (standard library only: it runs on a bare host ``python3``).

An asyncio client built on ``asyncio.BufferedProtocol`` timestamps every byte it receives with
``time.perf_counter()`` in its read callback (``buffer_updated``), decodes chunked transfer encoding and
Server-Sent Events itself, and keeps the JSON decoding of the events out of the measured path (events are
parsed after the level ends, by loadgen.analyse). ``run_closed_loop`` drains request bodies with one
keep-alive connection per worker; ``run_open_loop`` sends each body at its scheduled time whatever the
server does. ``http_json`` is the plain request of the set-up calls (health, server info, /metrics)."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import time
import urllib.error
import urllib.request
from urllib.parse import urlsplit

APIS = ("generate", "completions", "chat")
API_PATHS = {"generate": "/generate", "completions": "/v1/completions", "chat": "/v1/chat/completions"}


def _ssl_context(url):
    return ssl.create_default_context() if url.startswith("https:") else None


def http_json(url, method="GET", body=None, api_key=None, timeout=30.0):
    """One plain request (no streaming); returns (status, parsed JSON or text)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=_ssl_context(url)) as resp:
            raw = resp.read()
            status = resp.status
    except urllib.error.HTTPError as exc:
        raw, status = exc.read(), exc.code
    text = raw.decode("utf-8", "replace")
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


class _Response:
    """Parser of one HTTP/1.1 response whose body is an SSE stream; records (arrival, payload) per event."""

    def __init__(self, done):
        self.done = done
        self.head = b""
        self.status = None
        self.headers = {}
        self.in_body = False
        self.chunked = False
        self.remaining = None  # Content-Length left, or None (read to EOF)
        self.chunk_left = 0  # bytes of the current chunk (plus its CRLF) still to come
        self.raw = b""  # undecoded chunked framing
        self.sse = b""  # decoded body not yet split into events
        self.cr_pending = False
        self.events = []  # [(t, payload bytes)]
        self.t_done = None
        self.body = b""
        self.complete = False  # the body ended where HTTP framing says it ends
        self.t_complete = None
        self.keep_alive = True

    def feed(self, data, t):
        if not self.in_body:
            self.head += data
            self.head = self.head.lstrip(b"\r\n")
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                return
            self._parse_head(self.head[:end].decode("latin-1"))
            data = self.head[end + 4 :]
            self.head = b""
            self.in_body = True
            if self.complete:
                return
        if data:
            self._body(data, t)

    def finish(self, exc):
        if not self.done.done():
            self.done.set_result(exc)

    def _parse_head(self, head):
        lines = head.split("\r\n")
        parts = lines[0].split(" ", 2)
        self.status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
        for line in lines[1:]:
            k, _colon, v = line.partition(":")
            self.headers[k.strip().lower()] = v.strip()
        self.keep_alive = (
            lines[0].startswith("HTTP/1.1") and self.headers.get("connection", "").lower() != "close"
        )
        self.chunked = "chunked" in self.headers.get("transfer-encoding", "").lower()
        if not self.chunked:
            if "content-length" in self.headers:
                self.remaining = int(self.headers["content-length"])
                if self.remaining == 0:
                    self._end()
            else:
                self.keep_alive = False

    def _end(self):
        self.t_complete = time.perf_counter()
        self.complete = True
        self.finish(None)

    def _body(self, data, t):
        if self.chunked:
            self.raw += data
            while self.raw and not self.complete:
                if self.chunk_left == 0:
                    nl = self.raw.find(b"\r\n")
                    if nl < 0:
                        return
                    size = int(self.raw[:nl].split(b";", 1)[0] or b"0", 16)
                    self.raw = self.raw[nl + 2 :]
                    if size == 0:
                        self._end()  # a trailing CRLF (no trailers) is stripped by the next response
                        return
                    self.chunk_left = size + 2
                take = self.raw[: self.chunk_left]
                self.raw = self.raw[len(take) :]
                self.chunk_left -= len(take)
                payload = take if self.chunk_left >= 2 else take[: len(take) - (2 - self.chunk_left)]
                if payload:
                    self._sse(payload, t)
        else:
            if self.remaining is not None:
                data = data[: self.remaining]
                self.remaining -= len(data)
            self._sse(data, t)
            if self.remaining == 0:
                self._end()

    def _sse(self, data, t):
        if self.status != 200:
            self.body += data
            return
        if self.cr_pending:
            data = b"\r" + data
            self.cr_pending = False
        if data.endswith(b"\r"):
            data = data[:-1]
            self.cr_pending = True
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n")
        self.sse += data
        while True:
            end = self.sse.find(b"\n\n")
            if end < 0:
                return
            event = self.sse[:end]
            self.sse = self.sse[end + 2 :]
            for line in event.split(b"\n"):
                if line.startswith(b"data:"):
                    payload = line[5:].strip()
                    if payload == b"[DONE]":
                        self.t_done = t
                    else:
                        self.events.append((t, payload))


_RECV_BUFFER = 65536


class _Conn(asyncio.BufferedProtocol):
    """One persistent HTTP/1.1 connection; every read is timestamped in buffer_updated.

    A BufferedProtocol: the transport reads with recv_into() into this connection's 64 KiB buffer.
    A plain Protocol gets sock.recv(256 KiB) from asyncio, whose 256 KiB allocation (above glibc's
    mmap threshold) cost ~14 us per read, i.e. ~1 ms of client time per decode step of 64 streams."""

    def __init__(self, response=None):
        self.transport = None
        self.response = response  # set before the request leaves: the answer may come at once
        self.closed = False
        self.lost = None
        self.buf = memoryview(bytearray(_RECV_BUFFER))
        self.pending = []  # [(response, bytes, t)] read but not yet parsed

    def connection_made(self, transport):
        self.transport = transport

    def get_buffer(self, sizehint):
        return self.buf

    def buffer_updated(self, nbytes):
        self._received(self.buf[:nbytes].tobytes(), time.perf_counter())

    def data_received(self, data):  # transports that do not use the buffer (older SSL paths)
        self._received(data, time.perf_counter())

    def _received(self, data, t):
        # Only timestamped here; parsed in the next loop pass, so that every socket that is readable
        # at once (64 streams served by one decode step) is read and stamped before any is parsed.
        if self.response is not None:
            if not self.pending:
                asyncio.get_running_loop().call_soon(self._feed)
            self.pending.append((self.response, data, t))

    def _feed(self):
        pending, self.pending = self.pending, []
        for response, data, t in pending:
            response.feed(data, t)

    def eof_received(self):
        self._feed()
        self.closed = True
        if self.response is not None:
            self.response.finish(None)
        return False

    def connection_lost(self, exc):
        self._feed()
        self.closed = True
        self.lost = exc
        if self.response is not None:
            self.response.finish(exc)


class Endpoint:
    """Where the streamed requests go (address resolved once)."""

    def __init__(self, url, api_key=None):
        parts = urlsplit(url)
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.ssl = _ssl_context(url)
        self.base = parts.path.rstrip("/")
        self.host_header = self.host if parts.port is None else f"{self.host}:{self.port}"
        self.api_key = api_key
        self.addrinfo = None

    def resolve(self):
        if self.addrinfo is None:
            infos = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
            if not infos:
                raise OSError(f"cannot resolve {self.host}")
            self.addrinfo = infos[0]
        return self.addrinfo

    def request_bytes(self, path, body: bytes) -> bytes:
        head = (
            f"POST {self.base}{path} HTTP/1.1\r\n"
            f"Host: {self.host_header}\r\n"
            "User-Agent: sglang-layouts-bench\r\n"
            "Content-Type: application/json\r\n"
            "Accept: text/event-stream\r\n"
            f"Content-Length: {len(body)}\r\n"
        )
        if self.api_key:
            head += f"Authorization: Bearer {self.api_key}\r\n"
        return (head + "\r\n").encode("latin-1") + body


def _expire(done):
    if not done.done():
        done.set_exception(asyncio.TimeoutError())


class Client:
    """One worker's connection: reused across its requests (keep-alive), reopened when the server closes it.

    A new connection is opened with a non-blocking connect and the request is sent on the raw socket
    at once, before the asyncio transport is set up, so no loop iteration sits between t_start and
    the request leaving."""

    def __init__(self, endpoint: Endpoint, keep_alive: bool = True):
        self.endpoint = endpoint
        self.keep_alive = keep_alive  # False: a connection of its own per request, closed after the answer
        self.conn = None

    def close(self):
        if self.conn is not None and self.conn.transport is not None:
            self.conn.transport.close()
        self.conn = None

    async def _open_and_send(self, request, response):
        loop = asyncio.get_running_loop()
        ep = self.endpoint
        if ep.ssl is not None:
            _transport, conn = await loop.create_connection(
                lambda: _Conn(response), ep.host, ep.port, ssl=ep.ssl
            )
            conn.transport.write(request)
            return conn
        family, type_, proto, _canonname, addr = ep.resolve()
        sock = socket.socket(family, type_, proto)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await loop.sock_connect(sock, addr)
            try:
                sent = sock.send(request)
            except BlockingIOError:
                sent = 0
            _transport, conn = await loop.create_connection(lambda: _Conn(response), sock=sock)
        except BaseException:
            sock.close()
            raise
        if sent < len(request):
            conn.transport.write(request[sent:])
        return conn

    async def connect(self, timeout):
        """Open the connection ahead of the first request (so a burst of requests pays no TCP set-up)."""
        loop = asyncio.get_running_loop()
        ep = self.endpoint
        try:
            if ep.ssl is not None:
                _transport, self.conn = await asyncio.wait_for(
                    loop.create_connection(_Conn, ep.host, ep.port, ssl=ep.ssl), timeout
                )
                return
            family, type_, proto, _canonname, addr = ep.resolve()
            sock = socket.socket(family, type_, proto)
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                await asyncio.wait_for(loop.sock_connect(sock, addr), timeout)
                _transport, self.conn = await loop.create_connection(_Conn, sock=sock)
            except BaseException:
                sock.close()
                raise
        except (OSError, asyncio.TimeoutError):
            self.conn = None  # the first request will try again and report the error

    async def request(self, path, body: bytes, timeout):
        reused = self.conn is not None and not self.conn.closed
        out = await self._request(path, body, timeout)
        if (
            reused
            and out["status"] is None
            and not out["events"]
            and out["error"]
            and "timeout" not in out["error"]
        ):
            # the server closed the idle keep-alive connection as we sent: once more on a new one
            out = await self._request(path, body, timeout)
        return out

    async def _request(self, path, body: bytes, timeout):
        loop = asyncio.get_running_loop()
        request = self.endpoint.request_bytes(path, body)
        done = loop.create_future()
        response = _Response(done)
        out = {
            "t_start": None,
            "status": None,
            "events": [],
            "t_end": None,
            "error": None,
            "done_seen": False,
        }
        reuse = self.conn is not None and not self.conn.closed
        out["t_start"] = time.perf_counter()
        try:
            if reuse:
                self.conn.response = response
                self.conn.transport.write(request)
            else:
                self.close()
                self.conn = await asyncio.wait_for(self._open_and_send(request, response), timeout)
                if self.conn.closed:
                    response.finish(self.conn.lost)
            remaining = timeout - (time.perf_counter() - out["t_start"])
            # A timer instead of wait_for(shield(...)): the task resumes one loop iteration after the
            # answer ends, so the stream's next request leaves at once.
            timer = loop.call_later(max(remaining, 0.001), _expire, done)
            try:
                exc = await done
            finally:
                timer.cancel()
        except asyncio.TimeoutError:
            out["error"] = f"timeout after {timeout:g} s"
            out["t_end"] = time.perf_counter()
            out["events"], out["status"] = response.events, response.status
            if self.conn is not None and self.conn.transport is not None:
                self.conn.transport.abort()
            self.conn = None
            return out
        except OSError as exc:
            out["error"] = f"connection error: {exc}"
            out["t_end"] = time.perf_counter()
            self.close()
            return out
        out["status"] = response.status
        out["events"] = response.events
        out["done_seen"] = response.t_done is not None
        out["t_complete"] = response.t_complete
        out["t_end"] = response.t_done or (response.events[-1][0] if response.events else time.perf_counter())
        if response.status is None:
            out["error"] = f"connection closed before a response: {exc or 'EOF'}"
        elif response.status != 200:
            out["error"] = f"HTTP {response.status}: {response.body[:300].decode('utf-8', 'replace').strip()}"
        elif exc is not None and not response.complete:
            out["error"] = f"connection lost: {exc}"
        if not (self.keep_alive and response.complete and response.keep_alive) or self.conn.closed:
            self.close()
        else:
            self.conn.response = None
        return out


async def run_closed_loop(clients, cfg, bodies, deadline=None):
    """len(clients) workers (one connection each) drain the bodies in order; returns raw outcomes.

    With a deadline (perf_counter time) no request starts after it and none runs past it (its timeout is
    cut there); the bodies never sent keep None."""
    queue = list(enumerate(bodies))
    queue.reverse()
    outcomes = [None] * len(bodies)

    async def worker(w, client):
        while queue:
            timeout = cfg["request_timeout"]
            if deadline is not None:
                timeout = min(timeout, deadline - time.perf_counter())
                if timeout <= 0:
                    return
            i, body = queue.pop()
            outcomes[i] = await client.request(cfg["path"], body, timeout)
            outcomes[i]["worker"] = w

    await asyncio.gather(*(worker(w, cl) for w, cl in enumerate(clients[: len(bodies)])))
    return outcomes


async def run_open_loop(endpoint, clients, cfg, bodies, offsets, cap):
    """Send body i at t0 + offsets[i] whatever the server does (open loop); at most `cap` in flight when set.

    Idle keep-alive connections are reused; a request that finds none opens a new one (its TCP connect then
    counts in its TTFT, as in bench_serving). Returns raw outcomes with t_sched and t_dispatch."""
    loop = asyncio.get_running_loop()
    sem = asyncio.Semaphore(cap) if cap else None
    idle = list(clients)
    outcomes = [None] * len(bodies)

    async def one(i, body, t_sched, t_dispatch):
        if sem is not None:
            await sem.acquire()
        try:
            if idle:
                client = idle.pop()
            else:
                client = Client(endpoint, cfg["connection"] == "keep_alive")
                clients.append(client)  # closed with the others when the level ends
            out = await client.request(cfg["path"], body, cfg["request_timeout"])
            idle.append(client)
        finally:
            if sem is not None:
                sem.release()
        out.update(t_sched=t_sched, t_dispatch=t_dispatch, worker=None)
        outcomes[i] = out

    tasks = []
    t0 = time.perf_counter()
    for i, body in enumerate(bodies):
        due = t0 + offsets[i]
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(loop.create_task(one(i, body, due, time.perf_counter())))
    await asyncio.gather(*tasks)
    return outcomes
