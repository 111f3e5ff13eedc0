"""The readiness gate's public names in one import, for callers that use several of its parts
(benchmarks/bench_health.py, the test helpers); each part lives in its own file:

- gate/logs.py: the log followers (a log file from an offset, the journal after a cursor)
- gate/proc.py: the unit's or the supervised process's state
- gate/probe.py: the /health prober and the facts read once the server is ready
- gate/readiness.py: the gate itself (wait_ready, check_alive) and its HealthFailure
- gate/preflight.py: the read-only checks before anything on the host changes

Standard library only.
"""

from __future__ import annotations

from ..serve import supervisor
from .logs import FileFollower, JournalFollower, journal_cursor
from .preflight import port_in_use, preflight, unreadable
from .probe import REDACT_KEYS, Prober, collect_facts, collect_info, collect_info_vllm, probe, redact
from .proc import ProcState, process_state, systemd_state
from .readiness import (
    MAX_LINE,
    TAIL,
    HealthFailure,
    check_alive,
    engine_of,
    kv_tokens_from_history,
    wait_ready,
)

__all__ = [
    "MAX_LINE",
    "REDACT_KEYS",
    "TAIL",
    "FileFollower",
    "HealthFailure",
    "JournalFollower",
    "Prober",
    "ProcState",
    "check_alive",
    "collect_facts",
    "collect_info",
    "collect_info_vllm",
    "engine_of",
    "journal_cursor",
    "kv_tokens_from_history",
    "port_in_use",
    "preflight",
    "probe",
    "process_state",
    "redact",
    "supervisor",
    "systemd_state",
    "unreadable",
    "wait_ready",
]
