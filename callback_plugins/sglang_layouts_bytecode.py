# Copyright: sglang-layouts contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Module payloads that carry their Python compiled, so a module process does not compile it."""

from __future__ import annotations

DOCUMENTATION = """
    name: sglang_layouts_bytecode
    type: aggregate
    short_description: module payloads with their Python compiled, so each task's module starts sooner
    description:
      - Ansible sends a Python module to the host as a zip (AnsiballZ) holding the module and every
        module_utils file it imports, as source. The module process imports from that zip, and
        Python's zipimport compiles a C(.py) there on every import (it writes no bytecode back), so
        each module call compiles C(ansible.module_utils.basic) and this collection's library anew.
        A sweep runs about a dozen module calls per layout (preflight, start, gate, benchmark,
        check, stop), each paying that compile on the host.
      - This callback adds an unchecked hash-based C(.pyc) (PEP 552) beside each C(.py) of every
        payload the controller builds, compiled by the controller's Python, once per payload. A host
        whose Python has another magic number ignores the C(.pyc) and compiles the C(.py) as before,
        so there the payload is only larger (several times, compiled code deflates less than source);
        turn this off where the hosts' Python differs from the controller's and the link is slow.
      - It changes no task and no result. A file the controller's Python cannot compile keeps its
        source alone; an Ansible whose payload cache is not the one this callback knows is left as
        it is.
      - From a callback_plugins folder Ansible loads it without enabling (this repo's ansible.cfg
        names the folder). From the installed collection, add sglang.layouts.sglang_layouts_bytecode
        to callbacks_enabled.
    options:
      enabled:
        description: Add the compiled files to the payloads.
        type: bool
        default: true
        env:
          - name: SGLANG_LAYOUTS_PAYLOAD_BYTECODE
        ini:
          - section: sglang_layouts
            key: payload_bytecode
"""

import base64
import importlib.util
import io
import zipfile
from importlib._bootstrap_external import _code_to_hash_pyc

from ansible.executor import module_common
from ansible.plugins.callback import CallbackBase


def with_bytecode(zip_data: bytes) -> bytes:
    """A base64 AnsiballZ zip with a .pyc beside each .py that this Python compiles."""
    src = zipfile.ZipFile(io.BytesIO(base64.b64decode(zip_data)))
    out = io.BytesIO()
    with zipfile.ZipFile(out, mode="w", compression=zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            data = src.read(info)
            dst.writestr(info, data)
            name = info.filename[:-3] + ".pyc"
            if not info.filename.endswith(".py") or name in src.NameToInfo:
                continue
            try:
                code = compile(data, info.filename, "exec", dont_inherit=True)
            except (SyntaxError, ValueError):
                continue  # a newer Python's syntax: the host compiles it, as without this callback
            pyc = zipfile.ZipInfo(name, date_time=info.date_time)
            pyc.compress_type = info.compress_type
            dst.writestr(pyc, bytes(_code_to_hash_pyc(code, importlib.util.source_hash(data), checked=False)))
    return base64.b64encode(out.getvalue())


def _dump_with_bytecode(dump):
    def run(self, path):
        # a frozen dataclass: the payload this run uses right away is the one the cache keeps
        object.__setattr__(self, "zip_data", with_bytecode(self.zip_data))
        dump(self, path)

    run.with_bytecode = True
    return run


def install() -> bool:
    """Patch the payload cache's writer (once); False where this Ansible has no such writer."""
    cached = getattr(module_common, "_CachedModule", None)
    dump = getattr(cached, "dump", None)
    if dump is None or not hasattr(cached, "load"):
        return False
    if not getattr(dump, "with_bytecode", False):
        cached.dump = _dump_with_bytecode(dump)
    return True


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "sglang_layouts_bytecode"
    CALLBACK_NEEDS_ENABLED = False

    def set_options(self, task_keys=None, var_options=None, direct=None):
        super().set_options(task_keys=task_keys, var_options=var_options, direct=direct)
        # the workers that build payloads are forks of this process: they inherit the patch
        if not self.get_option("enabled"):
            return
        if install():
            self._display.vvv("sglang_layouts_bytecode: module payloads carry their Python compiled")
        else:
            self._display.vvv("sglang_layouts_bytecode: this Ansible builds payloads another way; left as is")
