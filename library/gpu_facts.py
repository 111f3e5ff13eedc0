#!/usr/bin/python
# Copyright: sglang-layouts contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module gpu_facts: nvidia-smi's view of the host's GPUs as ansible_facts."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_facts
short_description: Read the host's NVIDIA GPUs, their health and topology from nvidia-smi
description:
  - Runs C(nvidia-smi -q -x), C(nvidia-smi --query-compute-apps) and C(nvidia-smi topo -m) on the host and
    returns what they say as ansible_facts, under the names the planner reads (C(gpu_count),
    C(gpu_memory_gib), C(gpu_interconnect)). Facts outrank inventory variables, so a host where this
    module ran is planned from its real GPUs and one where it did not from the inventory.
  - C(gpu_memory_gib) is the capacity as torch reports it, (framebuffer total - reserved) MiB / 1024,
    of the smallest GPU.
  - C(gpu_interconnect) sums up C(nvidia-smi topo -m) - C(nvlink) when every pair of GPUs is linked by
    NVLink, C(pcie) when any pair is not, C(none) on a host with one GPU (there is no pair to link).
  - A GPU in a state that SGLang should not start on (uncorrected ECC errors, a pending row remap, a
    process already holding memory, compute mode Prohibited) is listed in C(gpu_problems) and emitted as
    a warning; with O(fail_on_problems=true) the task fails.
  - Read-only, so check mode runs it for real.
options:
  nvidia_smi:
    description: The nvidia-smi program, a name looked up in PATH (and /usr/bin, /usr/local/nvidia/bin) or a path.
    type: str
    default: nvidia-smi
  required:
    description:
      - When nvidia-smi is missing or fails, fail with a message saying what to install or fix (V(true)),
        or return C(gpu_present=false) with the reason in C(gpu_problems) and no C(gpu_count), so the
        inventory's values stay in force (V(false)).
    type: bool
    default: true
  fail_on_problems:
    description: Fail when C(gpu_problems) is not empty instead of only warning.
    type: bool
    default: false
  used_memory_threshold_mib:
    description: Memory in use (MiB) on a GPU with no process listed above which the GPU counts as held by someone.
    type: int
    default: 1024
  topology:
    description: Also run C(nvidia-smi topo -m) for C(gpu_topology) and C(gpu_interconnect).
    type: bool
    default: true
author:
  - sglang-layouts maintainers (@sglang-layouts)
notes:
  - The parsing lives in module_utils/sglang_layouts/gpu.py and is tested on output recorded on a real
    NVIDIA H200 (tests/fixtures/gpu/h200-1gpu).
