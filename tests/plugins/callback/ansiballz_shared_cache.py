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
      - Each payload it caches also carries its Python files compiled (unchecked hash-based .pyc
        beside each .py, PEP 552). A module process imports from the payload's zip, and zipimport
        compiles a .py there on every import (it writes no bytecode back); py-spy put a sixth of a
        sweep test's CPU in module processes compiling ansible.module_utils.basic and its imports.
        A target whose Python has another magic number skips the .pyc and compiles the .py as before.
      - Unset, it does nothing. It changes no task and no result.
"""

import base64
import importlib.util
import io
import os
import zipfile
from importlib._bootstrap_external import _code_to_hash_pyc

from ansible import constants as C
from ansible.executor import module_common
from ansible.plugins.callback import CallbackBase


def with_bytecode(zip_data: bytes) -> bytes:
    """A base64 AnsiballZ zip with a .pyc beside each .py (compiled by this Python)."""
    src = zipfile.ZipFile(io.BytesIO(base64.b64decode(zip_data)))
    out = io.BytesIO()
    with zipfile.ZipFile(out, mode="w", compression=zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            data = src.read(info)
            dst.writestr(info, data)
            if info.filename.endswith(".py") and info.filename[:-3] + ".pyc" not in src.NameToInfo:
                code = compile(data, info.filename, "exec", dont_inherit=True)
                pyc = zipfile.ZipInfo(info.filename[:-3] + ".pyc", date_time=info.date_time)
                pyc.compress_type = info.compress_type
                dst.writestr(
                    pyc, bytes(_code_to_hash_pyc(code, importlib.util.source_hash(data), checked=False))
                )
    return base64.b64encode(out.getvalue())


def _dump_with_bytecode(dump):
    def run(self, path):
        # frozen dataclass: the payload this run uses right away is the cached one too
        object.__setattr__(self, "zip_data", with_bytecode(self.zip_data))
        dump(self, path)

    run.with_bytecode = True
    return run


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
        # the workers that build payloads are forks of this process: they inherit the patch
        if not getattr(module_common._CachedModule.dump, "with_bytecode", False):
            module_common._CachedModule.dump = _dump_with_bytecode(module_common._CachedModule.dump)
