#!/usr/bin/python
# Copyright: sglang-layouts contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_bench_wait
short_description: Wait for a level's line in the progress file of a running sglang_bench job
description:
  - "C(sglang_bench) appends a line to its O(progress_file) when a level ends (C(level c=16 done), then the level's
    figures), when the SLO search ends (C(slo search done)) and when it gives up (C(bench failed)). This task waits
    on the host for the first line that ends O(level), checking the file every O(poll) seconds, and returns it."
  - It is an action plugin. The wait runs on the host as one shell loop per slice of at most 60 s (grep and sleep),
    so a level's end is seen within O(poll) seconds and costs one command over the connection, not a module per
    check. Running this file as a module fails and says so.
  - A C(bench failed) line ends the wait as well (RV(bench_failed) is then true); the job's own result says why.
version_added: "1.0.0"
author: sglang-layouts maintainers (@sglang-layouts)
options:
  path:
    description: The progress file on the host (C(sglang_bench)'s O(progress_file)); it may not exist yet.
    type: str
    required: true
  level:
    description: The level's label as the load generator writes it (C(c=16), C(r=0.5), C(r=inf)), or C(slo search).
    type: str
    required: true
  timeout:
    description: Seconds to wait before failing.
    type: float
    default: 3600.0
  poll:
    description: Seconds between two checks of the file on the host (at least 0.02).
    type: float
    default: 0.1
extends_documentation_fragment: ansible.builtin.action_common_attributes
attributes:
  action:
    support: full
  check_mode:
    support: full
    details: In check mode no load generator runs; the task is skipped.
  diff_mode:
    support: none
  platform:
    support: full
    platforms: posix
"""

EXAMPLES = r"""
- name: Wait for the level of 16 concurrent requests to end
  ansible.legacy.sglang_bench_wait:
    path: /var/tmp/sglang-layouts/run1-tp8.progress
    level: c=16
    timeout: 3600
  register: level
"""

RETURN = r"""
line:
  description: The line that ended the wait, without its clock stamp.
  type: str
  returned: success
  sample: "level c=16 done: 1380.7 tok/s, TTFT p50 161.4 ms, 16/16 ok"
bench_failed:
  description: Whether the line is the load generator's C(bench failed) line rather than the level's end.
  type: bool
  returned: success
waited_s:
  description: Seconds the task waited.
  type: float
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_layouts.bench.progress import ARGUMENT_SPEC


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.fail_json(
        msg="sglang_bench_wait runs as an action plugin (action_plugins/sglang_bench_wait.py in the repo, "
        "plugins/action in the collection): put that folder on Ansible's action plugin path"
    )


if __name__ == "__main__":
    main()
