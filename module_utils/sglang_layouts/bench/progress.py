"""Waiting for a line of the load generator's progress file (the task sglang_bench_wait).

The load generator runs on the host as an async job and appends one line per event to its progress
file (``HH:MM:SS level c=16 done: ...``). The role shows each level as it ends by waiting for that
level's line, every level of the ladder in one task. The wait runs on the host as one shell loop
that checks the file every tenth of a second and exits on the first matching line, or after a slice
of time: the controller starts one command per slice (one per level, almost always) instead of a
module per poll, and a level's end is seen within 0.1 s instead of within a whole second.

Given the job's results file (Ansible's async job file of the load generator), the same loop also
sees the job end without the line (bad input, a crash) and ends at once with the job's own result,
and after the last line it waits for the job's end and returns its result: no async_status task.
"""

from __future__ import annotations

import json
import re
import shlex

ARGUMENT_SPEC = {
    "path": {"type": "str", "required": True},
    "levels": {"type": "list", "elements": "str", "required": True},
    "timeout": {"type": "float", "default": 3600.0},
    "search_timeout": {"type": "float"},
    "poll": {"type": "float", "default": 0.1},
    "label": {"type": "str", "default": ""},
    "job": {"type": "str"},
}

# What ends a wait besides the level's own line: the load generator's last word when it gave up.
FAILED = "bench failed: "
SLO_SEARCH = "slo search"
# The exit status of the slice that saw no line (neither grep's 1 nor a shell's 126/127).
NOT_YET = 3
# The exit status of the slice that saw the job end without the line; it printed the job's file.
JOB_ENDED = 4
# What async_wrapper's job file holds while the module runs ({"started": true, "finished": false, ...},
# json.dumps's spacing); its last write, the module's own result, replaces the whole file (a rename).
_JOB_RUNNING = '"finished": false'
_STAMP = re.compile(r"^\d\d:\d\d:\d\d ")


def markers(level):
    """The fixed strings any of which ends the wait for `level` (a label such as c=16 or r=0.5, or
    "slo search"). Fixed strings, not patterns: "level c=1 done: " is not part of "level c=16 done: "."""
    if level == SLO_SEARCH:
        return [f"{SLO_SEARCH} done: ", FAILED]
    return [f"level {level} done: ", FAILED]


def _job_ended(job):
    """Shell test: the job's file exists and no longer says it runs (after the line's own check, so
    that a job that wrote its line and ended within one poll still counts as the line)."""
    return f"[ -f {shlex.quote(job)} ] && ! grep -q -F {shlex.quote(_JOB_RUNNING)} {shlex.quote(job)}"


def _loop(body, slice_s, poll):
    """`body` (shell that exits on what it waits for) every `poll` seconds for at most `slice_s`,
    then exit NOT_YET."""
    tries = max(1, int(slice_s / poll))
    return f"i=0; while [ $i -lt {tries} ]; do {body} sleep {poll:g}; i=$((i+1)); done; exit {NOT_YET}"


def slice_command(path, level, slice_s, poll, job=None):
    """The host's shell loop for one slice of at most `slice_s` seconds: prints the first line of
    `path` that holds a marker of `level` and exits 0, or exits NOT_YET. A file that does not exist
    yet (the job has not opened it) is a file without the line. With `job` (the job's results file),
    a job that ended without the line prints that file and exits JOB_ENDED."""
    line = (
        "grep -m1 -F "
        + " ".join(f"-e {shlex.quote(m)}" for m in markers(level))
        + ' "$f" 2>/dev/null && exit 0;'
    )
    ended = f" {_job_ended(job)} && {{ {line} cat {shlex.quote(job)}; exit {JOB_ENDED}; }};" if job else ""
    return f"f={shlex.quote(path)}; " + _loop(line + ended, slice_s, poll)


def job_command(job, slice_s, poll):
    """The host's shell loop that waits at most `slice_s` seconds for the job's end: prints its file
    and exits JOB_ENDED, or exits NOT_YET."""
    return _loop(f"{_job_ended(job)} && {{ cat {shlex.quote(job)}; exit {JOB_ENDED}; }};", slice_s, poll)


def job_result(stdout, jid):
    """The job's result from its file as a slice printed it, read as async_status reads it: a result
    without `started` is the module's own (finished); one that does not parse is a failure that says so."""
    try:
        data = json.loads(stdout)
    except ValueError:
        return {
            "failed": True,
            "finished": True,
            "ansible_job_id": jid,
            "msg": f"the load generator's job {jid} left a result that is not JSON: {stdout.strip()[-500:]}",
        }
    if not isinstance(data, dict):
        data = {"failed": True, "msg": f"the load generator's job {jid} left {data!r}"}
    data.setdefault("ansible_job_id", jid)
    data["finished"] = "started" not in data or bool(data.get("finished"))
    return data


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
