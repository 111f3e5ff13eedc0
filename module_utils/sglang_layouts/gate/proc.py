"""Whether the engine still runs, and how it ended: the systemd unit's or the supervised process's
state, as the gate polls it."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field

from ..serve import supervisor


def _signal_name(number) -> str:
    """TERM for 15; the number as given when it names no signal."""
    try:
        return signal.Signals(int(number)).name.replace("SIG", "")
    except ValueError:
        return str(number)


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
    out = subprocess.run([systemctl, "show", unit, "-p", props], capture_output=True, text=True, check=False)
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
            ps.signal = _signal_name(status)
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
        ps.signal = _signal_name(ex["signal"])
        ps.exit_status = f"killed by signal {ex['signal']} ({ps.signal})"
    elif ex.get("exit_code") is not None:
        ps.exit_code = int(ex["exit_code"])
        ps.exit_status = f"exited with status {ex['exit_code']}"
    else:
        ps.exit_status = "not running (no exit status recorded)"
    return ps
