"""The readiness gate of an SGLang (or vLLM) server: ready, or why it died, in seconds.

State machine (docs/sglang.md 3.1/3.2): port closed = loading, /health 503 =
warming, /health 200 = ready, confirmed by a one-token request (engines.py:
confirm_route). SGLang (and the simulator, engine `sim`) confirm with /generate
and read /server_info. vLLM (docs/vllm.md) keeps its port closed until it is up
(it never answers 503 while starting; 503 means its engine core is dead),
confirms with /v1/completions for the served model name (from /v1/models), and
logs its KV capacity (`KV cache size: N tokens`): it has no /server_info.
Meanwhile the engine's log from *this* start (gate/logs.py) is classified line
by line (gate/logclass.py), and the unit's or process's state (gate/proc.py) is
polled. A fatal line or the process's exit gives a verdict at once, with two
waits: a traceback is read whole (its header decides nothing; the verdict waits
until its final exception and message are in, which the next log record shows,
or until TRACEBACK_QUIET_S pass without a line), and a generic line such as
`Scheduler hit an exception` alone decides only with the process's exit (SGLang
kills itself right after it) or when it stands `grace` seconds (default 30)
without the server becoming ready, so a non-fatal traceback of a live server
does not fail the gate. The HTTP probe runs in its own thread (gate/probe.py)
so a slow /health never delays that verdict.

Standard library only. Used by library/sglang_health.py and
benchmarks/bench_health.py.
"""

from __future__ import annotations

import time
from collections import deque

from .. import engines
from . import logclass
from .probe import Prober, collect_facts
from .proc import ProcState

TAIL = 30
MAX_LINE = 2000
# A traceback still open this long after its last line is taken as complete: its writer died
# mid-way, or the log reader lags behind it. Bounds the wait for a final exception line.
TRACEBACK_QUIET_S = 0.5
# After the process exited: the log is read until it has been quiet this long (journald lags the
# process a little), TRACEBACK_QUIET_S while a traceback is open.
EXIT_QUIET_S = 0.3


def engine_of(engine: str | None, unit: str | None = None) -> str:
    """The engine the gate talks to: as given, else from the unit's name (vllm-<model>-<layout>), else sglang."""
    if engine:
        if engine not in engines.ENGINES:
            raise ValueError(f"engine must be one of {', '.join(engines.ENGINES)}, not {engine!r}")
        return engine
    return engines.engine_of_unit(unit)


def kv_tokens_from_history(follower) -> int | None:
    """vLLM's KV line from the engine's whole log, for a server that was already up (its start
    is before this gate's offset or cursor): the newest start's figure."""
    history = getattr(follower, "history", None)
    lines = history() if history else None
    if lines is None:
        return None
    found = None
    for line in lines:
        n = logclass.kv_tokens(line)
        if n is not None:
            found = n  # the last start's
    return found


class HealthFailure(Exception):
    FIELDS = ("failure_class", "msg", "evidence", "hint")

    def __init__(self, failure_class: str, msg: str, evidence: dict, hint: str = ""):
        super().__init__(msg)
        self.failure_class = failure_class
        self.msg = msg
        self.evidence = evidence
        self.hint = hint

    def as_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.FIELDS}


