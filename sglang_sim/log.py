"""SGLang's log lines on stderr, one flushed write per line.

Main process: `[2026-11-29 15:00:00] msg`; a scheduler rank: `[2026-11-29 15:00:00 TP0] msg`
(` DPn` / ` PPn` / ` EPn` added when those sizes are > 1, as scheduler.py builds it);
uvicorn: `[2026-11-29 15:00:00] INFO:     msg`.
"""

from __future__ import annotations

import sys
import time

# The main process's line when a scheduler died during launch (start-up and multi-node both log it).
SIGQUIT_FROM_CHILD = "Received sigquit from a child process. It usually means the child failed."


def _ts() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


class Log:
    def __init__(self, stream=None):
        self.stream = stream or sys.stderr

    def write(self, text: str) -> None:
        # Like logging's handlers: a log that cannot be written (the reader went away) never
        # stops the server, nor its signal handlers.
        try:
            self.stream.write(text if text.endswith("\n") else text + "\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass

    def main(self, msg: str) -> None:
        self.write(f"[{_ts()}] {msg}")

    def rank(self, prefix: str, msg: str) -> None:
        self.write(f"[{_ts()}{prefix}] {msg}")

    def uvicorn(self, level: str, msg: str) -> None:
        self.write(f"[{_ts()}] {(level + ':').ljust(9)} {msg}")

    def raw(self, text: str) -> None:
        """Multi-line text (a traceback) written as is."""
        self.write(text)


def rank_prefix(*, tp_rank: int, pp_rank: int, pp_size: int, ep_rank: int, ep_size: int, dp_rank=None) -> str:
    prefix = ""
    if dp_rank is not None:
        prefix += f" DP{dp_rank}"
    if pp_size > 1:
        prefix += f" PP{pp_rank}"
    prefix += f" TP{tp_rank}"
    if ep_size > 1:
        prefix += f" EP{ep_rank}"
    return prefix
