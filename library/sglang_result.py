#!/usr/bin/python
# Copyright: sglang-layouts contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_result
short_description: Store, look up and point to result records of layout benchmarks (controller side)
description:
  - Result records live under O(results_dir) as C(<run id>/<host>/<layout>.json). A record is never overwritten
    (it is hard-linked into place, which fails if the name exists); a forced re-run in the same run id adds
    C(<layout>.attemptN.json), and readers take the highest attempt.
  - C(state=present) builds a record of schema C(sglang-layouts/result/v1) (with the formula of every figure)
    from the plan entry, the health facts and the benchmark facts, and stores it.
  - C(state=query) says whether a (run, host, layout) already has a record (sweeps resume with it).
  - C(state=latest) points C(<results_dir>/latest) at O(run_id) (symlink swapped in atomically).
  - Run it on the controller (delegate the task to localhost).
version_added: "0.1.0"
author: sglang-layouts maintainers (@sglang-layouts)
options:
  results_dir:
    description: The results folder on the controller.
    type: path
    required: true
  run_id:
    description: Run id (a UTC timestamp by default in the playbooks).
    type: str
    required: true
  state:
    description: What to do.
    type: str
    choices: [present, query, latest]
    default: present
  host:
    description: Inventory host the layout ran on (present, query).
    type: str
  layout:
    description: Layout name (present, query).
    type: str
  status:
    description: C(ok) (measured, no failed request), C(degraded) (measured, some requests failed),
      C(failed) (deploy, health or benchmark failed), C(skipped) (planner verdict oom/invalid, not forced).
    type: str
    choices: [ok, degraded, failed, skipped]
    default: ok
  engine:
    description:
      - C(sglang), C(sim) or C(vllm); a C(sim) record is marked simulated.
      - The plan's C(engine) (the layout's own, resolved by the planner) wins over this value, so a sweep with
        layouts of several engines on one host stores each with its own.
    type: str
  plan:
    description: The planner's entry for the layout (verdict, gpus_used, kv_tokens, argv, ...).
    type: dict
  health:
    description: The C(sglang_health) facts (ready_after_s, max_total_num_tokens, memory_per_rank, ...).
    type: dict
  bench:
    description: The C(sglang_bench) facts (summary, levels, config, server).
    type: dict
  failure_class:
    description: Failure class of a failed layout (from the failing task), or the verdict of a skipped one.
    type: str
  evidence:
    description: Evidence of a failure (line, log_tail, exit_status, ...).
    type: raw
  msg:
    description: Message of the failing task.
    type: str
  reasons:
    description: The planner's reasons (default the plan entry's).
    type: list
    elements: str
  argv:
    description: The command line the layout ran with (default the plan entry's).
    type: list
    elements: str
  versions:
    description: Versions (SGLang pin, engine's reported version, Ansible, Python).
    type: dict
  gpu:
    description: GPU facts of the host (count, memory, interconnect, gpu_facts).
    type: dict
  extra:
    description: Anything else to keep with the record.
    type: dict
  gpu_hour_cost:
    description: $ per GPU-hour (C(sglang_gpu_hour_cost)); gives the record's C(cost_per_mtok) - $ per 1M output
      tokens at the peak and at the SLO, C(gpu_hour_cost x gpus_used / 3600 / tok_s x 1e6).
    type: float
  timing:
    description:
      - A sweep's clock marks of the layout, C({start, ready, stop_s, gate_waited_s}) (epoch seconds on the
        controller; C(end) is the time this module runs, after the stop). The record's C(timing) is then
        C({deploy_s, ready_s, bench_s, warmup_s, stop_s, tool_s, wall_s}) computed by results.layout_timing from these
        and the record's health and levels (its C(formulas.timing) says how); without it C(timing) is null.
    type: dict
extends_documentation_fragment: ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: In check mode nothing is written; the path the record would get is returned.
  diff_mode:
    support: none
    details: A record is a new file, never an edit of one; the module returns the record instead.
  platform:
    support: full
    platforms: posix
"""

EXAMPLES = r"""
- name: Does this layout already have a result in this run?
  ansible.legacy.sglang_result:
    state: query
    results_dir: "{{ sglang_results_dir }}"
    run_id: "{{ sglang_run_id }}"
    host: "{{ inventory_hostname }}"
    layout: tp8
  delegate_to: localhost
  register: existing

- name: Store a skipped layout
  ansible.legacy.sglang_result:
    results_dir: "{{ sglang_results_dir }}"
    run_id: "{{ sglang_run_id }}"
    host: "{{ inventory_hostname }}"
    layout: tp4ep2
    status: skipped
    failure_class: oom
    plan: "{{ layout_plan }}"
  delegate_to: localhost
"""

RETURN = r"""
path:
  description: Path of the stored record (present), or of the latest attempt (query).
  type: str
  returned: when a record was stored or found
attempt:
  description: Attempt number of the stored record (1 for C(<layout>.json)).
  type: int
  returned: state=present
exists:
  description: Whether the (run, host, layout) has a record.
  type: bool
  returned: state=query
attempts:
  description: Attempt numbers stored for the (run, host, layout).
  type: list
  elements: int
  returned: state=query
status:
  description: Status of the latest stored attempt.
  type: str
  returned: state=query and exists
record:
  description: The stored record without its levels (summary, kv_tokens, status...).
  type: dict
  returned: state=present
latest:
  description: Path of the latest symlink.
  type: str
  returned: state=latest
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_layouts.report import result_store


def main():
    module = AnsibleModule(
        argument_spec=result_store.ARGUMENT_SPEC,
        required_if=result_store.REQUIRED_IF,
        supports_check_mode=True,
    )
    result = result_store.task(module.params, module.check_mode)
    (module.fail_json if result.get("failed") else module.exit_json)(**result)


if __name__ == "__main__":
    main()
