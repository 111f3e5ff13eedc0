"""Filters over the planner (module_utils/sglang_layouts): thin, no rules of their own."""

from __future__ import annotations

import sys
from pathlib import Path

from ansible.errors import AnsibleFilterError

# The planner is plain Python shared with the modules and the simulator.
_MODULE_UTILS = str(Path(__file__).resolve().parents[1] / "module_utils")
if _MODULE_UTILS not in sys.path:
    sys.path.insert(0, _MODULE_UTILS)

from sglang_layouts import bench, placement, planner, wheels  # noqa: E402
from sglang_layouts.plan_table import plan_table  # noqa: E402
from sglang_layouts.secrets import split_env  # noqa: E402


def sglang_plan(inputs):
    """sglang_plan_inputs -> the plan document (docs/ARCHITECTURE.md)."""
    try:
        return planner.plan_host(_plain(inputs))
    except planner.PlanError as e:
        raise AnsibleFilterError(f"sglang_plan: {e}") from e


def sglang_layout_plan(plan, name):
    """One layout of a plan document, or an error naming the known layouts."""
    try:
        return planner.layout_plan(_plain(plan), name)
    except planner.PlanError as e:
        raise AnsibleFilterError(f"sglang_layout_plan: {e}") from e


def sglang_layout_secret_env(inputs, name, extra_env=None):
    """The real values of a layout's secret variables, for its EnvironmentFile only (no_log tasks)."""
    try:
        return planner.layout_secret_env(_plain(inputs), name, _plain(extra_env or {}))
    except planner.PlanError as e:
        raise AnsibleFilterError(f"sglang_layout_secret_env: {e}") from e


def sglang_plan_digest(inputs):
    """A digest of the planner's inputs: a plan fact made from other inputs is planned again."""
    return planner.inputs_digest(_plain(inputs))


def sglang_units_on(plan, host, role=None):
    """The units of a layout plan that run on `host` (optionally only those of one role)."""
    return placement.units_on(_plain(plan), _plain(host), _plain(role))


def sglang_units_of_layouts(layouts, host):
    """Every {layout, unit} pair of `layouts` that runs on `host` (placement.units_of_layouts)."""
    return placement.units_of_layouts(_plain(layouts), _plain(host))


def sglang_stop_order(plan, host, layout="all", installed=None):
    """The units to stop on `host` in two phases (placement.stop_order): {first, then, all}."""
    return placement.stop_order(_plain(plan), _plain(host), str(layout), _plain(list(installed or [])))


def sglang_first_failure(results, step):
    """A host's outcome of one step over its units: {} or the first failed result, with the step."""
    return placement.first_failure(_plain(results), _plain(step))


def sglang_nodes_outcome(records, hosts, play_hosts, layout="", step="", multinode=True):
    """The outcome of a layout that spans hosts, from every node's own record (placement.nodes_outcome)."""
    return placement.nodes_outcome(
        _plain(list(records)),
        _plain(list(hosts)),
        _plain(list(play_hosts)),
        str(layout),
        str(step),
        bool(multinode),
    )


def sglang_plain_env(env, secret_env=None):
    """An environment without its secret variables (what a unit's Environment= lines may hold)."""
    return split_env(_plain(env or {}), _plain(secret_env))[0]


def sglang_plan_table(plan):
    """The plan as text lines (layout, GPUs, GiB/GPU, budget, KV tokens, verdict, reason)."""
    return plan_table(_plain(plan))


def sglang_host_addresses(hosts, hostvars):
    """Each host's ansible_host, or its inventory name: where other nodes reach it."""
    out = []
    for host in hosts:
        try:
            address = hostvars[host].get("ansible_host")
        except (KeyError, AttributeError):
            address = None
        out.append(str(address) if address else str(host))
    return out


def sglang_wheel_pins(filenames):
    """Wheel file names -> one exact pin each (name==version), sorted by name."""
    try:
        return wheels.wheel_pins(_plain(filenames))
    except wheels.WheelError as e:
        raise AnsibleFilterError(f"sglang_wheel_pins: {e}") from e


def sglang_drop_pins(steps, names):
    """Pip steps without the pins of `names`; steps left empty are dropped."""
    try:
        return wheels.drop_pins(_plain(steps), _plain(names))
    except wheels.WheelError as e:
        raise AnsibleFilterError(f"sglang_drop_pins: {e}") from e


def sglang_bench_rate_label(rate):
    """A request rate as the load generator's progress lines name it (2, 0.5, inf); refuses rates <= 0."""
    try:
        return bench.rate_label(bench.parse_rate(_plain(rate)))
    except bench.BenchError as e:
        raise AnsibleFilterError(f"sglang_bench_rate_label: {e}") from e


def _plain(value):
    """Ansible's lazy containers and tagged strings -> plain Python (json round-trip types)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, str):
        return str(value)
    return value


class FilterModule:
    def filters(self):
        return {
            "sglang_plan": sglang_plan,
            "sglang_layout_plan": sglang_layout_plan,
            "sglang_plan_table": sglang_plan_table,
            "sglang_layout_secret_env": sglang_layout_secret_env,
            "sglang_plain_env": sglang_plain_env,
            "sglang_plan_digest": sglang_plan_digest,
            "sglang_units_on": sglang_units_on,
            "sglang_first_failure": sglang_first_failure,
            "sglang_stop_order": sglang_stop_order,
            "sglang_units_of_layouts": sglang_units_of_layouts,
            "sglang_nodes_outcome": sglang_nodes_outcome,
            "sglang_host_addresses": sglang_host_addresses,
            "sglang_wheel_pins": sglang_wheel_pins,
            "sglang_drop_pins": sglang_drop_pins,
            "sglang_bench_rate_label": sglang_bench_rate_label,
        }
