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
  - On the controller (a local connection without become, as plan.yml delegates it to localhost), the
    action plugin of the same name runs this in Ansible's worker, with no module process per host.
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

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_layouts.write_files import ARGUMENT_SPEC, task


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    result = task(module.params, check_mode=module.check_mode, diff=module._diff)
    (module.fail_json if result.get("failed") else module.exit_json)(**result)


if __name__ == "__main__":
    main()