"""

EXAMPLES = r"""
- name: Read the GPUs (facts win over the inventory's gpu_count / gpu_memory_gib / gpu_interconnect)
  gpu_facts:

- name: Refuse to go on when a GPU is held by another process or has ECC errors
  gpu_facts:
    fail_on_problems: true

- name: On a host that may have no driver yet, keep the inventory's values
  gpu_facts:
    required: false
"""

RETURN = r"""
ansible_facts:
  description: The facts below, set for the host.
  returned: always
  type: dict
  contains:
    gpu_present:
      description: Whether nvidia-smi answered.
      type: bool
      sample: true
    gpu_count:
      description: Number of GPUs nvidia-smi lists.
      type: int
      sample: 1
    gpu_memory_gib:
      description: Capacity as torch reports it, (fb total - fb reserved) MiB / 1024, smallest GPU, 2 decimals.
      type: float
      sample: 139.8
    gpu_interconnect:
      description: nvlink (every pair over NVLink), pcie (any pair over PCIe/host bridge/SMP), none (one GPU).
      type: str
      sample: none
    gpu_memory_bandwidth_gbs:
      description: Datasheet memory bandwidth (GB/s) of the GPU model; absent for a model not in the table.
      type: int
      sample: 4800
    gpu_name:
      description: >-
        The GPU model (nvidia-smi's name; the first when a host mixes models, which is a problem of its own):
        the speed model's key into module_utils/sglang_layouts/gpu_specs.py.
      type: str
      sample: NVIDIA H200
    gpu_names:
      description: Product names in index order.
      type: list
      elements: str
      sample: ["NVIDIA H200"]
    gpu_uuids:
      description: GPU UUIDs in index order.
      type: list
      elements: str
      sample: ["GPU-316b40f5-93ce-dbe6-3905-b0ca397d46ee"]
    gpu_pci_bus_ids:
      description: PCI bus ids in index order.
      type: list
      elements: str
      sample: ["00000000:00:06.0"]
    gpu_driver_version:
      description: NVIDIA driver version.
      type: str
      sample: "580.159.04"
    gpu_cuda_version:
      description: Highest CUDA version the driver supports.
      type: str
      sample: "13.0"
    gpu_topology:
      description: Link between every pair of GPUs, as nvidia-smi topo -m names it (NV<n>, PIX, PXB, PHB, NODE, SYS).
      type: dict
      sample: {"GPU0": {"GPU1": "NV18"}, "GPU1": {"GPU0": "NV18"}}
    gpu_cpu_affinity:
      description: CPU affinity of each GPU from nvidia-smi topo -m.
      type: dict
      sample: {"GPU0": "0-15"}
    gpu_devices:
      description: Per GPU - index, name, uuid, pci_bus_id, memory_{total,reserved,used,free}_mib, memory_gib,
        ecc_mode, ecc_uncorrected_volatile, compute_mode, remapped_row_pending/failure, recovery_action, processes.
      type: list
      elements: dict
    gpu_health:
      description: ok when gpu_problems is empty, else degraded (or absent when nvidia-smi is missing).
      type: str
      sample: ok
    gpu_problems:
      description: One sentence per problem found, naming the GPU and what to do.
      type: list
      elements: str
      sample:
        - "GPU 0 (NVIDIA H200, 00000000:00:06.0) already has 1 process(es) holding memory (pid 462 python3 8802 MiB;
          8811 MiB used in all): stop them or SGLang's memory plan will not fit"
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_layouts import gpu

APPS_QUERY = "--query-compute-apps=pid,process_name,gpu_uuid,used_memory"
MISSING_HINT = (
    "install the NVIDIA driver (>= 580 for CUDA 13) and check that the GPUs are passed through, "
    "or set gpu_count, gpu_memory_gib and gpu_interconnect in the inventory and run gpu_facts with required: false"
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
            "required": {"type": "bool", "default": True},
            "fail_on_problems": {"type": "bool", "default": False},
            "used_memory_threshold_mib": {"type": "int", "default": gpu.DEFAULT_USED_MEMORY_THRESHOLD_MIB},
            "topology": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    p = module.params

    def unavailable(reason: str) -> None:
        if p["required"]:
            module.fail_json(msg=f"{reason}: {MISSING_HINT}", gpu_present=False)
        module.exit_json(changed=False, ansible_facts={"gpu_present": False, "gpu_problems": [reason]})

    smi = module.get_bin_path(
        p["nvidia_smi"], opt_dirs=["/usr/bin", "/usr/local/nvidia/bin", "/usr/local/bin"]
    )
    if not smi:
        unavailable(f"nvidia-smi not found ({p['nvidia_smi']!r} is not in PATH)")

    rc, xml, err = module.run_command([smi, "-q", "-x"])
    if rc != 0:
        said = (err or xml).strip().splitlines()
        unavailable(f"nvidia-smi -q -x failed with rc {rc}: {' '.join(said[:3]) or 'no output'}")

    rc, apps, _err = module.run_command([smi, APPS_QUERY, "--format=csv"])
    apps = apps if rc == 0 else None

    topo = None
    topo_problem = None
    if p["topology"]:
        rc, out, err = module.run_command([smi, "topo", "-m"])
        if rc == 0:
            topo = out
        else:
            topo_problem = f"nvidia-smi topo -m failed with rc {rc} ({(err or out).strip()[:200]}): gpu_interconnect is left to the inventory"

    try:
        facts = gpu.build_facts(xml, topo, apps, p["used_memory_threshold_mib"])
    except gpu.GpuFactsError as exc:
        module.fail_json(msg=f"cannot read nvidia-smi's output: {exc}")
    if topo_problem:
        facts["gpu_problems"].append(topo_problem)
        facts["gpu_health"] = "degraded"
    facts["gpu_present"] = True

    for problem in facts["gpu_problems"]:
        module.warn(problem)
    if p["fail_on_problems"] and facts["gpu_problems"]:
        module.fail_json(
            msg="GPU problems: " + "; ".join(facts["gpu_problems"]),
            ansible_facts=facts,
            gpu_problems=facts["gpu_problems"],
        )
    module.exit_json(changed=False, ansible_facts=facts)


if __name__ == "__main__":
    main()
