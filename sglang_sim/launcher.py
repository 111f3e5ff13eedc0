"""Start a simulator process and follow its log: for tests and benchmarks.

with SimProcess(["--tp-size", "8"], env={"SGLANG_SIM_LOAD_SECONDS": "0.2"}) as sim:
    sim.wait_ready()
    urllib.request.urlopen(sim.url("/health"))
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODEL = PACKAGE_ROOT / "models" / "kimi-k2.6"
# Every wait below returns on its event (a log line, an open port, the exit); this ceiling only
# catches a hang, so a slow or busy host never decides a verdict.
HANG_S = 300.0


# Listening ports for tests and benchmarks come from below Linux's ephemeral range (32768-60999 by
# default), where no outgoing connection takes them between the pick and the server's bind, and in
# turn from one counter for the whole machine (a file under flock), so that two processes (pytest
# workers, make test's stages side by side) never pick the same port. A base port's block (base + 0..19,
# the servers of a layout) and its +1000 twin (a router's metrics port) stay clear of every other pick:
# bases come only from the first half of each 2000-port window.
PORT_WINDOWS = range(20000, 32000, 2000)
PORT_STRIDE = 20
PORT_COUNTER = os.environ.get("SGLANG_SIM_PORT_COUNTER", "/tmp/sglang-layouts-next-port")


def _bases():
    return [w + i for w in PORT_WINDOWS for i in range(0, 1000, PORT_STRIDE)]


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now, and that no other process of the machine
    was handed recently (the next of some 300 bases, in turn; closed again at once)."""
    import fcntl

    bases = _bases()

    def pick(nxt: int) -> tuple[int, int]:
        for step in range(len(bases)):
            port = bases[(nxt + step) % len(bases)]
            if _bindable(port) and _bindable(port + 1000):
                return port, (nxt + step + 1) % len(bases)
        raise RuntimeError(f"no free port among {len(bases)} bases in {PORT_WINDOWS}")

    try:
        fh = open(PORT_COUNTER, "a+")  # noqa: SIM115 - held (and locked) for the pick below
    except OSError:  # another user's counter: this process's own turn, from its pid
        return pick(os.getpid() % len(bases))[0]
    with fh:
        fcntl.flock(fh, fcntl.LOCK_EX)  # released when the file closes
        fh.seek(0)
        text = fh.read().strip()
        port, nxt = pick(int(text) % len(bases) if text.isdigit() else os.getpid() % len(bases))
        fh.seek(0)
        fh.truncate()
        fh.write(str(nxt))
    return port


class SimProcess:
    def __init__(
        self,
        args=(),
        *,
        env: dict | None = None,
        port: int | None = None,
        model_path=None,
        python: str | None = None,
        decode_step_ms: float | None = None,
        prefill_ms_per_token: float | None = None,
        schedule_log=None,
    ):
        """decode_step_ms, prefill_ms_per_token: the simulated speed; schedule_log: where the
        simulator writes when each request arrived and each token was due (JSON lines)."""
        self.port = port or free_port()
        self.schedule_log = Path(schedule_log) if schedule_log else None
        knobs = {
            "SGLANG_SIM_DECODE_STEP_MS": decode_step_ms,
            "SGLANG_SIM_PREFILL_MS_PER_TOKEN": prefill_ms_per_token,
            "SGLANG_SIM_SCHEDULE_LOG": schedule_log,
        }
        self.model_path = str(model_path or DEFAULT_MODEL)
        self.argv = [
            python or sys.executable,
            "-m",
            "sglang_sim",
            "--model-path",
            self.model_path,
            "--port",
            str(self.port),
            *args,
        ]
        pp = os.pathsep.join([str(PACKAGE_ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        self.env = {
            **os.environ,
            "PYTHONPATH": pp,
            "SGLANG_SIM_LOAD_SECONDS": "0.2",
            "SGLANG_SIM_WARMUP_SECONDS": "0.2",
            **{k: str(v) for k, v in knobs.items() if v is not None},
            **(env or {}),
        }
        self.lines: list[tuple[float, str]] = []
        self._cond = threading.Condition()
        self.proc: subprocess.Popen | None = None
        self._reader: threading.Thread | None = None
        self.started_at = 0.0

    # -- life cycle ------------------------------------------------------------------
    def start(self) -> SimProcess:
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen(
            self.argv, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, bufsize=1
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._cond:
                self.lines.append((time.monotonic(), line.rstrip("\n")))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        if self._reader is not None:
            self._reader.join(timeout=5)

    def __enter__(self) -> SimProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- observing --------------------------------------------------------------------
    @property
    def text(self) -> str:
        with self._cond:
            return "\n".join(line for _t, line in self.lines)

    def wait_for_line(self, needle: str, timeout: float = HANG_S) -> tuple[float, str]:
        """(monotonic time it was read, line) of the first line containing needle."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for t, line in self.lines:
                    if needle in line:
                        return t, line
                left = deadline - time.monotonic()
                if left <= 0 or (
                    self.proc is not None
                    and self.proc.poll() is not None
                    and not (self._reader and self._reader.is_alive())
                ):
                    raise TimeoutError(f"no log line containing {needle!r}; log:\n{self.text_unlocked()}")
                self._cond.wait(min(left, 0.1))

    def text_unlocked(self) -> str:
        return "\n".join(line for _t, line in self.lines)

    def wait_ready(self, timeout: float = HANG_S) -> None:
        self.wait_for_line("The server is fired up and ready to roll!", timeout)

    def wait_exit(self, timeout: float = HANG_S) -> int:
        assert self.proc is not None
        rc = self.proc.wait(timeout=timeout)
        if self._reader is not None:
            self._reader.join(timeout=5)
        return rc

    def wait_listening(self, port: int | None = None, timeout: float = HANG_S) -> None:
        """Until a TCP port of 127.0.0.1 (default: the API port) accepts connections; TimeoutError
        if the process exits first."""
        port = self.port if port is None else port
        deadline = time.monotonic() + timeout
        while True:
            with socket.socket() as s:
                s.settimeout(1.0)
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return
            if time.monotonic() > deadline or (self.proc is not None and self.proc.poll() is not None):
                raise TimeoutError(f"nothing listens on port {port}; log:\n{self.text}")
            time.sleep(0.05)

    def url(self, path: str = "") -> str:
        return f"http://127.0.0.1:{self.port}{path}"
