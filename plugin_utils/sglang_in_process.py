# Copyright: sglang-layouts contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the collection's action plugins share: the library's import, and a module's task run in the
controller's worker instead of a module process.

`library(name)` imports a module of module_utils/sglang_layouts as the filters do (module_utils/ beside
this folder: the repo's root, or plugins/ in the collection sglang.layouts). `InProcessAction` is
the action of a module whose task runs on the controller (delegated to localhost): it validates the
task's arguments against the module's own ARGUMENT_SPEC (and REQUIRED_IF) and calls the module's own
`task(params, check_mode, diff)` in the worker Ansible already forked; anywhere else, over a
connection or with become, it runs the module as usual.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase

_MODULE_UTILS = str(Path(__file__).resolve().parents[1] / "module_utils")


def library(name: str):
    """A module of module_utils/sglang_layouts ("report.result_store"), as the filters import it."""
    if _MODULE_UTILS not in sys.path:
        sys.path.insert(0, _MODULE_UTILS)
    return importlib.import_module(f"sglang_layouts.{name}")


class InProcessAction(ActionBase):
    """The action of a module with a library face: LIBRARY names the module of sglang_layouts that
    holds its ARGUMENT_SPEC, REQUIRED_IF (optional) and task()."""

    LIBRARY = ""
    _VALID_ARGS = None  # validated against the module's own argument spec below

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        if self._connection.transport != "local" or self._play_context.become:
            module = self._task.resolved_action or self._task.action
            return self._execute_module(module_name=module, module_args=self._task.args, task_vars=task_vars)
        impl = library(self.LIBRARY)
        validated = ArgumentSpecValidator(
            impl.ARGUMENT_SPEC, required_if=getattr(impl, "REQUIRED_IF", None)
        ).validate(self._task.args)
        if validated.error_messages:
            return {**result, "failed": True, "msg": "; ".join(validated.error_messages)}
        out = impl.task(
            validated.validated_parameters,
            check_mode=bool(self._task.check_mode),
            diff=bool(self._task.diff),
        )
        return {**result, **out}
