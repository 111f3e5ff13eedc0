#!/usr/bin/python
# Copyright: sglang-layouts contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Write several small text files in one module call (plan JSON, unit previews)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_write_files
short_description: Write several text files at once, atomically, only when their content changes
description:
  - Writes each file of O(files) under O(dest) with its content, atomically (temporary file in the
    same directory, then rename), and only when the content differs.
  - One module call for many files, so that planning a dozen layouts does not cost a dozen
    module round trips (plan.yml writes the plan JSON and every layout's unit preview with it).
  - Files under O(dest) that are not in O(files) are left alone unless O(prune_glob) matches them.
options:
  dest:
    description: Directory the files are written to; created (with O(dir_mode)) if missing.
    type: path
    required: true
  files:
    description: File name (relative to O(dest), no C(..)) to its text content.
    type: dict
    required: true
  mode:
    description: Mode of every written file.
    type: str
    default: "0644"
  dir_mode:
    description: Mode of O(dest) when it has to be created.
    type: str
    default: "0755"
  prune_glob:
    description: Glob (relative to O(dest)) of files this module owns; those not in O(files) are removed.
    type: str
extends_documentation_fragment: ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: In check mode nothing is written, created or removed; written and removed list what would be.
  diff_mode:
    support: full
    details: Each written file's old and new content, and each pruned file's old content.
  platform:
    support: full
    platforms: posix
author: sglang-layouts maintainers (@sglang-layouts)
"""

EXAMPLES = r"""
- name: Write the plan and the unit previews
  sglang_write_files:
    dest: build/plan/seed-box
    files:
      plan.json: "{{ sglang_plan | to_nice_json }}"
      sglang-kimi-k2-6-ep8.service: "{{ lookup('template', 'sglang.service.j2') }}"
    prune_glob: "*.service"
  delegate_to: localhost
"""

RETURN = r"""
written:
  description: Files whose content changed (or would change in check mode).
  type: list
  elements: str
  returned: always
removed:
  description: Files removed because O(prune_glob) matched them and they are no longer wanted.
  type: list
  elements: str
  returned: always
"""

import fnmatch
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_layouts.fileio import write_atomic


def _read(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        return None


def main():
    module = AnsibleModule(
        argument_spec={
            "dest": {"type": "path", "required": True},
            "files": {"type": "dict", "required": True},
            "mode": {"type": "str", "default": "0644"},
            "dir_mode": {"type": "str", "default": "0755"},
            "prune_glob": {"type": "str"},
        },
        supports_check_mode=True,
    )
    p = module.params
    dest = p["dest"]
    mode, dir_mode = int(p["mode"], 8), int(p["dir_mode"], 8)
    files = {}
    for name, content in p["files"].items():
        norm = os.path.normpath(name)
        if os.path.isabs(norm) or norm.startswith(".."):
            module.fail_json(msg=f"file name {name!r} must stay inside dest", file=name)
        files[norm] = "" if content is None else str(content)
    written, removed, diffs = [], [], []
    if not os.path.isdir(dest) and not module.check_mode:
        os.makedirs(dest, mode=dir_mode, exist_ok=True)
    for name, content in sorted(files.items()):
        path = os.path.join(dest, name)
        old = _read(path)
        if old == content:
            continue
        written.append(path)
        diffs.append({"before_header": path, "after_header": path, "before": old or "", "after": content})
        if not module.check_mode:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            write_atomic(path, content, mode=mode)
    if p["prune_glob"] and os.path.isdir(dest):
        for entry in sorted(os.listdir(dest)):
            if fnmatch.fnmatch(entry, p["prune_glob"]) and entry not in files:
                path = os.path.join(dest, entry)
                removed.append(path)
                diffs.append(
                    {
                        "before_header": path,
                        "after_header": "(removed)",
                        "before": _read(path) or "",
                        "after": "",
                    }
                )
                if not module.check_mode:
                    os.unlink(path)
    changed = bool(written or removed)
    result = {"changed": changed, "written": written, "removed": removed}
    if module._diff and changed:
        result["diff"] = diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
