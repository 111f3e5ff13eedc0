"""The loopback port picker of the tests, the benchmarks and the simulator's launcher: below the
ephemeral range (no outgoing connection takes the port before the server binds it) and handed out
in turn through one counter file, so that processes side by side never get the same port."""

from __future__ import annotations

import subprocess
import sys

from sglang_sim import launcher
from sglang_sim.launcher import PACKAGE_ROOT


def _ports_of_another_process(counter, n):
    code = f"from sglang_sim.launcher import free_port; print(*[free_port() for _ in range({n})])"
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=PACKAGE_ROOT,
        env={"SGLANG_SIM_PORT_COUNTER": str(counter), "PYTHONPATH": str(PACKAGE_ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return [int(p) for p in out.stdout.split()]


def test_two_processes_never_get_the_same_port_and_stay_below_the_ephemeral_range(tmp_path, monkeypatch):
    counter = tmp_path / "next-port"
    monkeypatch.setattr(launcher, "PORT_COUNTER", str(counter))
    mine = [launcher.free_port() for _ in range(10)]
    theirs = _ports_of_another_process(counter, 10)
    mine += [launcher.free_port() for _ in range(10)]
    ports = mine + theirs
    assert len(set(ports)) == len(ports), ports
    assert all(20000 <= p < 32000 for p in ports)
    # a base's block (base + 0..19) and its +1000 twin never reach another base
    blocks = {p + i for p in ports for i in range(launcher.PORT_STRIDE)} | {p + 1000 for p in ports}
    assert len(blocks) == len(ports) * (launcher.PORT_STRIDE + 1)


def test_a_port_in_use_is_passed_over(tmp_path, monkeypatch):
    import socket

    counter = tmp_path / "next-port"
    monkeypatch.setattr(launcher, "PORT_COUNTER", str(counter))
    first = launcher.free_port()
    counter.write_text(str(launcher._bases().index(first)))  # the counter points at it again
    with socket.socket() as held:
        held.bind(("127.0.0.1", first))
        held.listen()
        assert launcher.free_port() != first
