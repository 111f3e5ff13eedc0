# Copyright: sglang-layouts contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where a run's time goes, per task: written as JSON lines, summed by task at the end."""

from __future__ import annotations

DOCUMENTATION = """
    name: task_times
    type: aggregate
    short_description: each task's wall seconds, as JSON lines and a summary by task
    description:
      - Measures each task from its start to the next task's start (a loop's items and its hosts
        included), the way ansible.posix.profile_tasks does, without needing that collection (a plain
        ansible-core install, such as an offline GPU host's, lacks it).
      - Writes one JSON line per task (play, task, role, action, seconds, started_at) to the file
        named by SGLANG_LAYOUTS_TASK_TIMES, appending, and prints at the end of the playbook the tasks
        whose summed seconds are largest, with how many times each ran, and the sum over all tasks.
      - The summary answers where a layout's tool_s goes (the record's timing) on the host that ran it.
    requirements:
      - enable it in ansible.cfg (callbacks_enabled) or with ANSIBLE_CALLBACKS_ENABLED=task_times
    options:
      output_file:
        description: the JSON-lines file to append to; unset writes none
        env:
          - name: SGLANG_LAYOUTS_TASK_TIMES
        type: path
      top:
        description: how many tasks the summary lists
        env:
          - name: SGLANG_LAYOUTS_TASK_TIMES_TOP
        type: int
        default: 25
"""

import json
import os
import time
from collections import defaultdict

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "task_times"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self._current: dict | None = None
        self._sums: dict[str, list] = defaultdict(lambda: [0.0, 0])
        self._play = ""

    def _close(self) -> None:
        cur, self._current = self._current, None
        if cur is None:
            return
        cur["seconds"] = round(time.monotonic() - cur.pop("_t0"), 3)
        entry = self._sums[cur["task"]]
        entry[0] += cur["seconds"]
        entry[1] += 1
        path = self.get_option("output_file")
        if path:
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(cur) + "\n")

    def v2_playbook_on_play_start(self, play):
        self._close()
        self._play = play.get_name()

    def _start(self, task) -> None:
        self._close()
        role = task._role.get_name() if task._role else None
        name = task.get_name()
        self._current = {
            "play": self._play,
            "task": f"{role} : {name}" if role and not name.startswith(f"{role} :") else name,
            "action": task.action,
            "started_at": round(time.time(), 3),
            "_t0": time.monotonic(),
        }

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._start(task)

    def v2_playbook_on_handler_task_start(self, task):
        self._start(task)

    def v2_playbook_on_stats(self, stats):
        self._close()
        if not self._sums:
            return
        ranked = sorted(self._sums.items(), key=lambda kv: -kv[1][0])
        total = sum(seconds for seconds, _runs in self._sums.values())
        lines = [
            f"task_times: {total:.1f} s over {sum(runs for _seconds, runs in self._sums.values())} task runs; largest:"
        ]
        for name, (seconds, count) in ranked[: self.get_option("top")]:
            lines.append(f"  {seconds:8.2f} s  x{count:<3d} {name}")
        self._display.display("\n".join(lines))
        if os.environ.get("SGLANG_LAYOUTS_TASK_TIMES"):
            self._display.display(f"task_times: each task in {os.environ['SGLANG_LAYOUTS_TASK_TIMES']}")
