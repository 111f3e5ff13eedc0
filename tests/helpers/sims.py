"""A ready simulator that logs its schedule, for the tests that compare a client against it; the port
of a simulator held in its start-up."""

from __future__ import annotations

import contextlib
import socket
from pathlib import Path

import pytest

from sglang_sim.launcher import SimProcess


@contextlib.contextmanager
def scheduled_sim(work_dir, args, decode_step_ms: float, **env: str):
    """The simulator with args at a fixed decode step (prefill 0.01 ms per token, health polled every
    50 ms), its schedule in work_dir/schedule.jsonl (sim.schedule_log); env adds SGLANG_SIM_* knobs."""
    with SimProcess(
        args,
        env={"SGLANG_SIM_HEALTH_POLL_SECONDS": "0.05", **env},
        decode_step_ms=decode_step_ms,
        prefill_ms_per_token=0.01,
        schedule_log=Path(work_dir) / "schedule.jsonl",
    ) as sim:
        sim.wait_ready()
        yield sim


def assert_closed_while_loading(sim: SimProcess, hold_dir: Path) -> None:
    """sim (started with SGLANG_SIM_HOLD_DIR=hold_dir) is held while it loads its weights: its port
    refuses connections until the test lets the load go on (hold_dir/load)."""
    sim.wait_for_line("Load weight begin")
    with (
        pytest.raises(ConnectionRefusedError),
        socket.create_connection(("127.0.0.1", sim.port), timeout=60),
    ):
        pass
    (hold_dir / "load").touch()
