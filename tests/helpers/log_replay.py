"""Replay a real engine log through the real gate, with the log's own line timing.

A fixture log is SGLang's output as it was captured on a GPU host: `[YYYY-mm-dd HH:MM:SS] `
stamps (lines without one, tracebacks, belong to the last stamp), plus two kinds of lines the
capture added: `[device_run] server exited rc=N` (the launcher's exit, N as the shell saw it:
137 = SIGKILL, which SGLang sends itself after a child failed) and `[trim_log.py: ...]`
(where repetitive lines were dropped). The replay writes the engine lines to a log file at
their original offsets (optionally with long gaps shortened), serves SGLang's HTTP API the way
the logged server would have (port closed until uvicorn's line, /health 503 until the ready
line, then 200; /server_info with the logged max_total_num_tokens), and reports the process as
alive until the exit line. The gate (health.wait_ready) reads all of it like a real start.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from sglang_layouts.gate import health, logclass

from tests.helpers.fake_http import JsonHandler, LoopbackServer
from tests.helpers.net import free_port

STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:[ .,][^\]]*)?\] ")
EXIT = re.compile(r"^\[device_run\] server exited rc=(\d+)")
CAPTURE_NOTE = re.compile(r"^\[(?:device_run|trim_log\.py)[\]:]")


@dataclass
class Event:
    at: float  # seconds after the first stamped line
    line: str | None  # None: the process exits
    exit_rc: int | None = None


@dataclass
class ParsedLog:
    events: list[Event]
    max_total_num_tokens: int | None
    fatal_at: float | None = None  # offset of the first definitive line, if any
    meta: dict = field(default_factory=dict)


def parse(path: Path) -> ParsedLog:
    events: list[Event] = []
    t_first = None
    now = 0.0
    kv = None
    for raw in path.read_text().splitlines():
        m = STAMP.match(raw)
        if m:
            t = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").timestamp()
            if t_first is None:
                t_first = t
                # lines before the first stamp (Python's warnings) happened at about that time
            now = t - t_first
        ex = EXIT.match(raw)
        if ex:
            events.append(Event(now, None, int(ex.group(1))))
            continue
        if CAPTURE_NOTE.match(raw):
            continue
        k = re.search(r"max_total_num_tokens=(\d+)", raw)
        if k:
            kv = int(k.group(1))
        events.append(Event(now, raw))
    return ParsedLog(events, kv)


def shorten(events: list[Event], max_gap: float | None) -> list[Event]:
    """The same events with every pause longer than max_gap cut to max_gap (order and short gaps kept)."""
    if max_gap is None:
        return events
    out, shift, prev = [], 0.0, 0.0
    for ev in events:
        gap = ev.at - prev
        if gap > max_gap:
            shift += gap - max_gap
        prev = ev.at
        out.append(Event(ev.at - shift, ev.line, ev.exit_rc))
    return out


class _Handler(JsonHandler):
    replay: Replay

    def do_GET(self):
        r = self.replay
        if self.path == "/health":
            self._json(200 if r.ready else 503, {})
        elif self.path in ("/server_info", "/get_server_info"):
            self._json(200, {"max_total_num_tokens": r.parsed.max_total_num_tokens, "internal_states": []})
        elif self.path in ("/model_info", "/get_model_info"):
            self._json(200, {"model_path": "replay"})
        else:
            self._json(404, {"detail": "Not Found"})

    def do_POST(self):
        self._body()
        if self.path == "/generate" and self.replay.ready:
            self._json(200, {"text": "t1", "meta_info": {"completion_tokens": 1}})
        else:
            self._json(503, {})


class Replay:
    """Writes the log, serves the API and tells the process state, on the log's clock."""

    def __init__(
        self, path: Path, log_file: Path, max_gap: float | None = None, hold_after_ready: bool = False
    ):
        """hold_after_ready: after the ready line, write nothing more until close(): the lines after
        it (a stop's cascade) cannot reach a gate that is still confirming the ready server, so its
        verdict does not depend on how fast this machine runs the two threads."""
        self.parsed = parse(path)
        self.hold_after_ready = hold_after_ready
        self.events = shorten(self.parsed.events, max_gap)
        self.log_file = log_file
        self.port = free_port()
        self.ready = False
        self.exited: int | None = None
        self.written: dict[int, float] = {}  # event index -> monotonic time it was written
        self.server: LoopbackServer | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._stop = threading.Event()
        self.t0 = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self):
        self.log_file.write_text("")
        self.t0 = time.monotonic()
        self._thread.start()
        return self

    def _serve(self):
        self.server = LoopbackServer(type("H", (_Handler,), {"replay": self}), self.port)

    def _run(self):
        with self.log_file.open("a") as log:
            for i, ev in enumerate(self.events):
                delay = self.t0 + ev.at - time.monotonic()
                if delay > 0 and self._stop.wait(delay):
                    return
                if ev.line is None:
                    self.exited = ev.exit_rc
                    self.written[i] = time.monotonic()
                    continue
                log.write(ev.line + "\n")
                log.flush()
                self.written[i] = time.monotonic()
                if "Uvicorn running on" in ev.line and self.server is None:
                    self._serve()
                if logclass.READY_LINE in ev.line:
                    self.ready = True
                    if self.hold_after_ready:
                        self._stop.wait()
                        return

    def state(self) -> health.ProcState:
        if self.exited is None:
            return health.ProcState(alive=True, started_at=time.time() - (time.monotonic() - self.t0))
        if self.exited == 137:  # SIGKILL, as the shell reports it
            return health.ProcState(alive=False, signal="KILL", exit_status="killed by signal 9 (KILL)")
        return health.ProcState(
            alive=False, exit_code=self.exited, exit_status=f"exited with status {self.exited}"
        )

    def first_definitive(self) -> tuple[int, str] | None:
        """Index and line of the first line the classifier takes as definitive."""
        c = logclass.LogClassifier()
        for i, ev in enumerate(self.events):
            if ev.line is not None:
                m = c.feed(ev.line)
                if m is not None and m.definitive:
                    return i, ev.line
        return None

    def final_exception(self) -> tuple[int, str] | None:
        """Index and line of the last traceback exception line before the exit: the final
        exception of the failure (the classifier's reading, so chained tracebacks count once)."""
        c = logclass.LogClassifier()
        out = None
        for i, ev in enumerate(self.events):
            if ev.line is None:
                break
            before = c.exception_line
            c.feed(ev.line)
            if c.exception_line is not before:
                out = (i, ev.line)
        return out

    def close(self):
        self._stop.set()
        if self.server is not None:
            self.server.close()


