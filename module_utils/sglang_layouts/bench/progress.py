"""Waiting for a line of the load generator's progress file (the task sglang_bench_wait).

The load generator runs on the host as an async job and appends one line per event to its progress
file (``HH:MM:SS level c=16 done: ...``). The role shows each level as it ends by waiting for that
level's line, every level of the ladder in one task. The wait runs on the host as one shell loop
that checks the file every tenth of a second and exits on the first matching line, or after a slice
of time: the controller starts one command per slice (one per level, almost always) instead of a
module per poll, and a level's end is seen within 0.1 s instead of within a whole second.
"""

from __future__ import annotations

import re
import shlex

ARGUMENT_SPEC = {
    "path": {"type": "str", "required": True},
    "levels": {"type": "list", "elements": "str", "required": True},
    "timeout": {"type": "float", "default": 3600.0},
    "search_timeout": {"type": "float"},
    "poll": {"type": "float", "default": 0.1},
    "label": {"type": "str", "default": ""},
}

# What ends a wait besides the level's own line: the load generator's last word when it gave up.
FAILED = "bench failed: "
SLO_SEARCH = "slo search"
# The exit status of the slice that saw no line (neither grep's 1 nor a shell's 126/127).
NOT_YET = 3
_STAMP = re.compile(r"^\d\d:\d\d:\d\d ")


def markers(level):
    """The fixed strings any of which ends the wait for `level` (a label such as c=16 or r=0.5, or
    "slo search"). Fixed strings, not patterns: "level c=1 done: " is not part of "level c=16 done: "."""
    if level == SLO_SEARCH:
        return [f"{SLO_SEARCH} done: ", FAILED]
    return [f"level {level} done: ", FAILED]


def slice_command(path, level, slice_s, poll):
    """The host's shell loop for one slice of at most `slice_s` seconds: prints the first line of
    `path` that holds a marker of `level` and exits 0, or exits NOT_YET. A file that does not exist
    yet (the job has not opened it) is a file without the line."""
    tries = max(1, int(slice_s / poll))
    grep = "grep -m1 -F " + " ".join(f"-e {shlex.quote(m)}" for m in markers(level))
    return (
        f"f={shlex.quote(path)}; i=0; while [ $i -lt {tries} ]; do "
        f'{grep} "$f" 2>/dev/null && exit 0; sleep {poll:g}; i=$((i+1)); done; exit {NOT_YET}'
    )


def ended(stdout):
    """The progress line a slice printed, without its clock stamp ("level c=16 done: ..."), and
    whether it is the load generator's failure rather than the level's end."""
    lines = (stdout or "").strip().splitlines()
    line = _STAMP.sub("", lines[0]) if lines else ""
    return line, line.startswith(FAILED)


def level_timeout(level, timeout, search_timeout=None):
    """Seconds to wait for one level's line: `timeout`, or `search_timeout` (when given) for the SLO
    search, which runs several levels of its own."""
    return float(search_timeout) if level == SLO_SEARCH and search_timeout else float(timeout)
