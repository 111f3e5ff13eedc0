#!/usr/bin/python
# Copyright: sglang-layouts contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_bench_wait
short_description: Wait for each level's line in the progress file of a running sglang_bench job
description:
  - "C(sglang_bench) appends a line to its O(progress_file) when a level ends (C(level c=16 done), then the level's
    figures), when the SLO search ends (C(slo search done)) and when it gives up (C(bench failed)). This task waits
    on the host for the line that ends each of O(levels) in turn, checking the file every O(poll) seconds, shows
    each line as it comes (on standard error, after O(label)) and returns them."
  - It is an action plugin. The wait runs on the host as one shell loop per slice of at most 60 s (grep and sleep),
    so a level's end is seen within O(poll) seconds and costs one command over the connection, not a module per
    check, and a whole ladder is one task. Running this file as a module fails and says so.
  - A C(bench failed) line ends the wait as well (RV(bench_failed) is then true, and no later level is waited
    for); the job's own result says why.
  - "With O(job), the async job id of the C(sglang_bench) task that writes the file, the same loops watch the
    job's results file (where C(ansible.builtin.async_status) reads it): after the last line the task waits for
    the job's end and returns its result as C(async_status) would (its C(ansible_facts), C(failed), C(msg),
    C(failure_class)), so no C(async_status) task is needed; and a job that ends before a level's line (bad input,
    a crash) ends the wait at once with the job's result, instead of after O(timeout)."
version_added: "1.0.0"
author: sglang-layouts maintainers (@sglang-layouts)
options:
  path:
    description: The progress file on the host (C(sglang_bench)'s O(progress_file)); it may not exist yet.
    type: str
    required: true
  levels:
    description:
      - The levels' labels as the load generator writes them, in the order it runs them (C(c=16), C(r=0.5),
        C(r=inf)), and C(slo search) for the SLO search.
    type: list
    elements: str
    required: true
  timeout:
    description: Seconds to wait for each level's line before failing.
    type: float
    default: 3600.0
  search_timeout:
    description: Seconds to wait for the C(slo search) line (it runs several levels of its own); O(timeout) if unset.
    type: float
  poll:
    description: Seconds between two checks of the file on the host (at least 0.02).
    type: float
    default: 0.1
  label:
    description: Shown before each line (the host and the layout, C(gpu-host/tp1)).
    type: str
    default: ""
  job:
    description:
      - The C(ansible_job_id) of the C(sglang_bench) task started with C(async) and C(poll 0). Its results file
        is read from the connection's C(async_dir) (C(ansible_async_dir), default C(~/.ansible_async)).
    type: str
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
- name: Wait for the levels of 1 and 16 concurrent requests to end, showing each
  ansible.legacy.sglang_bench_wait:
    path: /var/tmp/sglang-layouts/run1-tp8.progress
    levels: [c=1, c=16]
    timeout: 3600
    label: gpu-host/tp8
  register: levels

- name: Start the load generator in the background
  ansible.legacy.sglang_bench:
    url: http://127.0.0.1:30000
    concurrency: [1, 16]
    progress_file: /var/tmp/sglang-layouts/run1-tp8.progress
  async: 7200
  poll: 0
  register: bench_job

- name: Show each level as it ends, then return the job's result (its ansible_facts.sglang_bench)
  ansible.legacy.sglang_bench_wait:
    path: /var/tmp/sglang-layouts/run1-tp8.progress
    levels: [c=1, c=16]
    job: "{{ bench_job.ansible_job_id }}"
  register: bench
"""

RETURN = r"""
lines:
  description: The line that ended each level's wait, without its clock stamp, in the order of O(levels).
  type: list
  elements: str
  returned: always
  sample: ["level c=1 done: 242.2 tok/s, TTFT p50 82.3 ms, 8/8 ok", "level c=16 done: 1380.7 tok/s, TTFT p50 161.4 ms, 32/32 ok"]
line:
  description: The last of RV(lines).
  type: str
  returned: success
  sample: "level c=16 done: 1380.7 tok/s, TTFT p50 161.4 ms, 32/32 ok"
bench_failed:
  description: Whether the last line is the load generator's C(bench failed) line rather than a level's end.
  type: bool
  returned: success
waited_s:
  description: Seconds the task waited.
  type: float
  returned: always
finished:
  description: With O(job) - whether the job has ended (true once the task returns its result).
  type: bool
  returned: when O(job) is given and the job ended
ansible_job_id:
  description: With O(job) - the job's id.
  type: str
  returned: when O(job) is given and the job ended
ansible_facts:
  description: With O(job) - the job's facts (C(sglang_bench)), as C(async_status) returns them.
  type: dict
  returned: when O(job) is given and the job ended without failing
failure_class:
  description: With O(job) - the class of the job's failure (C(bench_config) for bad input).
  type: str
  returned: when the job failed with one
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
