# Copyright: sglang-layouts contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of sglang_write_files: write the files without starting a module process.

plan.yml writes each host's plan and unit previews on the controller (delegated to localhost). There
this plugin runs the module's own code (write_files: the same argument spec, the same function) in
the worker Ansible already forked for the task, so a plan of many hosts costs no module process per
host. Anywhere else, over a connection, or with become, it runs the module as usual.
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
    LIBRARY = "write_files"
