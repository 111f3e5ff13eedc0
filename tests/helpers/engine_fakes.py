"""Stand-ins the readiness gate's tests share: an SGLang and a vLLM API on loopback, a process
state, a log written while the gate waits, and the gate itself pointed at a closed port.

The scripted events (a log line, the port opening, the exit) are timed from the gate's start
(`started`, set once the gate's log offset is taken) and chained where their order matters
(`after`): never from whenever the test thread happened to run, so a busy host changes only how
long a test takes, never its verdict.

FakeSGLang answers as SGLang does (/health 503 until `ready`, then 200; /server_info,
/model_info; an optional API key). FakeVLLM answers as vLLM 0.32.0 does (docs/vllm.md):
/health 200 with an empty body, /v1/models, a one-token /v1/completions, /version, no
/server_info; it records every request.
"""

from __future__ import annotations

import threading
import time

from sglang_layouts.gate import health

from tests.helpers.fake_http import JsonHandler, LoopbackServer
from tests.helpers.net import free_port

HANG_S = 300.0  # a ceiling on a wait for an event: only a hang reaches it (load 40 slows a start by minutes)


def _wait_then_sleep(after, delay):
    """Wait for `after` (an Event to be set, a Thread to end; None: no wait), then `delay` s."""
    if isinstance(after, threading.Thread):
        after.join(HANG_S)
    elif after is not None:
        after.wait(HANG_S)
    time.sleep(delay)


class FakeSGLang(LoopbackServer):
    def __init__(self, port, api_key=None):
        self.ready = False
        self.api_key = api_key
        outer = self

        class H(JsonHandler):
            def _auth(self):
                if outer.api_key and self.headers.get("Authorization") != f"Bearer {outer.api_key}":
                    self._json(401, {"error": "unauthorized"})
                    return False
                return True

            def do_GET(self):
                if self.path == "/health":
                    self._json(200 if outer.ready else 503, {})
                elif not self._auth():
                    return
                elif self.path == "/server_info":
                    self._json(
                        200,
                        {
                            "tp_size": 8,
                            "api_key": outer.api_key,
                            "max_total_num_tokens": 172906,
                            "internal_states": [
                                {"memory_usage": {"weight": 71.8, "kvcache": 11.3, "graph": 1.2}}
                            ],
                        },
                    )
                elif self.path == "/model_info":
                    self._json(
                        200,
                        {
                            "model_path": "/models/Kimi-K2.6",
                            "architectures": ["KimiK25ForConditionalGeneration"],
                        },
                    )
                else:
                    self._json(404, {})

            def do_POST(self):
                if not self._auth():
                    return
                self._body()
                self._json(200, {"text": "x", "meta_info": {"completion_tokens": 1}})

        super().__init__(H, port)


class FakeVLLM(LoopbackServer):
    def __init__(self, port, served="tiny-qwen2"):
        self.requests = []
        outer = self

        class H(JsonHandler):
            def do_GET(self):
                outer.requests.append(("GET", self.path, None))
                if self.path == "/health":
                    self._json(200)
                elif self.path == "/v1/models":
                    self._json(
                        200,
                        {
                            "object": "list",
                            "data": [
                                {
                                    "id": served,
                                    "object": "model",
                                    "owned_by": "vllm",
                                    "root": "/abs/build/models/tiny-qwen2",
                                    "parent": None,
                                    "max_model_len": 2048,
                                }
                            ],
                        },
                    )
                elif self.path == "/version":
                    self._json(200, {"version": "0.32.0"})
                else:
                    self._json(404, {"detail": "Not Found"})

            def do_POST(self):
                body = self._json_body()
                outer.requests.append(("POST", self.path, body))
                if self.path == "/v1/completions" and body.get("model") == served:
                    self._json(
                        200,
                        {
                            "object": "text_completion",
                            "model": served,
                            "choices": [{"index": 0, "text": "!", "finish_reason": "length"}],
                            "usage": {"prompt_tokens": 3, "total_tokens": 4, "completion_tokens": 1},
                        },
                    )
                elif self.path == "/v1/completions":
                    self._json(
                        404, {"error": {"message": f"The model `{body.get('model')}` does not exist."}}
                    )
                else:
                    self._json(404, {"detail": "Not Found"})

        super().__init__(H, port)


class Alive:
    """The engine process as the gate asks about it: alive until the test sets alive False (and code)."""

    def __init__(self):
        self.alive = True
        self.code = None

    def __call__(self):
        if self.alive:
            return health.ProcState(alive=True, started_at=time.time() - 1)
        return health.ProcState(
            alive=False, exit_status=f"exited with status {self.code}", exit_code=self.code
        )

    def die_later(self, delay, code, after=None):
        """Exit with `code` `delay` s after `after` (the gate's start, a line's writer), from
        another thread, while the gate waits."""

        def die():
            _wait_then_sleep(after, delay)
            self.code, self.alive = code, False

        threading.Thread(target=die, daemon=True).start()


def append_later(path, lines, delay, after=None):
    """Append `lines` to the log at `path` `delay` s after `after` (the gate's start), from
    another thread; returns the thread (it ends once the lines are written)."""

    def run():
        _wait_then_sleep(after, delay)
        with open(path, "a") as f:
            for line in lines:
                f.write(line + "\n")
                f.flush()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def bring_up_later(server_cls, port, delay, ready_after=None, after=None, **kw):
    """Start `server_cls(port, **kw)` `delay` s after `after` (the gate's start; the port is
    closed till then) and, for a fake with a `ready` flag, set it `ready_after` s later; returns a
    dict that gets the server under "s"."""
    box = {}

    def run():
        _wait_then_sleep(after, delay)
        box["s"] = server_cls(port, **kw)
        if ready_after is not None:
            time.sleep(ready_after)
            box["s"].ready = True

    threading.Thread(target=run, daemon=True).start()
    return box


def wait_from_end(url, log, state, started=None, **kw):
    """The real gate at `url` over the log from its current end (an earlier start's lines are not
    read); `started` (an Event) is set once that end is taken, for the scripted events to follow."""
    follower = health.FileFollower(str(log), log.stat().st_size)
    if started is not None:
        started.set()
    return health.wait_ready(url, follower, state, **kw)


def wait_on_closed_port(log, state, **kw):
    """The gate with nothing listening on the API port: only the log and the process can end the wait."""
    return wait_from_end(f"http://127.0.0.1:{free_port()}", log, state, **kw)