class ScriptedFollower:
    """A log follower that hands out fixed chunks of lines, one chunk per read(): what the gate
    reads depends on how often it reads, never on how fast this machine is. hold: (chunk index,
    seconds): before that chunk, read() returns nothing for that long (a log reader lagging
    behind the process, as journald does after a SIGKILL)."""

    def __init__(self, chunks: list[list[str]], hold: tuple[int, float] | None = None):
        self.chunks = [list(c) for c in chunks]
        self.next = 0
        self.hold = hold
        self._held_since: float | None = None
        self.lines_read = 0

    def read(self) -> list[str]:
        if self.next >= len(self.chunks):
            return []
        if self.hold and self.next == self.hold[0]:
            if self._held_since is None:
                self._held_since = time.monotonic()
            if time.monotonic() - self._held_since < self.hold[1]:
                return []
        chunk = self.chunks[self.next]
        self.next += 1
        self.lines_read += len(chunk)
        return chunk

    @property
    def done(self) -> bool:
        return self.next >= len(self.chunks)

    def final(self):
        return None

    def history(self):
        return None

    def position(self) -> dict:
        return {"chunk": self.next}

    def seek(self, position: dict):
        self.next = int(position.get("chunk", self.next))

    def close(self):
        pass


def gate(replay: Replay, **kw) -> tuple[dict | None, health.HealthFailure | None, float]:
    """Run the real gate over a started replay: (facts, failure, monotonic time of the verdict)."""
    follower = health.FileFollower(str(replay.log_file), 0)
    try:
        facts = health.wait_ready(replay.url, follower, replay.state, **kw)
        return facts, None, time.monotonic()
    except health.HealthFailure as exc:
        return None, exc, time.monotonic()
