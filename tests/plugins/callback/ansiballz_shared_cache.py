# Copyright: sglang-layouts contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tests only: the ansible-playbook runs of one test session build each module's payload once."""

from __future__ import annotations

DOCUMENTATION = """
    name: ansiballz_shared_cache
    type: aggregate
    short_description: one AnsiballZ cache for every playbook run of a test session
    description:
      - Ansible builds a module's payload (the module and every module_utils file it imports,
        found by parsing each of them) once per ansible-playbook run, in a cache under that run's
        own temporary folder. The test suites run a few hundred playbooks, and py-spy put about an
        eighth of a sweep test's CPU in that build.
      - With SGLANG_LAYOUTS_ANSIBALLZ_CACHE set, the run's cache folder is a link to that folder, so
        a payload built by one run is reused by the next. Ansible's own lock and atomic rename
        guard a payload being written while another run reads it.
      - The payload depends on the module's and module_utils' files only, so the folder must live
        no longer than those files stay unchanged. The test session makes it and removes it.
      - The payloads carry their Python compiled, from callback_plugins/sglang_layouts_bytecode.py (on
        the same callback path), which adds the .pyc files as a payload is built.
      - Unset, it does nothing. It changes no task and no result.
"""

import os

from ansible import constants as C
from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "ansiballz_shared_cache"
    CALLBACK_NEEDS_ENABLED = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        shared = os.environ.get("SGLANG_LAYOUTS_ANSIBALLZ_CACHE")
        if not shared:
            return
        # the same folder name module_common builds under the run's local tmp (created on first access)
        link = os.path.join(C.DEFAULT_LOCAL_TMP, "ansiballz_cache")
        if not os.path.lexists(link):
            os.makedirs(shared, exist_ok=True)
            os.symlink(shared, link)
