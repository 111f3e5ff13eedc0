# Copyright: sglang-layouts contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of sglang_result: store or look up a record without starting a module process.

A record always goes to the controller (the task is delegated to localhost). There this plugin runs
the module's own code (report.result_store: the same argument spec, the same function) in the worker
that Ansible already forked for the task, so a sweep's two result tasks per layout cost no module
process (0.5-1 s each on a GPU host). Anywhere else, over a connection, or with become, it runs the
module as usual.
"""

from __future__ import annotations

import sys
from pathlib import Path

# plugin_utils/ beside this plugin's folder (action_plugins/ in the repo, plugins/action/ in the
# collection sglang.layouts): what the collection's action plugins share
_PLUGIN_UTILS = str(Path(__file__).resolve().parents[1] / "plugin_utils")
if _PLUGIN_UTILS not in sys.path:
    sys.path.insert(0, _PLUGIN_UTILS)

from sglang_in_process import InProcessAction  # noqa: E402


class ActionModule(InProcessAction):
    LIBRARY = "report.result_store"
