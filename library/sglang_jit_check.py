#!/usr/bin/python
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Check, as the service user and with the unit's environment, what an engine's JIT builds run."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_jit_check
short_description: Check that what an engine's JIT kernel builds run is reachable from its unit
description:
  - Runs a small probe with the engine's python, as the service user (when Ansible is root) and with
    exactly the environment its unit gets (PATH included), and finds C(nvcc), C(ninja), a C++ compiler
    (C($CXX), C(c++) or C(g++)) and, when flashinfer is installed, its C(data/) folder of kernel sources.
  - What an engine needs comes from module_utils/sglang_layouts/engines.py (C(jit_tools)); the simulator
    needs nothing and the module then does nothing.
  - Fails with one message naming every missing piece, the PATH searched and the fix. It only reads, so it
    runs in check mode too; a python that does not exist yet (check mode before the venv is built) is
    reported, not failed.
options:
  engine:
    description: The engine (sglang, vllm, sim).
    type: str
    default: sglang
  python:
    description: The engine's python (the venv's bin/python).
    type: path
    required: true
  env:
    description: The unit's environment (PATH, CUDA_HOME, ...), without secrets.
    type: dict
    default: {}
  user:
    description: The service user the probe runs as when Ansible is root (ignored otherwise, or when it does not exist yet).
    type: str
author: sglang-layouts maintainers (@sglang-layouts)
"""

EXAMPLES = r"""
- name: What SGLang's JIT runs is reachable from its unit
  sglang_jit_check:
    engine: sglang
    python: /opt/sglang/venv/bin/python
    env:
      PATH: /opt/sglang/venv/bin:/opt/torch/.venv/bin:/usr/local/cuda/bin:/usr/local/bin:/usr/bin:/bin
      CUDA_HOME: /usr/local/cuda
    user: sglang
"""

RETURN = r"""
needs:
  description: What the engine's JIT runs (engines.py).
  returned: always
  type: list
  elements: str
found:
  description: Each program's path (null when not found), flashinfer's data folder, and the user the probe ran as.
  returned: when the probe ran
  type: dict
missing:
  description: One message per missing piece, with its fix.
  returned: always
  type: list
  elements: str
path:
  description: The PATH searched.
  returned: always
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_layouts.serve import jit_toolchain


def main():
    module = AnsibleModule(
        argument_spec={
            "engine": {"type": "str", "default": "sglang"},
            "python": {"type": "path", "required": True},
            "env": {"type": "dict", "default": {}},
            "user": {"type": "str"},
        },
        supports_check_mode=True,
    )
    p = module.params
    needs = jit_toolchain.jit_needs(p["engine"])
    env = {str(k): str(v) for k, v in (p["env"] or {}).items()}
    path = env.get("PATH") or jit_toolchain.SYSTEM_PATH
    result = {"changed": False, "needs": needs, "missing": [], "path": path}
    if not needs:
        module.exit_json(msg=f"engine {p['engine']}: no JIT builds, nothing to check", **result)
    if not os.access(p["python"], os.X_OK):
        if module.check_mode:
            module.exit_json(
                msg=f"check mode: {p['python']} is not there yet; the JIT tools are checked on the real run",
                **result,
            )
        module.fail_json(
            msg=f"{p['python']} does not exist or cannot run: build the venv first (sglang_venv)", **result
        )
    try:
        found = jit_toolchain.probe(p["python"], env, p["user"])
    except (RuntimeError, OSError, ValueError) as exc:
        module.fail_json(msg=str(exc), **result)
    result.update(found=found, missing=jit_toolchain.missing(found, needs, path))
    if result["missing"]:
        module.fail_json(
            msg=f"{p['engine']}'s JIT builds would fail (as {found['as_user']}): "
            + "; ".join(result["missing"]),
            **result,
        )
    where = ", ".join(f"{n} {found[n]}" for n in ("nvcc", "ninja", "c++"))
    fi = found.get("flashinfer")
    module.exit_json(
        msg=f"as {found['as_user']}: {where}"
        + (f", flashinfer data {fi['data']}" if fi else ", no flashinfer"),
        **result,
    )


if __name__ == "__main__":
    main()