def wait_ready(
    base_url: str,
    follower,
    state_fn,
    timeout: float = 1800.0,
    poll: float = 0.2,
    grace: float = 30.0,
    api_key=None,
    confirm: bool = True,
    on_verdict=None,
    engine: str = "sglang",
    slice_s: float | None = None,
    resume: dict | None = None,
) -> dict:
    """Block until ready (returns facts) or raise HealthFailure with the class and the evidence.

    engine: sglang, sim or vllm; what differs between them (the confirming request, where the KV
    capacity comes from, the meaning of an exit 0) are fields of engines.Engine.

    slice_s: return after this many seconds without a verdict, with `pending: true`, the start-up
    phase reached and a `resume` state; calling again with `resume=` goes on where this call left
    off (same log position, same clock, same findings), so a caller can show progress between
    slices. The state holds log lines, never the API key."""
    engine = engine_of(engine)
    eng = engines.engine(engine)
    resume = resume or {}
    now = time.time()
    t0 = float(resume.get("t0", now))  # epoch: the clock survives across slices
    slice_end = time.monotonic() + slice_s if slice_s else None
    tail: deque[str] = deque(resume.get("tail", []), maxlen=TAIL)
    classifier = logclass.LogClassifier()
    if resume.get("classifier"):
        classifier.restore(resume["classifier"])
    elif resume.get("found"):
        classifier.found = logclass.Match(**resume["found"])
    found_at = resume.get("found_at")
    ready_line = bool(resume.get("ready_line"))
    kv_seen: list[int] = list(resume.get("kv_seen", []))
    phases: dict[str, float] = dict(resume.get("phases", {}))
    phase = resume.get("phase", "launching")  # before the first start-up line
    figures: dict[str, float] = dict(resume.get("figures", {}))
    if resume.get("position"):
        follower.seek(resume["position"])
    prober = Prober(base_url, api_key, poll=max(poll, 0.2))
    prober.start()
    last_line_at = time.monotonic()  # when the gate last read a line (the traceback's quiet clock)

    def elapsed():
        return round(time.time() - t0, 3)

    def feed(lines):
        nonlocal found_at, ready_line, phase, last_line_at
        if lines:
            last_line_at = time.monotonic()
        for line in lines:
            # server_args=ServerArgs(...) alone is ~10 kB: keep the evidence readable.
            tail.append(
                line if len(line) <= MAX_LINE else f"{line[:MAX_LINE]}... [{len(line) - MAX_LINE} more chars]"
            )
            m = classifier.feed(line)
            if m and found_at is None:
                found_at = time.time()
            if logclass.is_ready_line(line):
                ready_line = True
            for key, value in logclass.startup_figures(line).items():
                figures[key] = max(value, figures.get(key, value))  # the largest rank's figure
            new_phase = logclass.phase_of(line)
            if new_phase:
                phase = new_phase
                phases.setdefault(new_phase, elapsed())
            if eng.kv_tokens_from == "log":
                n = logclass.kv_tokens(line)
                if n is not None:
                    kv_seen.append(n)

    def fail(cls, line, hint, state: ProcState | None):
        if on_verdict:
            on_verdict()
        prober.stop()
        ev = {
            "line": line,
            "log_tail": list(tail),
            "exit_status": state.exit_status if state and not state.alive else None,
            "phase": phase,
            # from reading the first fatal line to this verdict (the poll adds up to `poll` before it)
            "verdict_s_after_line": round(time.time() - found_at, 3) if line and found_at else None,
            # from the start of the wait to this verdict (against the health timeout)
            "waited_s": round(elapsed(), 3),
        }
        what = f"{cls}: {line[:300]}" if line else f"{cls}: {ev['exit_status'] or 'no fatal line'}"
        raise HealthFailure(
            cls, f"{base_url} did not become ready ({round(elapsed(), 1)} s): {what}", ev, hint
        )

    def log_kv_tokens():
        """The KV capacity the log announced: where the engine has it only there, or SGLang's
        max_total_num_tokens= line (for a /server_info without it)."""
        if eng.kv_tokens_from == "log":
            feed(follower.read())
            # one line per DP engine core: the per-scheduler figure is the smallest
            kv = min(kv_seen) if kv_seen else None
            if kv is None and prober.first_phase == "ready":  # up before this gate began
                kv = kv_tokens_from_history(follower)
            return kv
        return int(figures["kv_tokens"]) if figures.get("kv_tokens") else None

    def drain(settle=0.3, limit=1.5):
        """Collect the lines still in flight (journald lags the process a little)."""
        end = time.monotonic() + limit
        quiet_since = time.monotonic()
        while time.monotonic() < end:
            lines = follower.read()
            if lines:
                feed(lines)
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since >= settle:
                return
            time.sleep(0.05)

    def drain_after_exit():
        """Read what the dead process left in flight, as long as it keeps coming: until the log has
        been quiet EXIT_QUIET_S since the exit or the last line (TRACEBACK_QUIET_S while a traceback
        is open, so its final exception is read). A dead process writes no more, so lines stop
        coming; the gate's timeout still bounds it."""
        exited_at = time.monotonic()
        while elapsed() < timeout:
            lines = follower.read()
            if lines:
                feed(lines)
            else:
                quiet = TRACEBACK_QUIET_S if classifier.traceback_open else EXIT_QUIET_S
                if time.monotonic() - max(exited_at, last_line_at) >= quiet:
                    return
            time.sleep(0.05)

    try:
        while True:
            feed(follower.read())
            if classifier.traceback_open and time.monotonic() - last_line_at >= TRACEBACK_QUIET_S:
                classifier.end_traceback()
            found = classifier.found
            # A definitive line inside a traceback waits for the traceback's end: the final
            # exception may say more, and the evidence is the line that says what happened.
            if found is not None and found.definitive and not classifier.traceback_open:
                drain(settle=0.05, limit=0.2)
                found = classifier.found
                fail(found.cls, found.line, found.hint, state_fn())
            state = state_fn()
            if not state.alive:
                drain_after_exit()
                complete = follower.final()
                # The journal read once, unless it lags behind what the follower already gave.
                if complete and len(complete) >= getattr(follower, "lines_read", 0):
                    tail.clear()
                    classifier = logclass.LogClassifier()
                    feed(complete)
                classifier.end_traceback()
                found = classifier.found
                if found is not None:
                    fail(found.cls, found.line, found.hint, state)
                cls, hint = logclass.classify_exit(state.exit_code, state.signal, engine) or (
                    "crashed",
                    "the engine exited",
                )
                fail(cls, None, hint, state)
            if found is not None and prober.phase != "ready" and time.time() - found_at >= grace:
                fail(found.cls, found.line, found.hint, state)
            if prober.phase == "ready":
                try:
                    facts = collect_facts(eng, base_url, api_key, log_kv_tokens()) if confirm else {}
                except (RuntimeError, OSError, ValueError) as exc:
                    # /health said 200 but a one-token generate failed: keep watching.
                    tail.append(f"sglang_health: confirmation failed: {exc}")
                    prober = Prober(base_url, api_key, poll=max(poll, 0.2))
                    prober.start()
                else:
                    facts["waited_s"] = elapsed()
                    facts["ready_after_s"] = (
                        round(time.time() - state.started_at, 3) if state.started_at else facts["waited_s"]
                    )
                    facts["ready_line_seen"] = ready_line
                    # Ready at the very first probe: the server was already up (an unchanged redeploy),
                    # so ready_after_s is only its uptime, not a start-up time.
                    facts["already_ready"] = prober.first_phase == "ready" and not resume
                    facts["url"] = base_url
                    facts["engine"] = engine
                    facts["phases"] = phases
                    facts["log_figures"] = figures
                    return facts
            if elapsed() >= timeout:
                fail(
                    "ready_timeout",
                    None,
                    f"not ready after {timeout:.0f} s (last phase: {phase}; HTTP: {prober.phase})",
                    state,
                )
            if slice_end is not None and time.monotonic() >= slice_end and prober.probed.is_set():
                found = classifier.found
                return {
                    "pending": True,
                    "phase": phase,
                    "phases": phases,
                    "waited_s": elapsed(),
                    "resume": {
                        "t0": t0,
                        "position": follower.position(),
                        "tail": list(tail),
                        "found": found.__dict__ if found else None,
                        "classifier": classifier.snapshot(),
                        "found_at": found_at,
                        "ready_line": ready_line,
                        "kv_seen": kv_seen,
                        "phases": phases,
                        "phase": phase,
                        "figures": figures,
                    },
                }
            time.sleep(poll)
    finally:
        prober.stop()
        follower.close()


