# Copyright: sglang-layouts contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of sglang_health: run the gate in slices and show the start-up phase between them.

A module cannot print while it runs, and a cold SGLang start is silent for minutes (weights,
KV pool, CUDA-graph capture, JIT kernel builds). The module's `slice_s`/`resume` let it return
before a verdict and go on where it stopped; this plugin loops over those slices and prints
one line per slice (`h200 sglang-qwen3-tp1: capturing CUDA graphs, 95 s`). The verdict and
the facts are the module's own, unchanged.
"""

from __future__ import annotations

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()


class ActionModule(ActionBase):
    _VALID_ARGS = None  # the module validates its own arguments

    def run(self, tmp=None, task_vars=None):
        super().run(tmp, task_vars)
        args = dict(self._task.args)
        every = float(args.pop("progress_every", 15) or 0)
        # the module of the same name as the task resolved it (ansible.legacy.sglang_health in the repo,
        # sglang.layouts.sglang_health from the collection, whatever collections the play lists)
        module = self._task.resolved_action or "sglang_health"
        # (in check mode the module answers at once, without `pending`: the loop below ends there too)
        if args.get("mode", "wait") != "wait" or every <= 0:
            return self._execute_module(module_name=module, module_args=args, task_vars=task_vars)
        host = task_vars.get("inventory_hostname", "?") if task_vars else "?"
        resume = None
        shown = None
        while True:
            slice_args = dict(args, slice_s=every)
            if resume is not None:
                slice_args["resume"] = resume
            result = self._execute_module(module_name=module, module_args=slice_args, task_vars=task_vars)
            if not result.get("pending"):
                return result
            resume = result["resume"]
            line = f"{host} {args.get('unit')}: {result.get('phase')}, {result.get('waited_s', 0):.0f} s"
            if line != shown:
                display.display(line, stderr=True)  # progress, not results: stdout stays machine-readable
                shown = line
