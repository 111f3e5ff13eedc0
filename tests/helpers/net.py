"""Loopback ports for tests."""

from __future__ import annotations

import contextlib
import socket

# One picker for the whole machine, shared with the simulator's launcher and the benchmarks: ports
# below the ephemeral range, handed out in turn through a counter file, each with its block of 20
# and its +1000 twin clear (sglang_sim/launcher.py says why).
from sglang_sim.launcher import free_port

__all__ = ["free_port", "listening"]


@contextlib.contextmanager
def listening(port: int = 0):
    """Hold a TCP port of 127.0.0.1 open (listening, never answering) for the block; yields it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        yield s.getsockname()[1]
