# Copyright: sglang-layouts contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""sglang_bench_wait: wait on the host for each level's line in the load generator's progress file.

One shell command per slice of time (bench.progress.slice_command) instead of a module per poll:
a wait ends within a tenth of a second of the line, at the cost of one command over the connection.
The whole ladder is one task: each level's line is shown as it comes, which took a task of its own
per level and another to show it (some 70 ms each of Ansible's own on a GPU host). Given the job's id,
it also returns the job's result (async_status's rule), seen from the same loops: a job that ends
without its lines fails the wait at once, and no async_status task polls for the end.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

# plugin_utils/ beside this plugin's folder (action_plugins/ in the repo, plugins/action/ in the
# collection sglang.layouts): what the collection's action plugins share
_PLUGIN_UTILS = str(Path(__file__).resolve().parents[1] / "plugin_utils")
if _PLUGIN_UTILS not in sys.path:
    sys.path.insert(0, _PLUGIN_UTILS)

from sglang_in_process import library  # noqa: E402

# One command waits at most this long, so that a connection's idle limits never see a silent command.
_SLICE_S = 60.0

display = Display()


def _lines(lines, bench_failed):
    """The lines seen so far, as the task returns them."""
    return {"lines": lines, "line": lines[-1] if lines else "", "bench_failed": bench_failed}


def _waited_s(start):
    return round(time.monotonic() - start, 3)


class ActionModule(ActionBase):
    _VALID_ARGS = None  # validated against bench.progress.ARGUMENT_SPEC below

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        progress = library("bench.progress")
        _, args = self.validate_argument_spec(argument_spec=progress.ARGUMENT_SPEC)
        if self._play_context.check_mode:
            # nothing runs in check mode, so no line will come
            return {
                **result,
                "skipped": True,
                "msg": "check mode: no load generator runs, no line to wait for",
            }
        start = time.monotonic()
        poll = max(0.02, args["poll"])
        job = self._job_path(args["job"]) if args.get("job") else None
        lines, bench_failed = [], False
        for level in args["levels"]:
            waited = self._wait(progress, args, level, poll, job)
            if waited.get("job"):
                # the job ended without this level's line: its result says why (bad input, a crash)
                return self._ended(progress, args, result, waited, _lines(lines, False), start, level)
            if waited.get("failed"):
                return {**result, **waited, **_lines(lines, False), "waited_s": _waited_s(start)}
            lines.append(waited["line"])
            # progress, not results: stdout stays machine-readable (the record holds the figures)
            display.display(f"{args['label']} {waited['line']}".strip(), stderr=True)
            if waited["bench_failed"]:
                bench_failed = True  # the load generator gave up: no later level will end
                break
        done = _lines(lines, bench_failed)
        if job:
            # the last line comes just before the job's summary and exit: its end, polled as a level's
            waited = self._wait(progress, args, None, poll, job)
            if waited.get("failed"):
                return {**result, **waited, **done, "waited_s": _waited_s(start)}
            return self._ended(progress, args, result, waited, done, start, None)
        return {**result, "changed": False, **done, "waited_s": _waited_s(start)}

    def _job_path(self, jid):
        """The job's results file on the host, where async_status reads it (the shell's async_dir)."""
        async_dir = self._remote_expand_user(self.get_shell_option("async_dir", default="~/.ansible_async"))
        return self._connection._shell.join_path(async_dir, jid)

    def _ended(self, progress, args, result, waited, done, start, missing):
        """The wait's result with the job's: the job's keys (its facts, failed, msg, failure_class)
        and the lines (`done`). A job that ended before `missing`'s line and did not fail fails the wait."""
        job = progress.job_result(waited["job"], args["job"])
        out = {**result, **job, **done, "waited_s": _waited_s(start)}
        if missing is not None and not job.get("failed"):
            out.update(
                failed=True,
                msg=f"the load generator's job ended without a line for {missing} in {args['path']}",
            )
        return out

    def _wait(self, progress, args, level, poll, job=None):
        """One level's line: {line, bench_failed}; {job: its file's text} when the job ended first (or,
        with level None, when it ended); or a failure that says why neither came."""
        timeout = progress.level_timeout(level, args["timeout"], args.get("search_timeout"))
        start = time.monotonic()
        what = (
            f"no line for {level} in {args['path']}"
            if level
            else f"no end of the load generator's job {args['job']}"
        )
        while True:
            left = timeout - (time.monotonic() - start)
            if left <= 0:
                return {
                    "failed": True,
                    "msg": f"{what} after {timeout:g} s (sglang_bench_level_timeout); the load generator's job "
                    "may have died: see its async status",
                }
            if level is None:
                cmd = progress.job_command(job, min(_SLICE_S, left), poll)
            else:
                cmd = progress.slice_command(args["path"], level, min(_SLICE_S, left), poll, job)
            res = self._low_level_execute_command(cmd, sudoable=True)
            if res["rc"] == progress.JOB_ENDED:
                return {"job": res["stdout"]}
            if res["rc"] == 0:
                line, failed = progress.ended(res["stdout"])
                return {"line": line, "bench_failed": failed}
            if res["rc"] != progress.NOT_YET:
                return {
                    "failed": True,
                    "rc": res["rc"],
                    "msg": f"the wait for {level or 'the job'} in {args['path']} could not run on the host "
                    f"(exit {res['rc']}): {(res.get('stderr') or '').strip()[-500:]}",
                }
