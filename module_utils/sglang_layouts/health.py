"""The readiness gate of an SGLang (or vLLM) server: ready, or why it died, in seconds.

State machine (notes/sglang.md 3.1/3.2): port closed = loading, /health 503 =
warming, /health 200 = ready, confirmed by a one-token /generate. The simulator
(engine `sim`) answers like SGLang. vLLM (engine `vllm`, docs/vllm.md): the
port stays closed until it is up (it never answers 503 while starting; 503
means its engine core is dead), /health 200 = ready, confirmed by a one-token
/v1/completions for the served model name (from /v1/models); its facts come
from /v1/models (max_model_len), /version and its start-up log line
`KV cache size: N tokens` (max_total_num_tokens): vLLM has no /server_info. Meanwhile
the engine's log from *this* start (journald after a cursor / for one
invocation, or a log file from its size at start) is classified line by line
(logclass.py), and the unit's or process's state is polled. A fatal line or
the process's exit gives a verdict at once (a generic line such as
`Scheduler hit an exception` decides only with the process's exit (SGLang kills itself right
after it) or when it stands `grace` seconds (default 30) without the server becoming ready; a
non-fatal traceback of a live server does not fail the gate. The specific line
that follows it); the HTTP probe runs in its own thread so a slow /health
never delays that verdict.

Standard library only. Used by library/sglang_health.py and
benchmarks/bench_health.py.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from dataclasses import dataclass, field

from . import logclass, supervisor

TAIL = 30
MAX_LINE = 2000
REDACT_KEYS = ("api_key", "admin_api_key", "ssl_keyfile_password")


# ---------------------------------------------------------------- log sources


class FileFollower:
    """New complete lines of a log file, from a byte offset (the size at start)."""

    def __init__(self, path: str, offset: int = 0):
        self.path = path
        self.offset = offset
        self._partial = b""

    def read(self) -> list[str]:
        try:
            with open(self.path, "rb") as f:
                if os.fstat(f.fileno()).st_size < self.offset:  # truncated: start over
                    self.offset = 0
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return []
        if not data:
            return []
        self.offset += len(data)
        data = self._partial + data
        *lines, self._partial = data.split(b"\n")
        return [ln.decode("utf-8", "replace").rstrip("\r") for ln in lines]

    def final(self) -> list[str] | None:
        """Complete lines of this start after the process ended (None: read() already has them)."""
        return None

    def position(self) -> dict:
        return {"offset": self.offset - len(self._partial)}

    def seek(self, position: dict):
        self.offset = int(position.get("offset", self.offset))
        self._partial = b""

    def close(self):
        pass


class JournalFollower:
    """`journalctl -f` for one unit after a cursor (or for one invocation), read without blocking."""

    def __init__(
        self, unit: str, cursor: str | None = None, invocation_id: str | None = None, journalctl="journalctl"
    ):
        cmd = [journalctl, "--no-pager", "-o", "cat", "-f", "--lines=all"]
        if invocation_id:
            cmd.append(f"_SYSTEMD_INVOCATION_ID={invocation_id}")
            cmd += ["+", f"UNIT={unit}", f"INVOCATION_ID={invocation_id}"]
        else:
            cmd += ["-u", unit]
        if cursor:
            cmd += ["--after-cursor", cursor]
        self.cmd = cmd
        self.once = [c for c in cmd if c != "-f"]
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL
        )
        fd = self.proc.stdout.fileno()
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
        self._partial = b""
        # Lines of this start already read by an earlier slice of the gate (see position()).
        self._skip = 0
        self.lines_read = 0

    def position(self) -> dict:
        return {"lines": self.lines_read}

    def seek(self, position: dict):
        self._skip = self.lines_read = int(position.get("lines", 0))

    def read(self) -> list[str]:
        chunks = []
        while True:
            try:
                data = os.read(self.proc.stdout.fileno(), 65536)
            except BlockingIOError:
                break
            if not data:
                break
            chunks.append(data)
        if not chunks:
            return []
        data = self._partial + b"".join(chunks)
        *lines, self._partial = data.split(b"\n")
        if self._skip:
            dropped = min(self._skip, len(lines))
            lines = lines[dropped:]
            self._skip -= dropped
        self.lines_read += len(lines)
        return [ln.decode("utf-8", "replace") for ln in lines]

    def final(self) -> list[str] | None:
        """All lines of this start, read once (journald may lag `-f` by a moment after an exit)."""
        try:
            out = subprocess.run(self.once, capture_output=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.decode("utf-8", "replace").splitlines()

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(2)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def journal_cursor(journalctl="journalctl") -> str | None:
    """The cursor of the newest journal entry (start following after it)."""
    out = subprocess.run(
        [journalctl, "-n", "0", "--show-cursor", "--no-pager"], capture_output=True, text=True
    )
    for line in out.stdout.splitlines():
        if line.startswith("-- cursor: "):
            return line[len("-- cursor: ") :].strip()
    return None


# ---------------------------------------------------------------- process state


@dataclass
class ProcState:
    alive: bool
    exit_status: str | None = None
    exit_code: int | None = None
    signal: str | None = None
    started_at: float | None = None  # epoch seconds
    detail: dict = field(default_factory=dict)
    stop_requested: bool = False  # the supervisor or systemd was asked to stop it


def systemd_state(unit: str, systemctl="systemctl") -> ProcState:
    props = "ActiveState,SubState,Result,MainPID,ExecMainCode,ExecMainStatus,InvocationID,ExecMainStartTimestampMonotonic"
    out = subprocess.run([systemctl, "show", unit, "-p", props], capture_output=True, text=True)
    d = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
    active = d.get("ActiveState", "")
    # "activating (auto-restart)" is a dead process waiting for Restart=: not alive.
    alive = active in ("active", "activating", "reloading", "deactivating") and d.get("SubState") not in (
        "exited",
        "auto-restart",
        "dead",
        "failed",
    )
    code = d.get("ExecMainCode", "0")
    status = d.get("ExecMainStatus", "0")
    started = None
    mono = d.get("ExecMainStartTimestampMonotonic", "0")
    if mono.isdigit() and int(mono) > 0:
        started = time.time() - (time.monotonic() - int(mono) / 1e6)
    # A stop job (systemctl stop, Conflicts=) in progress; once it is over, systemd's own
    # "Stopping <unit>" line in the journal says the same (logclass).
    ps = ProcState(alive=alive, started_at=started, detail=d, stop_requested=active == "deactivating")
    if not alive:
        # ExecMainCode: 1 = exited, 2 = killed, 3 = dumped (CLD_*)
        if code == "1":
            ps.exit_code = int(status) if status.lstrip("-").isdigit() else None
            ps.exit_status = f"code=exited, status={status}, result={d.get('Result', '')}"
        elif code in ("2", "3"):
            import signal as _signal

            try:
                ps.signal = _signal.Signals(int(status)).name.replace("SIG", "")
            except ValueError:
                ps.signal = status
            ps.exit_status = f"code={'killed' if code == '2' else 'dumped'}, status={status}/{ps.signal}, result={d.get('Result', '')}"
        else:
            ps.exit_status = f"{active} ({d.get('Result', '')})"
    return ps


def process_state(run_dir: str, name: str) -> ProcState:
    st = supervisor.status(run_dir, name)
    started = (st["spec"] or {}).get("started_at")
    if st["running"]:
        return ProcState(alive=True, started_at=started)
    ex = st["exit"] or {}
    stopped = os.path.exists(supervisor.paths(run_dir, name)["stop"])
    ps = ProcState(alive=False, started_at=started, detail=ex, stop_requested=stopped)
    if ex.get("signal"):
        import signal as _signal

        try:
            ps.signal = _signal.Signals(int(ex["signal"])).name.replace("SIG", "")
        except ValueError:
            ps.signal = str(ex["signal"])
        ps.exit_status = f"killed by signal {ex['signal']} ({ps.signal})"
    elif ex.get("exit_code") is not None:
        ps.exit_code = int(ex["exit_code"])
        ps.exit_status = f"exited with status {ex['exit_code']}"
    else:
        ps.exit_status = "not running (no exit status recorded)"
    return ps


# ---------------------------------------------------------------- HTTP


def _request(url, method="GET", body=None, api_key=None, timeout=5.0):
    data = None
    headers = {"Accept": "application/json"}
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


ENGINES = ("sglang", "sim", "vllm")


def engine_of(engine: str | None, unit: str | None = None) -> str:
    """The engine the gate talks to: as given, else from the unit's name (vllm-<model>-<layout>), else sglang."""
    if engine:
        if engine not in ENGINES:
            raise ValueError(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}")
        return engine
    return "vllm" if (unit or "").startswith("vllm-") else "sglang"