def check_alive(follower, state_fn, settle: float = 0.3, engine: str = "sglang") -> None:
    """No HTTP: the engine still runs and logged nothing fatal since the start, or HealthFailure."""
    time.sleep(settle)
    try:
        lines = follower.final()
        if lines is None:
            lines = follower.read()
    finally:
        follower.close()
    tail = [ln if len(ln) <= MAX_LINE else ln[:MAX_LINE] + " [...]" for ln in lines[-TAIL:]]
    state = state_fn()
    # After a stop the tool asked for, SGLang's stop cascade is no failure.
    classifier = logclass.LogClassifier(stop_requested=state.stop_requested)
    for line in lines:
        classifier.feed(line)
    found = classifier.found
    if found is None and state.alive:
        return
    if found is not None:
        cls, line, hint = found.cls, found.line, found.hint
    else:
        exit_class = logclass.classify_exit(
            state.exit_code,
            state.signal,
            engine_of(engine),
            stop_requested=state.stop_requested or classifier.stopping,
        )
        if exit_class is None:
            return
        (cls, hint), line = exit_class, None
    ev = {"line": line, "log_tail": tail, "exit_status": None if state.alive else state.exit_status}
    what = line[:300] if line else ev["exit_status"]
    raise HealthFailure(cls, f"the engine is not healthy: {cls}: {what}", ev, hint)
