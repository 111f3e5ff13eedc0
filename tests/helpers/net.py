"""Loopback ports for tests."""

from __future__ import annotations

import contextlib
import socket


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now (the kernel's pick; closed again at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def listening(port: int = 0):
    """Hold a TCP port of 127.0.0.1 open (listening, never answering) for the block; yields it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        yield s.getsockname()[1]
