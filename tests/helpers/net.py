"""Loopback ports for tests."""

from __future__ import annotations

import contextlib
import socket

# Ports handed out in this process. A test often takes one port as a layout's base (its servers then
# use base+1, base+2, ... and its router's metrics base+1000) and another for something else: Linux
# hands out bind(0) ports close together (often 2 apart), so a second pick can land in the first
# one's block and the planner rightly refuses the collision.
_ISSUED: list[int] = []
_BLOCK = 16


def _near_issued(port: int) -> bool:
    return any(abs(port - q) <= _BLOCK or abs(abs(port - q) - 1000) <= _BLOCK for q in _ISSUED)


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now (the kernel's pick; closed again at once),
    away from the blocks of the ports this process handed out before (base + 0..16, base + 1000..1016)."""
    port = 0
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if not _near_issued(port):
            break
    _ISSUED.append(port)
    return port


@contextlib.contextmanager
def listening(port: int = 0):
    """Hold a TCP port of 127.0.0.1 open (listening, never answering) for the block; yields it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        yield s.getsockname()[1]