def probe(base_url: str, api_key=None, timeout=5.0) -> str:
    """'loading' (port closed), 'warming' (503 or other), 'ready' (/health 200).

    vLLM answers 503 only when its engine core is dead; it exits right after, which decides."""
    try:
        code, _ = _request(base_url + "/health", api_key=api_key, timeout=timeout)
    except (ConnectionError, urllib.error.URLError, OSError):
        return "loading"
    return "ready" if code == 200 else "warming"


class Prober(threading.Thread):
    """Polls /health in the background; the main loop only reads `phase`."""

    def __init__(self, base_url, api_key=None, poll=0.2, timeout=5.0):
        super().__init__(daemon=True)
        self.base_url, self.api_key, self.poll, self.timeout = base_url, api_key, poll, timeout
        self.phase = "loading"
        self.first_phase: str | None = None
        self.phases: dict[str, float] = {}
        self._stop = threading.Event()
        # set once the first probe has an answer: a gate slice never ends before it (SGLang's
        # /health runs a one-token generation, which can take longer than a short slice)
        self.probed = threading.Event()

    def run(self):
        while not self._stop.is_set():
            phase = probe(self.base_url, self.api_key, self.timeout)
            self.probed.set()
            if self.first_phase is None:
                self.first_phase = phase
            self.phases.setdefault(phase, time.monotonic())
            self.phase = phase
            if phase == "ready":
                return
            self._stop.wait(self.poll)

    def stop(self):
        self._stop.set()


