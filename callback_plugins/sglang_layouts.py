# Copyright: sglang-layouts contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible's default screen output, with a deliberate failure's message printed once."""

from __future__ import annotations

DOCUMENTATION = """
    name: sglang_layouts
    type: stdout
    short_description: Ansible's default screen output, a refusal's message printed once
    description:
      - The default stdout callback, with one change. Since ansible-core 2.19 a failed
        ansible.builtin.fail task is printed twice, as an error block (the message and the task's
        origin in the playbook) and then as the result, whose msg is the same sentence. This
        project's refusals (a bad input, before anything on a host changes) are such tasks, and
        for them the error block is left out, so the sentence that says what to write instead is
        printed once. Every other failure is shown as the default callback shows it.
    extends_documentation_fragment:
      - default_callback
      - result_format_callback
    requirements:
      - set as stdout in configuration (ansible.cfg does)
"""

from ansible.plugins.callback.default import CallbackModule as DefaultCallback
from ansible.utils.fqcn import add_internal_fqcns

# The actions whose whole point is their message: the result's msg is what the user must read.
MESSAGE_ACTIONS = frozenset(add_internal_fqcns(("fail",)))


class CallbackModule(DefaultCallback):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "sglang_layouts"

    def _handle_exception(self, result, use_stderr=False):
        current = self._current_task_result
        if current is not None and current.task.action in MESSAGE_ACTIONS and result.get("msg"):
            result.pop("exception", None)  # the result's msg below says the same
            return
        super()._handle_exception(result, use_stderr=use_stderr)
