# Copyright: sglang-layouts contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of sglang_write_files: write the files without starting a module process.

plan.yml writes each host's plan and unit previews on the controller (delegated to localhost). There
this plugin runs the module's own code (write_files: the same argument spec, the same function) in
the worker Ansible already forked for the task, so a plan of many hosts costs no module process per
host. Anywhere else, over a connection, or with become, it runs the module as usual.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase

# module_utils/ beside this plugin's folder (action_plugins/ in the repo, plugins/action/ in the
# collection sglang.layouts), as the filters find it.
_MODULE_UTILS = str(Path(__file__).resolve().parents[1] / "module_utils")


def _library(module):
    """A module of module_utils/sglang_layouts ("write_files"), as the filters import it."""
    if _MODULE_UTILS not in sys.path:
        sys.path.insert(0, _MODULE_UTILS)
    return importlib.import_module(f"sglang_layouts.{module}")


class ActionModule(ActionBase):
    _VALID_ARGS = None  # validated against the module's own argument spec below

    def _in_process(self):
        return self._connection.transport == "local" and not self._play_context.become

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        if not self._in_process():
            module = self._task.resolved_action or "sglang_write_files"
            return self._execute_module(module_name=module, module_args=self._task.args, task_vars=task_vars)
        impl = _library("write_files")
        validated = ArgumentSpecValidator(impl.ARGUMENT_SPEC).validate(self._task.args)
        if validated.error_messages:
            return {**result, "failed": True, "msg": "; ".join(validated.error_messages)}
        params = validated.validated_parameters
        try:
            out = impl.run(params, check_mode=bool(self._play_context.check_mode), diff=bool(self._task.diff))
        except impl.WriteFilesError as exc:
            return {**result, "failed": True, "msg": str(exc)}
        except OSError as exc:
            return {**result, "failed": True, "msg": f"writing under {params['dest']}: {exc}"}
        return {**result, **out}
