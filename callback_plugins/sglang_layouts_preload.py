# Copyright: sglang-layouts contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Import this collection's library in the controller's main process, before the first task."""

from __future__ import annotations

DOCUMENTATION = """
    name: sglang_layouts_preload
    type: aggregate
    short_description: import the planner library once, before Ansible forks its workers
    description:
      - Ansible runs each task of each host in a process forked from the controller's main process.
        The filters of this collection (sglang_plan and the others) call a Python library that they
        import when first used, and without this callback that import happened anew in every worker
        process that used a filter (a quarter of py-spy's samples of plan.yml over 20 hosts; a
        sweep, whose CPU goes to modules and the engine, gains little).
      - This callback imports the library in the main process when the playbook starts, so that
        every worker inherits it. It prints nothing and changes no result; where it cannot load the
        filters it does nothing, and the filters import the library themselves as before.
      - From a callback_plugins folder Ansible loads it without enabling, beside any stdout callback
        (this repo's ansible.cfg names the folder). From the installed collection, add
        sglang.layouts.sglang_layouts_preload to callbacks_enabled.
"""

import sys

from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import filter_loader

# The filter whose plugin file holds preload_library, as a playbook in this repo or in the collection names it.
_FILTER_NAMES = ("sglang_plan", "sglang.layouts.sglang_plan")


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "sglang_layouts_preload"
    CALLBACK_NEEDS_ENABLED = False

    def v2_playbook_on_start(self, playbook):
        for name in _FILTER_NAMES:
            plugin = filter_loader.get(name)
            if plugin is None:
                continue
            module = sys.modules.get(getattr(plugin.j2_function, "__module__", ""))
            preload = getattr(module, "preload_library", None)
            if preload is not None:
                preload()
                self._display.vvv(f"sglang_layouts_preload: the library is imported ({module.__name__})")
            return
