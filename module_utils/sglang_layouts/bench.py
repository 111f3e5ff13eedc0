"""Closed-loop load generator for one running SGLang server (standard library only).

It runs on a bare host ``python3`` (no aiohttp): an asyncio HTTP/1.1 client built on
``asyncio.BufferedProtocol`` timestamps every byte it receives with ``time.perf_counter()`` in
its read callback (``buffer_updated``), decodes chunked transfer encoding and Server-Sent Events itself, and
keeps the JSON decoding of the events out of the measured path (events are parsed
after the level ends). Per concurrency level: warmup requests (not counted), then
``POST /flush_cache``, then ``num_prompts`` requests issued by ``concurrency`` workers,
each of which sends its next request as soon as its previous one ends, so exactly
``concurrency`` requests are in flight until the queue drains.

Every figure is defined in ``FORMULAS``; the module's RETURN docs and every result
record carry the same text.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import socket
import ssl
import time
import urllib.error
import urllib.request
from urllib.parse import urlsplit

APIS = ("generate", "completions", "chat")
API_PATHS = {"generate": "/generate", "completions": "/v1/completions", "chat": "/v1/chat/completions"}
DEFAULT_CONCURRENCY = (1, 2, 4, 8, 16, 32, 64)
NUM_PROMPTS_MIN = 8
NUM_PROMPTS_MAX = 1024
KNEE_FRACTION = 0.9
ACHIEVED_CONCURRENCY_WARN = 0.9
STAT_KEYS = ("mean", "p50", "p90", "p99")

FORMULAS = {
    "clock": "time.perf_counter() on the client (monotonic, CLOCK_MONOTONIC on Linux); each stream keeps one HTTP/1.1 "
    "keep-alive connection, opened before the level starts; t_start is taken just before the request is written "
    "(before the TCP connect when a connection has to be reopened); arrival times are taken in "
    "the read callback (asyncio.BufferedProtocol.buffer_updated, recv_into a 64 KiB buffer) before any parsing; "
    "parsing runs in the next loop pass, after every socket readable at that moment has been read and stamped",
    "completed": "requests that returned HTTP 200, streamed to [DONE] (or a finish_reason) without an error event, "
    "and produced at least one output token; everything else is failed",
    "failed": "requests with a non-200 status, a connection error, an error event, a timeout (request_timeout) "
    "or no output token; counted here and excluded from every latency and token figure",
    "duration_s": "t_last_end - t_first_start over the measured requests of the level (warmup excluded)",
    "request_s": "completed / duration_s",
    "output_tok_s": "sum(completion_tokens of completed requests) / duration_s",
    "tokens": "completion_tokens and prompt_tokens as the server counted them: meta_info of the last /generate "
    "chunk, or the usage chunk of the OpenAI routes (stream_options.include_usage); never the requested length",
    "ttft_ms": "t_first_token - t_start, where t_first_token is the arrival of the first chunk that carries "
    "output (meta_info.completion_tokens > 0 or non-empty text / delta)",
    "itl_ms": "gaps between the arrivals of consecutive output-carrying chunks of one request "
    "(chunk-gap ITL: a chunk with k tokens counts as one gap); all gaps of all completed requests pooled",
    "tpot_ms": "(e2e - ttft) / (completion_tokens - 1) per completed request with completion_tokens > 1",
    "e2e_ms": "t_end - t_start, t_end = arrival of the last chunk ([DONE] included)",
    "decode_tok_s": "(completion_tokens - 1) / (e2e - ttft) per completed request whose tokens arrived over time (not all in one chunk) = 1000 / tpot_ms",
    "achieved_concurrency": "Little's law: sum(e2e of every measured request, failed included) / duration_s",
    "stats": "mean = arithmetic mean; pXX = linear interpolation between closest ranks "
    "(numpy.percentile's default): x[floor(h)] + (h - floor(h)) * (x[floor(h)+1] - x[floor(h)]), h = (n-1) * XX/100",
    "single_request_tok_s": "mean decode_tok_s at concurrency 1 (null when 1 is not a level)",
    "peak_output_tok_s": "max over levels of output_tok_s; peak_concurrency is the level where it was reached",
    "knee_concurrency": "smallest concurrency whose output_tok_s >= knee_fraction x peak_output_tok_s "
    "(knee_fraction 0.9): past it, more streams buy less than 10 % more throughput",
    "tok_s_per_user": "mean decode_tok_s of the level (what one stream sees)",
}


class BenchError(Exception):
    """The benchmark could not run (bad arguments, server unreachable)."""


# ---------------------------------------------------------------- statistics


def percentile(values, q):
    """Linear interpolation between closest ranks (numpy.percentile's default method)."""
    if not values:
        return None
    xs = sorted(values)
    if len(xs) == 1:
        return float(xs[0])
    h = (len(xs) - 1) * (q / 100.0)
    lo = math.floor(h)
    hi = min(lo + 1, len(xs) - 1)
    return float(xs[lo] + (h - lo) * (xs[hi] - xs[lo]))


def stats(values):
    """{"mean", "p50", "p90", "p99"} of a list (None for each when it is empty)."""
    if not values:
        return {k: None for k in STAT_KEYS}
    return {
        "mean": float(sum(values) / len(values)),
        "p50": percentile(values, 50),
        "p90": percentile(values, 90),
        "p99": percentile(values, 99),
    }


def default_num_prompts(concurrency, per_stream=4, minimum=NUM_PROMPTS_MIN, maximum=NUM_PROMPTS_MAX):
    """Requests per level when num_prompts is not given: per_stream x concurrency (4), at least
    `minimum` (8), at most `maximum` (1024)."""
    return max(minimum, min(per_stream * concurrency, maximum))


# ---------------------------------------------------------------- configuration


def make_config(
    url,
    api="generate",
    concurrency=None,
    num_prompts=None,
    input_len=1024,
    output_len=256,
    warmup=1,
    seed=1,
    flush_cache=True,
    request_timeout=600.0,
    api_key=None,
    model=None,
    vocab_size=32000,
    knee_fraction=KNEE_FRACTION,
    rid_prefix=None,
    prompts_per_stream=4,
    min_prompts=NUM_PROMPTS_MIN,
):
    """Validate the arguments and return the normalised configuration mapping."""
    if api not in APIS:
        raise BenchError(f"api must be one of {', '.join(APIS)}, not {api!r}")
    parts = urlsplit(url or "")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BenchError(f"url must be http(s)://host:port, not {url!r}")
    levels = list(DEFAULT_CONCURRENCY if concurrency is None else concurrency)
    if not levels or any((not isinstance(c, int)) or isinstance(c, bool) or c < 1 for c in levels):
        raise BenchError(f"concurrency must be a non-empty list of integers >= 1, not {concurrency!r}")
    if num_prompts is not None and (not isinstance(num_prompts, int) or num_prompts < 1):
        raise BenchError(f"num_prompts must be an integer >= 1, not {num_prompts!r}")
    for name, value in (("input_len", input_len), ("output_len", output_len)):
        if not isinstance(value, int) or value < 1:
            raise BenchError(f"{name} must be an integer >= 1, not {value!r}")
    for name, value in (("prompts_per_stream", prompts_per_stream), ("min_prompts", min_prompts)):
        if not isinstance(value, int) or value < 1:
            raise BenchError(f"{name} must be an integer >= 1, not {value!r}")
    if not isinstance(warmup, int) or warmup < 0:
        raise BenchError(f"warmup must be an integer >= 0, not {warmup!r}")
    if not request_timeout or request_timeout <= 0:
        raise BenchError(f"request_timeout must be > 0 seconds, not {request_timeout!r}")
    if not 0 < knee_fraction <= 1:
        raise BenchError(f"knee_fraction must be in (0, 1], not {knee_fraction!r}")
    return {
        "url": url.rstrip("/"),
        "api": api,
        "path": API_PATHS[api],
        "concurrency": levels,
        "num_prompts": [
            num_prompts
            if num_prompts is not None
            else default_num_prompts(c, prompts_per_stream, min_prompts)
            for c in levels
        ],
        "prompts_per_stream": prompts_per_stream,
        "min_prompts": min_prompts,
        "input_len": input_len,
        "output_len": output_len,
        "warmup": warmup,
        "seed": seed,
        "flush_cache": bool(flush_cache),
        "request_timeout": float(request_timeout),
        "api_key_set": bool(api_key),
        "model": model,
        "vocab_size": int(vocab_size),
        "knee_fraction": float(knee_fraction),
        "rid_prefix": rid_prefix or f"bench-{int(time.time() * 1000):x}-{random.randrange(16**4):04x}",
        "ignore_eos": True,
        "stream": True,
        "temperature": 0.0,
    }


# ---------------------------------------------------------------- plain HTTP (set-up calls)


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


# ---------------------------------------------------------------- streaming client


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
            k, _, v = line.partition(":")
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

    def __init__(self, endpoint: Endpoint):
        self.endpoint = endpoint
        self.conn = None

    def close(self):
        if self.conn is not None and self.conn.transport is not None:
            self.conn.transport.close()
        self.conn = None

    async def _open_and_send(self, request, response):
        loop = asyncio.get_running_loop()
        ep = self.endpoint
        if ep.ssl is not None:
            _, conn = await loop.create_connection(lambda: _Conn(response), ep.host, ep.port, ssl=ep.ssl)
            conn.transport.write(request)
            return conn
        family, type_, proto, _, addr = ep.resolve()
        sock = socket.socket(family, type_, proto)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await loop.sock_connect(sock, addr)
            try:
                sent = sock.send(request)
            except BlockingIOError:
                sent = 0
            _, conn = await loop.create_connection(lambda: _Conn(response), sock=sock)
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
                _, self.conn = await asyncio.wait_for(
                    loop.create_connection(_Conn, ep.host, ep.port, ssl=ep.ssl), timeout
                )
                return
            family, type_, proto, _, addr = ep.resolve()
            sock = socket.socket(family, type_, proto)
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                await asyncio.wait_for(loop.sock_connect(sock, addr), timeout)
                _, self.conn = await loop.create_connection(_Conn, sock=sock)
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
        if not (response.complete and response.keep_alive) or self.conn.closed:
            self.close()
        else:
            self.conn.response = None
        return out


# ---------------------------------------------------------------- requests and their outcome


def make_prompt(rng, input_len, vocab_size):
    return [rng.randrange(100, max(vocab_size, 101)) for _ in range(input_len)]


_WORDS = tuple(
    [
        "time",
        "person",
        "year",
        "way",
        "day",
        "thing",
        "man",
        "world",
        "life",
        "hand",
        "part",
        "child",
        "eye",
        "woman",
        "place",
        "work",
        "week",
        "case",
        "point",
        "number",
        "group",
        "problem",
        "fact",
        "river",
        "stone",
        "light",
        "water",
        "field",
        "table",
        "paper",
        "window",
        "garden",
        "music",
        "letter",
    ]
)


def request_body(cfg, rid, prompt_ids, output_len, rng):
    """The JSON body for one request of the configured api (bytes)."""
    api = cfg["api"]
    if api == "generate":
        body = {
            "input_ids": prompt_ids,
            "sampling_params": {
                "temperature": cfg["temperature"],
                "max_new_tokens": output_len,
                "ignore_eos": True,
            },
            "stream": True,
            "rid": rid,
        }
    elif api == "completions":
        body = {
            "model": cfg["model"],
            "prompt": prompt_ids,
            "max_tokens": output_len,
            "temperature": cfg["temperature"],
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
            "rid": rid,
        }
    else:
        # Chat takes text: random common words, about one token each; the server's
        # prompt_tokens (usage) says what it really was.
        text = " ".join(rng.choice(_WORDS) for _ in range(len(prompt_ids)))
        body = {
            "model": cfg["model"],
            "messages": [{"role": "user", "content": text}],
            "max_tokens": output_len,
            "temperature": cfg["temperature"],
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
            "rid": rid,
        }
    return json.dumps(body, separators=(",", ":")).encode()


def analyse(api, raw):
    """Decode one raw outcome into per-request figures (seconds) or a failure."""
    res = {
        "ok": False,
        "error": raw.get("error"),
        "t_start": raw["t_start"],
        "t_end": raw["t_end"],
        "worker": raw.get("worker"),
        "t_complete": raw.get("t_complete"),
        "e2e": raw["t_end"] - raw["t_start"],
        "ttft": None,
        "itl": [],
        "completion_tokens": None,
        "prompt_tokens": None,
        "token_source": None,
        "finish_reason": None,
    }
    if res["error"]:
        return res
    content_times = []
    chunk_count = 0
    for t, payload in raw["events"]:
        try:
            ev = json.loads(payload)
        except ValueError:
            res["error"] = f"undecodable event: {payload[:200]!r}"
            return res
        if not isinstance(ev, dict):
            continue
        if ev.get("error"):
            err = ev["error"]
            res["error"] = "server error: " + (err.get("message") if isinstance(err, dict) else str(err))
            return res
        if api == "generate":
            meta = ev.get("meta_info") or {}
            ct = meta.get("completion_tokens")
            if ct is not None:
                res["completion_tokens"] = ct
                res["token_source"] = "server"
            if meta.get("prompt_tokens") is not None:
                res["prompt_tokens"] = meta["prompt_tokens"]
            if meta.get("finish_reason"):
                res["finish_reason"] = meta["finish_reason"]
            has_output = (ct or 0) > 0 if ct is not None else bool(ev.get("text") or ev.get("output_ids"))
            # cumulative output: a chunk carries output when the count grew
            if has_output and (not content_times or ct is None or ct > content_times[-1][1]):
                content_times.append((t, ct))
        else:
            usage = ev.get("usage")
            if usage:
                if usage.get("completion_tokens") is not None:
                    res["completion_tokens"] = usage["completion_tokens"]
                    res["token_source"] = "server"
                if usage.get("prompt_tokens") is not None:
                    res["prompt_tokens"] = usage["prompt_tokens"]
            for choice in ev.get("choices") or []:
                if choice.get("finish_reason"):
                    res["finish_reason"] = choice["finish_reason"]
                if api == "completions":
                    piece = choice.get("text")
                else:
                    delta = choice.get("delta") or {}
                    piece = delta.get("content") or delta.get("reasoning_content")
                if piece:
                    chunk_count += 1
                    content_times.append((t, chunk_count))
                    break
    if not raw.get("done_seen") and res["finish_reason"] is None:
        res["error"] = "stream ended before [DONE]"
        return res
    if not content_times:
        res["error"] = "no output token received"
        return res
    if res["completion_tokens"] is None:
        res["completion_tokens"] = chunk_count
        res["token_source"] = "chunks"
    if not res["completion_tokens"]:
        res["error"] = "server reported 0 completion tokens"
        return res
    res["ttft"] = content_times[0][0] - raw["t_start"]
    # (no itertools.pairwise / zip(strict=): hosts may run Python 3.8)
    res["itl"] = [content_times[i][0] - content_times[i - 1][0] for i in range(1, len(content_times))]
    res["ok"] = True
    return res


# ---------------------------------------------------------------- one level


async def _run_requests(clients, cfg, bodies):
    """len(clients) workers (one connection each) drain the bodies in order; returns raw outcomes."""
    queue = list(enumerate(bodies))
    queue.reverse()
    outcomes = [None] * len(bodies)

    async def worker(w, client):
        while queue:
            i, body = queue.pop()
            outcomes[i] = await client.request(cfg["path"], body, cfg["request_timeout"])
            outcomes[i]["worker"] = w

    await asyncio.gather(*(worker(w, cl) for w, cl in enumerate(clients[: len(bodies)])))
    return outcomes


def summarize_level(cfg, concurrency, results, duration, n_sent):
    ok = [r for r in results if r["ok"]]
    failed = [r for r in results if not r["ok"]]
    tokens = sum(r["completion_tokens"] for r in ok)
    e2e_all = sum(r["e2e"] for r in results)
    # Decode speed needs tokens that arrived after the first one, at a later time: a server that
    # sends everything in one chunk (vLLM on a fast tiny model) gives e2e ~ TTFT and no speed at all.
    streamed = [r for r in ok if r["completion_tokens"] > 1 and r["e2e"] > r["ttft"] and sum(r["itl"]) > 0]
    decode = [(r["completion_tokens"] - 1) / (r["e2e"] - r["ttft"]) for r in streamed]
    tpot = [
        1000.0 * (r["e2e"] - r["ttft"]) / (r["completion_tokens"] - 1)
        for r in ok
        if r["completion_tokens"] > 1
    ]
    itl = [1000.0 * g for r in ok for g in r["itl"]]
    achieved = e2e_all / duration if duration > 0 else 0.0
    errors = {}
    for r in failed:
        errors[r["error"]] = errors.get(r["error"], 0) + 1
    warnings = []
    if achieved < ACHIEVED_CONCURRENCY_WARN * concurrency:
        why = (
            f"only {n_sent} requests for {concurrency} streams"
            if n_sent < concurrency
            else "requests queued or failed early, or the client could not keep up"
        )
        warnings.append(
            f"concurrency {concurrency}: achieved {achieved:.2f} (Little's law) is below "
            f"{ACHIEVED_CONCURRENCY_WARN:.0%} of the target ({why})"
        )
    if failed:
        warnings.append(f"concurrency {concurrency}: {len(failed)} of {len(results)} requests failed")
    short = [r for r in ok if r["completion_tokens"] < cfg["output_len"]]
    if short:
        warnings.append(
            f"concurrency {concurrency}: {len(short)} requests returned fewer than output_len="
            f"{cfg['output_len']} tokens although ignore_eos was set"
        )
    unstreamed = len([r for r in ok if r["completion_tokens"] > 1]) - len(streamed)
    if unstreamed:
        warnings.append(
            f"concurrency {concurrency}: {unstreamed} requests delivered all their tokens in one chunk; "
            "their decode speed is undefined and left out"
        )
    sources = sorted({r["token_source"] for r in ok})
    return {
        "concurrency": concurrency,
        "num_prompts": n_sent,
        "completed": len(ok),
        "failed": len(failed),
        "duration_s": duration,
        "request_s": len(ok) / duration if duration > 0 else 0.0,
        "output_tok_s": tokens / duration if duration > 0 else 0.0,
        "output_tokens": tokens,
        "prompt_tokens": sum(r["prompt_tokens"] or 0 for r in ok),
        "token_source": sources[0] if len(sources) == 1 else ("mixed" if sources else None),
        "achieved_concurrency": achieved,
        "ttft_ms": stats([1000.0 * r["ttft"] for r in ok]),
        "itl_ms": stats(itl),
        "tpot_ms": stats(tpot),
        "e2e_ms": stats([1000.0 * r["e2e"] for r in ok]),
        "decode_tok_s": stats(decode),
        "errors": [{"error": k, "count": v} for k, v in sorted(errors.items(), key=lambda kv: -kv[1])][:5],
        "warnings": warnings,
    }


def _rid(cfg, level_index, kind, i):
    return f"{cfg['rid_prefix']}-l{level_index}-{kind}{i}"


async def run_level(cfg, level_index, progress=None, keep_requests=False):
    concurrency = cfg["concurrency"][level_index]
    n = cfg["num_prompts"][level_index]
    endpoint = Endpoint(cfg["url"], cfg.get("_api_key"))
    # Distinct prompts for every level and for warmup: no prefix-cache replay between levels.
    rng = random.Random(f"{cfg['seed']}:{level_index}:{concurrency}")
    warm_len = min(cfg["output_len"], 16)
    warm = [
        request_body(
            cfg,
            _rid(cfg, level_index, "w", i),
            make_prompt(rng, cfg["input_len"], cfg["vocab_size"]),
            warm_len,
            rng,
        )
        for i in range(cfg["warmup"])
    ]
    rids = [_rid(cfg, level_index, "r", i) for i in range(n)]
    bodies = [
        request_body(cfg, rid, make_prompt(rng, cfg["input_len"], cfg["vocab_size"]), cfg["output_len"], rng)
        for rid in rids
    ]
    _say(progress, f"level c={concurrency} start: {n} requests, {cfg['warmup']} warmup")
    clients = [Client(endpoint) for _ in range(min(concurrency, n))]
    try:
        await asyncio.gather(*(cl.connect(min(cfg["request_timeout"], 30.0)) for cl in clients))
        warm_failed = 0
        if warm:
            for raw in await _run_requests(clients, cfg, warm):
                warm_failed += 0 if analyse(cfg["api"], raw)["ok"] else 1
        flush = None
        if cfg["flush_cache"]:
            flush = await asyncio.get_running_loop().run_in_executor(None, flush_cache, cfg)
        raws = await _run_requests(clients, cfg, bodies)
    finally:
        for cl in clients:
            cl.close()
    # duration: first start to last end of the measured requests
    start = min(r["t_start"] for r in raws)
    end = max(r["t_end"] for r in raws)
    results = [analyse(cfg["api"], r) for r in raws]
    level = summarize_level(cfg, concurrency, results, end - start, n)
    level["warmup_failed"] = warm_failed
    level["flush_cache"] = flush
    if flush is not None and not flush["ok"]:
        level["warnings"].append(f"concurrency {concurrency}: /flush_cache failed: {flush['detail']}")
    if keep_requests:
        level["requests"] = [
            {
                "rid": rid,
                "ok": r["ok"],
                "t_start": r["t_start"],
                "t_end": r["t_end"],
                "worker": r["worker"],
                "t_complete": r["t_complete"],
                "error": r["error"],
                "ttft_ms": None if r["ttft"] is None else 1000.0 * r["ttft"],
                "e2e_ms": 1000.0 * r["e2e"],
                "itl_ms": [1000.0 * g for g in r["itl"]],
                "completion_tokens": r["completion_tokens"],
            }
            for rid, r in zip(rids, results)  # noqa: B905 (same length; strict= needs Python 3.10)
        ]
    _say(progress, f"level c={concurrency} done: {level_line(level)}")
    return level


def level_line(level):
    def f(v, fmt="{:.1f}"):
        return "-" if v is None else fmt.format(v)

    return (
        f"{level['completed']} ok, {level['failed']} failed, {f(level['output_tok_s'])} tok/s, "
        f"{f(level['request_s'], '{:.2f}')} req/s, TTFT p50 {f(level['ttft_ms']['p50'])} ms "
        f"p99 {f(level['ttft_ms']['p99'])} ms, ITL p50 {f(level['itl_ms']['p50'], '{:.2f}')} ms, "
        f"decode {f(level['decode_tok_s']['mean'])} tok/s/user, "
        f"concurrency {f(level['achieved_concurrency'], '{:.2f}')}/{level['concurrency']}"
    )


def flush_cache(cfg):
    try:
        status, body = http_json(cfg["url"] + "/flush_cache", method="POST", api_key=cfg.get("_api_key"))
    except (OSError, urllib.error.URLError) as exc:
        return {"ok": False, "detail": str(exc)}
    return {"ok": status == 200, "detail": f"HTTP {status}: {str(body)[:200].strip()}"}


def _say(progress, line):
    if progress is not None:
        progress(line)


# ---------------------------------------------------------------- summary and the whole run


def summarize(levels, knee_fraction=KNEE_FRACTION):
    single = next((lv for lv in levels if lv["concurrency"] == 1), None)
    measured = [lv for lv in levels if lv["completed"] > 0]
    peak = max(measured, key=lambda lv: lv["output_tok_s"], default=None)
    knee = None
    if peak is not None:
        for lv in sorted(measured, key=lambda lv: lv["concurrency"]):
            if lv["output_tok_s"] >= knee_fraction * peak["output_tok_s"]:
                knee = lv
                break
    completed = sum(lv["completed"] for lv in levels)
    failed = sum(lv["failed"] for lv in levels)
    return {
        "single_request_tok_s": single["decode_tok_s"]["mean"] if single else None,
        "single_request_ttft_ms_p50": single["ttft_ms"]["p50"] if single else None,
        "single_request_ttft_ms_p99": single["ttft_ms"]["p99"] if single else None,
        "peak_output_tok_s": peak["output_tok_s"] if peak else None,
        "peak_concurrency": peak["concurrency"] if peak else None,
        "peak_ttft_ms_p50": peak["ttft_ms"]["p50"] if peak else None,
        "peak_ttft_ms_p99": peak["ttft_ms"]["p99"] if peak else None,
        "peak_tok_s_per_user": peak["decode_tok_s"]["mean"] if peak else None,
        "knee_concurrency": knee["concurrency"] if knee else None,
        "knee_output_tok_s": knee["output_tok_s"] if knee else None,
        "knee_fraction": knee_fraction,
        "completed": completed,
        "failed": failed,
        "error_rate": failed / (completed + failed) if completed + failed else None,
        "warnings": [w for lv in levels for w in lv["warnings"]],
    }


def discover(cfg, api_key=None):
    """Ask the server what it is (best effort): /server_info, and the model id for OpenAI routes."""
    info = {}
    try:
        status, body = http_json(cfg["url"] + "/server_info", api_key=api_key, timeout=15)
        if status == 200 and isinstance(body, dict):
            info = {
                k: body.get(k)
                for k in (
                    "version",
                    "model_path",
                    "tp_size",
                    "pp_size",
                    "ep_size",
                    "dp_size",
                    "max_total_num_tokens",
                    "max_running_requests",
                    "mem_fraction_static",
                )
                if k in body
            }
    except (OSError, urllib.error.URLError, ValueError):
        pass
    if cfg["api"] != "generate" and not cfg["model"]:
        try:
            status, body = http_json(cfg["url"] + "/v1/models", api_key=api_key, timeout=15)
        except (OSError, urllib.error.URLError) as exc:
            raise BenchError(f"cannot reach {cfg['url']}/v1/models to learn the model name: {exc}") from exc
        if status != 200 or not isinstance(body, dict) or not body.get("data"):
            raise BenchError(f"{cfg['url']}/v1/models answered HTTP {status}: {str(body)[:200]}")
        cfg["model"] = body["data"][0]["id"]
    return info


def check_reachable(cfg, api_key=None):
    try:
        status, _ = http_json(cfg["url"] + "/health", api_key=api_key, timeout=30)
    except (OSError, urllib.error.URLError) as exc:
        raise BenchError(f"server at {cfg['url']} is not reachable: {exc}") from exc
    if status != 200:
        raise BenchError(f"server at {cfg['url']} is not ready: GET /health answered HTTP {status}")


def level_server_died(cfg, level, api_key=None, timeout=5.0):
    """After a level with failed requests: is the server gone? Then the ladder stops there (the
    next levels would only count failures against a dead server). None while GET /health answers."""
    if not level.get("failed"):
        return None
    try:
        status, _ = http_json(cfg["url"] + "/health", api_key=api_key, timeout=timeout)
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        hung = isinstance(reason, TimeoutError) or "timed out" in str(reason)
        what = f"no answer to GET /health within {timeout:g} s (hung)" if hung else f"GET /health: {reason}"
        return {
            "concurrency": level["concurrency"],
            "hung": hung,
            "detail": f"the server died during concurrency {level['concurrency']} ({what})",
        }
    if status == 200:
        return None
    return {
        "concurrency": level["concurrency"],
        "hung": False,
        "detail": f"the server stopped serving during concurrency {level['concurrency']} (GET /health: HTTP {status})",
    }


def run_benchmark(cfg, api_key=None, progress=None, keep_requests=False):
    """Run every level of cfg; returns {"summary", "levels", "config", "server", "formulas"}."""
    cfg = dict(cfg)
    cfg["_api_key"] = api_key
    check_reachable(cfg, api_key)
    server = discover(cfg, api_key)
    levels = []
    t0 = time.time()
    died = None
    for i in range(len(cfg["concurrency"])):
        levels.append(asyncio.run(run_level(cfg, i, progress, keep_requests)))
        died = level_server_died(cfg, levels[-1], api_key)
        if died:
            # "bench failed:" also ends the playbook's wait for the levels that will not run
            _say(progress, f"bench failed: {died['detail']}; levels after c={died['concurrency']} not run")
            break
    summary = summarize(levels, cfg["knee_fraction"])
    summary["server_died"] = died
    mrr = server.get("max_running_requests")
    if isinstance(mrr, int) and mrr > 0:
        over = [c for c in cfg["concurrency"] if c > mrr]
        if over:
            summary["warnings"].append(
                f"concurrency {over} above the server's max_running_requests={mrr}: the extra requests queue"
            )
    summary["wall_s"] = time.time() - t0
    public = {k: v for k, v in cfg.items() if not k.startswith("_")}
    _say(progress, "bench finished: " + summary_line(summary))
    return {"summary": summary, "levels": levels, "config": public, "server": server, "formulas": FORMULAS}


def summary_line(summary):
    def f(v, fmt="{:.1f}"):
        return "-" if v is None else fmt.format(v)

    return (
        f"single-request {f(summary['single_request_tok_s'])} tok/s, peak {f(summary['peak_output_tok_s'])} "
        f"tok/s @ {f(summary['peak_concurrency'], '{}')}, knee @ {f(summary['knee_concurrency'], '{}')}, "
        f"{summary['failed']} failed"
    )