def redact(obj):
    if isinstance(obj, dict):
        return {k: ("***" if k in REDACT_KEYS and v else redact(v)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [redact(v) for v in obj]
    return obj


def collect_info(base_url: str, api_key=None, timeout=10.0) -> dict:
    """The one-token /generate confirmation, /server_info and /model_info."""
    code, body = _request(
        base_url + "/generate",
        "POST",
        {"text": "ping", "sampling_params": {"max_new_tokens": 1, "temperature": 0}},
        api_key,
        timeout,
    )
    if code != 200:
        raise RuntimeError(f"/generate answered {code}: {body[:200]!r}")
    gen = json.loads(body or b"{}")
    info = {}
    for key, path in (("server_info", "/server_info"), ("model_info", "/model_info")):
        c, b = _request(base_url + path, api_key=api_key, timeout=timeout)
        info[key] = json.loads(b) if c == 200 and b else {}
    si = info["server_info"]
    ranks = []
    for i, st in enumerate(si.get("internal_states") or []):
        mu = dict(st.get("memory_usage") or {})
        mu["rank"] = i
        ranks.append(mu)
    server_args = {k: v for k, v in si.items() if k not in ("internal_states",)}
    return {
        "generate": {"completion_tokens": (gen.get("meta_info") or {}).get("completion_tokens")},
        "max_total_num_tokens": si.get("max_total_num_tokens"),
        "memory_per_rank": ranks,
        "model_info": info["model_info"],
        "server_args": redact(server_args),
    }


def collect_info_vllm(base_url: str, api_key=None, timeout=10.0, kv_tokens=None) -> dict:
    """vLLM: /v1/models (served name, max_model_len), a one-token /v1/completions, /version.

    kv_tokens: from the start-up line `KV cache size: N tokens` (vLLM has no /server_info)."""
    code, body = _request(base_url + "/v1/models", api_key=api_key, timeout=timeout)
    if code != 200:
        raise RuntimeError(f"/v1/models answered {code}: {body[:200]!r}")
    models = (json.loads(body or b"{}").get("data")) or []
    if not models:
        raise RuntimeError("/v1/models lists no model")
    model = models[0]
    code, body = _request(
        base_url + "/v1/completions",
        "POST",
        {"model": model.get("id"), "prompt": "ping", "max_tokens": 1, "temperature": 0},
        api_key,
        timeout,
    )
    if code != 200:
        raise RuntimeError(f"/v1/completions answered {code}: {body[:200]!r}")
    gen = json.loads(body or b"{}")
    version = None
    try:
        c, b = _request(base_url + "/version", api_key=api_key, timeout=timeout)
        if c == 200 and b:
            version = json.loads(b).get("version")
    except (OSError, ValueError):
        pass
    model_info = {
        "served_model_name": model.get("id"),
        "model_path": model.get("root"),
        "max_model_len": model.get("max_model_len"),
        "served_model_names": [m.get("id") for m in models],
    }
    return {
        "generate": {"completion_tokens": (gen.get("usage") or {}).get("completion_tokens")},
        "max_total_num_tokens": kv_tokens,
        "memory_per_rank": [],
        "model_info": model_info,
        "server_args": {"engine": "vllm", "version": version, "max_model_len": model.get("max_model_len")},
    }


def kv_tokens_from_history(follower) -> int | None:
    """vLLM's KV line from the engine's whole log, for a server that was already up (its start
    is before this gate's offset or cursor): the newest start's figure."""
    lines = []
    if isinstance(follower, FileFollower):
        try:
            with open(follower.path, "rb") as f:
                lines = f.read().decode("utf-8", "replace").splitlines()
        except OSError:
            return None
    elif isinstance(follower, JournalFollower):
        cmd = [c for c in follower.once if c != "--after-cursor"]
        if "--after-cursor" in follower.once:
            i = follower.once.index("--after-cursor")
            cmd = follower.once[:i] + follower.once[i + 2 :]
        try:
            out = subprocess.run(cmd, capture_output=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        lines = out.stdout.decode("utf-8", "replace").splitlines()
    found = None
    for line in lines:
        n = logclass.kv_tokens(line)
        if n is not None:
            found = n  # the last start's
    return found


# ---------------------------------------------------------------- the gate


class HealthFailure(Exception):
    def __init__(self, failure_class: str, msg: str, evidence: dict, hint: str = ""):
        super().__init__(msg)
        self.failure_class = failure_class
        self.msg = msg
        self.evidence = evidence
        self.hint = hint

    def as_dict(self) -> dict:
        return {
            "failure_class": self.failure_class,
            "msg": self.msg,
            "evidence": self.evidence,
            "hint": self.hint,
        }


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

    engine: sglang and sim confirm with /generate and read /server_info; vllm confirms with
    /v1/completions and takes the KV capacity from its log (see the module docstring).

    slice_s: return after this many seconds without a verdict, with `pending: true`, the start-up
    phase reached and a `resume` state; calling again with `resume=` goes on where this call left
    off (same log position, same clock, same findings), so a caller can show progress between
    slices. The state holds log lines, never the API key."""
    engine = engine_of(engine)
    resume = resume or {}
    now = time.time()
    t0 = float(resume.get("t0", now))  # epoch: the clock survives across slices
    slice_end = time.monotonic() + slice_s if slice_s else None
    tail: deque[str] = deque(resume.get("tail", []), maxlen=TAIL)
    classifier = logclass.LogClassifier()
    if resume.get("found"):
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

    def elapsed():
        return round(time.time() - t0, 3)

    def feed(lines):
        nonlocal found_at, ready_line, phase
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
            if engine == "vllm":
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
        }
        what = f"{cls}: {line[:300]}" if line else f"{cls}: {ev['exit_status'] or 'no fatal line'}"
        raise HealthFailure(
            cls, f"{base_url} did not become ready ({round(elapsed(), 1)} s): {what}", ev, hint
        )

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

    try:
        while True:
            feed(follower.read())
            found = classifier.found
            if found is not None and found.definitive:
                drain(settle=0.05, limit=0.2)
                found = classifier.found
                fail(found.cls, found.line, found.hint, state_fn())
            state = state_fn()
            if not state.alive:
                drain()
                complete = follower.final()
                if complete:
                    tail.clear()
                    classifier = logclass.LogClassifier()
                    feed(complete)
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
                    if not confirm:
                        facts = {}
                    elif engine == "vllm":
                        feed(follower.read())
                        # one line per DP engine core: the per-scheduler figure is the smallest
                        kv = min(kv_seen) if kv_seen else None
                        if kv is None and prober.first_phase == "ready":  # up before this gate began
                            kv = kv_tokens_from_history(follower)
                        facts = collect_info_vllm(base_url, api_key, kv_tokens=kv)
                    else:
                        facts = collect_info(base_url, api_key)
                        if facts.get("max_total_num_tokens") is None and figures.get("kv_tokens"):
                            facts["max_total_num_tokens"] = int(figures["kv_tokens"])
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


# ---------------------------------------------------------------- preflight


def port_in_use(host: str, port: int) -> bool:
    """True when something listens on host:port (a bind test, as the server's own bind would fail)."""
    import errno
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return True
            raise
    return False


def _identity(user: str) -> tuple[int | None, set[int]]:
    """uid and every gid of a user; (None, set()) when it does not exist yet (only 'other' bits count)."""
    import grp
    import pwd

    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        return None, set()
    gids = {pw.pw_gid} | {g.gr_gid for g in grp.getgrall() if user in g.gr_mem}
    return pw.pw_uid, gids


def _may(st, uid, gids, bits: int) -> bool:
    """bits: 4 read, 1 search/execute; the owner, group or other class that applies, as the kernel picks it."""
    if uid == 0:
        return True
    if uid is not None and st.st_uid == uid:
        return (st.st_mode >> 6) & bits == bits
    if st.st_gid in gids:
        return (st.st_mode >> 3) & bits == bits
    return st.st_mode & bits == bits


def unreadable(user: str, path: str) -> str | None:
    """Why `user` cannot read `path` (a folder on the way it cannot enter, or the file itself), or None.
    A path that does not exist yet is judged by the folders above it (it will be created readable)."""
    import stat as _stat

    uid, gids = _identity(user)
    path = os.path.abspath(path)
    parts = path.split(os.sep)
    for i in range(2, len(parts) + 1):
        here = os.sep.join(parts[:i]) or os.sep
        try:
            st = os.stat(here)
        except FileNotFoundError:
            return None
        last = i == len(parts)
        need = (4 | (1 if _stat.S_ISDIR(st.st_mode) else 0)) if last else 1
        if not _may(st, uid, gids, need):
            import grp
            import pwd

            try:
                owner = pwd.getpwuid(st.st_uid).pw_name
            except KeyError:
                owner = str(st.st_uid)
            try:
                group = grp.getgrgid(st.st_gid).gr_name
            except KeyError:
                group = str(st.st_gid)
            what = "read" if last else "enter"
            return (
                f"the engine runs as {user}, who cannot {what} {here} (mode {_stat.S_IMODE(st.st_mode):04o} "
                f"{owner}:{group}), so it cannot read {path}. Fix: clone or copy the files into a folder {user} "
                f"can read (e.g. /opt or /srv), or `chmod o+x` each folder above {path}, or set "
                "sglang_run_dir / sglang_model.path to such a place"
            )
    return None


def preflight(
    verdict: str,
    reasons,
    force: bool,
    model_path: str | None,
    host: str,
    port: int,
    own_active: bool,
    read_as: str | None = None,
    read_paths=(),
    ports=(),
) -> list[str]:
    """Read-only checks before anything on the host changes; returns the problems (empty = go).

    own_active: the layout's unit, or one that conflicts with it (and will be stopped), is running.
    read_as / read_paths: the unprivileged user the engine runs as must be able to read these
    (its code, the model's config, the run dir); ports: the layout's other listening ports.
    """
    problems = []
    if read_as:
        for path in read_paths or ():
            why = unreadable(read_as, path)
            if why:
                problems.append(why)
    if verdict in ("oom", "invalid") and not force:
        problems.append(
            f"the planner's verdict is {verdict}: "
            + " ".join(reasons or [])
            + " (override with -e sglang_force=true)"
        )
    if model_path and not os.path.exists(model_path):
        problems.append(f"the model path {model_path} does not exist on this host")
    for p in [port, *[int(x) for x in ports or () if int(x) != port]]:
        if port_in_use(host, p) and not own_active:
            problems.append(
                f"port {p} on {host} is in use by a process that is not one of our layout units: an engine "
                "started there would answer its warm-up with that server's replies and die minutes later. "
                "Stop that process or give the layout another port:"
            )
    return problems
