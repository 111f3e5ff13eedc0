"""A tiny stdlib SGLang stand-in for the load generator's tests (real sockets, real HTTP).

It streams /generate (cumulative meta_info, as SGLang does by default), /v1/completions
and /v1/chat/completions (usage chunk when asked), answers /health, /server_info,
/v1/models and /flush_cache, and records per request what it did, so tests compare
the client's figures with what the server scheduled.

With compile_s it stalls as an engine does that compiles a kernel for every batch shape it has not
met yet (triton MoE kernels without a tuned config): the first time a request arrives with n requests
in flight (n not in `compiled`), every stream stops for compile_s seconds. stall_rids pauses it the
same way once for each request whose rid ends with one of them (a one-off stall after the warm-up).
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Iterable

from tests.helpers.fake_http import JsonHandler, LoopbackServer


@dataclasses.dataclass(eq=False)  # one server's state: compared by identity, never by value
class FakeState:
    """How the fake server behaves (the fields, FakeServer's keywords) and what it recorded."""

    step_s: float = 0.005
    first_s: float = 0.02
    fail_every: int = 0  # every Nth measured request answers HTTP 500
    error_every: int = 0  # every Nth measured request streams an error event
    chunked: bool = True
    usage: bool = True
    context_length: int | None = None  # reported by /server_info when set
    server_info: bool = True  # False: /server_info answers 404 (an engine without it)
    health_status: int = 200
    metrics: str | None = None  # Prometheus text served at /metrics (404 when None)
    compile_s: float = 0.0
    compiled: Iterable[int] = (1,)  # batch sizes already compiled (1: the server's own start-up warm-up)
    stall_rids: Iterable[str] = ()
    # after this many generation requests the engine is gone: every later request, /health
    # included, answers 503 (a crash at the first prefill answers nothing useful either)
    dead_after: int = 0

    def __post_init__(self):
        self.compiled = set(self.compiled)
        self.stall_rids = tuple(self.stall_rids)
        self.metrics_scrapes = 0
        self.pause_until = 0.0  # monotonic time before which no stream sends a token
        self.pauses = []  # {"at", "seconds", "batch", "rid"} for each stall the server made
        self.lock = threading.Lock()
        self.logged = threading.Condition(self.lock)  # notified as each stream's log entry lands
        self.streams = 0  # generation streams begun (each logs once, in its finally)
        self.count = 0
        self.flushes = 0
        self.log = []  # {"rid", "arrival", "first_token", "token_times", "prompt_tokens", "completion_tokens"}
        self.bodies = []
        self.inflight = 0
        self.max_inflight = 0
        self.peers = []  # (address, port) of the connection of each measured request
        self.gets = []  # the path of every GET, in order


def make_handler(state: FakeState):
    class Handler(JsonHandler):
        protocol_version = "HTTP/1.1" if state.chunked else "HTTP/1.0"
        disable_nagle_algorithm = True

        def _dead(self):
            return bool(state.dead_after) and state.count >= state.dead_after

        def do_GET(self):
            with state.lock:
                state.gets.append(self.path)
            if self._dead():
                self._json(503, {"error": "the engine is gone"})
            elif self.path == "/health":
                self._json(state.health_status, {})
            elif self.path == "/server_info" and state.server_info:
                info = {"version": "fake-1", "max_total_num_tokens": 1000, "max_running_requests": 48}
                if state.context_length:
                    info["context_length"] = state.context_length
                self._json(200, info)
            elif self.path == "/metrics" and state.metrics is not None:
                with state.lock:
                    state.metrics_scrapes += 1
                data = state.metrics.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            elif self.path == "/v1/models":
                self._json(200, {"data": [{"id": "fake-model"}]})
            else:
                self._json(404, {"error": "no"})

        def _send_event(self, obj):
            line = b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"
            if state.chunked:
                self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
            else:
                self.wfile.write(line)
            self.wfile.flush()

        def do_POST(self):
            arrival = time.monotonic()
            body = self._json_body()
            if self.path == "/flush_cache":
                with state.lock:
                    state.flushes += 1
                self._json(200, {"msg": "Cache flushed."})
                return
            if self._dead():
                self._json(503, {"error": "the engine is gone"})
                return
            with state.lock:
                state.count += 1
                idx = state.count
                state.bodies.append(body)
            rid = body.get("rid")
            measured = "-r" in (rid or "")
            if measured:
                with state.lock:
                    state.peers.append(self.client_address)  # which connection carried it
            if measured and state.fail_every and idx % state.fail_every == 0:
                self._json(500, {"error": {"message": "boom"}})
                return
            if self.path == "/generate":
                prompt = len(body["input_ids"]) if "input_ids" in body else len(body["text"].split())
                out = body["sampling_params"]["max_new_tokens"]
            else:
                p = body.get("prompt") or body["messages"][0]["content"]
                prompt = len(p.split()) if isinstance(p, str) else len(p)
                out = body["max_tokens"]
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            if state.chunked:
                self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            with state.lock:
                state.streams += 1
                state.inflight += 1
                state.max_inflight = max(state.max_inflight, state.inflight)
                batch = state.inflight
                new_shape = state.compile_s > 0 and batch not in state.compiled
                one_off = any((rid or "").endswith(s) for s in state.stall_rids)
                if new_shape or one_off:
                    state.compiled.add(batch)
                    now = time.monotonic()
                    state.pause_until = max(state.pause_until, now + state.compile_s)
                    state.pauses.append({"at": now, "seconds": state.compile_s, "batch": batch, "rid": rid})
            times = []
            # A request stops counting as in flight once its last token is out, before the trailing
            # events: the client starts its next request only after reading them, so a count
            # dropped afterwards (in finally) would race that next request (max_inflight 5 at c4).
            counted = True
            try:
                due = arrival + state.first_s
                for k in range(1, out + 1):
                    while True:  # a pause that began while this stream waited holds its token too
                        delay = max(due, state.pause_until) - time.monotonic()
                        if delay <= 0:
                            break
                        time.sleep(delay)
                    if state.pause_until > due:
                        due = time.monotonic()
                    times.append(time.monotonic())
                    if measured and state.error_every and idx % state.error_every == 0 and k == 2:
                        self._send_event({"error": {"message": "aborted"}})
                        break
                    if self.path == "/generate":
                        fin = {"type": "length", "length": out} if k == out else None
                        self._send_event(
                            {
                                "text": "x" * k,
                                "output_ids": list(range(k)),
                                "meta_info": {
                                    "id": rid,
                                    "prompt_tokens": prompt,
                                    "completion_tokens": k,
                                    "finish_reason": fin,
                                },
                            }
                        )
                    elif self.path == "/v1/completions":
                        self._send_event(
                            {"choices": [{"index": 0, "text": "x", "finish_reason": None}], "usage": None}
                        )
                    else:
                        self._send_event(
                            {"choices": [{"index": 0, "delta": {"content": "x"}}], "usage": None}
                        )
                    due += state.step_s
                with state.lock:
                    state.inflight -= 1
                    counted = False
                if (
                    self.path != "/generate"
                    and state.usage
                    and (body.get("stream_options") or {}).get("include_usage")
                ):
                    self._send_event(
                        {"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": len(times)}}
                    )
                self._send_event(b"[DONE]")
                if state.chunked:
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
            finally:
                with state.lock:
                    if counted:
                        state.inflight -= 1
                    state.log.append(
                        {
                            "rid": rid,
                            "arrival": arrival,
                            "first_token": times[0] if times else None,
                            "token_times": times,
                            "prompt_tokens": prompt,
                            "completion_tokens": len(times),
                        }
                    )
                    state.logged.notify_all()
            if not state.chunked:
                self.close_connection = True

    return Handler


class FakeServer(LoopbackServer):
    def __init__(self, **kw):
        self.state = FakeState(**kw)
        super().__init__(make_handler(self.state))

    def settled(self, ceiling: float = 120.0) -> list:
        """The server's log once every stream it began has logged: a client that read a stream's last
        event can return before the handler thread reached its bookkeeping. The ceiling only
        catches a hang."""
        st = self.state
        with st.logged:
            if not st.logged.wait_for(lambda: len(st.log) >= st.streams, timeout=ceiling):
                raise AssertionError(f"{st.streams - len(st.log)} streams never finished in {ceiling} s")
            return list(st.log)
