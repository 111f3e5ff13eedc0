"""Filters over the planner (module_utils/sglang_layouts): thin, no rules of their own."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from ansible.errors import AnsibleFilterError

# The planner is plain Python shared with the modules and the simulator: module_utils/ beside this
# plugin's folder (filter_plugins/ in the repo, plugins/filter/ in the collection sglang.layouts).
_MODULE_UTILS = str(Path(__file__).resolve().parents[1] / "module_utils")
# The folder that holds the simulator (sglang_sim/): the repo's root, or the collection's, which
# lays out the repo's plugins one folder deeper (plugins/filter/).
_ROOT = Path(__file__).resolve().parents[2 if __name__.startswith("ansible_collections.") else 1]
if _MODULE_UTILS not in sys.path:
    sys.path.insert(0, _MODULE_UTILS)


def _library(dotted):
    """A name of module_utils/sglang_layouts ("plan.planner.plan_host"), imported when first used.

    Ansible loads every filter plugin anew in each forked worker, so importing the library here at
    load time cost each task that touches any filter ~0.1 s of CPU (asyncio, http, the planner);
    preload_library imports it once in the controller's main process instead."""
    module, attr = dotted.rsplit(".", 1)
    return getattr(importlib.import_module(f"sglang_layouts.{module}"), attr)


def preload_library():
    """Import every library module the filters name, once, in the process that runs it.

    Called in the controller's main process before any task runs (the callback sglang_layouts_preload):
    Ansible forks a worker per task and host, and a worker then finds the library already imported
    instead of importing it anew (the import was a fifth of plan.yml's CPU)."""
    for dotted in sorted({name for face in _FACES.values() for name in face if isinstance(name, str)}):
        _library(dotted)


def _plain(value):
    """Ansible's lazy containers and tagged strings -> plain Python (json round-trip types)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, str):
        return str(value)
    return value


def _face(name, fn, *errors):
    """A filter over a library function: plain Python in, the library's own errors (which say what
    to do) out as Ansible's filter error, named after the filter. fn and errors are library names
    ("plan.planner.plan_host") or local functions."""

    def run(*args, **kwargs):
        call = _library(fn) if isinstance(fn, str) else fn
        try:
            return call(*_plain(list(args)), **_plain(kwargs))
        except Exception as e:
            # the error classes are imported only when something failed
            if isinstance(e, tuple(_library(c) if isinstance(c, str) else c for c in errors)):
                raise AnsibleFilterError(f"{name}: {e}") from e
            raise

    run.__name__ = run.__qualname__ = name
    return run


def _layout_secret_env(inputs, name, extra_env=None):
    """The real values of a layout's secret variables, for its EnvironmentFile only (no_log tasks)."""
    return _library("plan.planner.layout_secret_env")(inputs, name, extra_env or {})


def _plain_env(env, secret_env=None):
    """An environment without its secret variables (what a unit's Environment= lines may hold)."""
    return _library("secrets.split_env")(env or {}, secret_env)[0]


def _unit_previews(layouts, host, ctx, template_dir, secret_envs=None):
    """Every unit file of a host's layouts, by unit name, from the role's templates in one call; the
    templates' Ansible filters are Ansible's own, and so is ansible_managed where no variable sets it."""
    from ansible import constants
    from ansible.plugins.filter.core import comment, to_bool
    from ansible.plugins.filter.mathstuff import union

    ctx = {
        **ctx,
        "ansible_managed": ctx.get("ansible_managed")
        or constants.config.get_config_value("DEFAULT_MANAGED_STR"),
    }
    filters = {"comment": comment, "bool": to_bool, "union": lambda a, b: union(None, a, b)}
    return _library("serve.units.render_previews")(layouts, host, ctx, template_dir, secret_envs, filters)


def _rate_label(rate):
    """A request rate as the load generator's progress lines name it (2, 0.5, inf). A rate it refuses
    (<= 0, not a number) is returned as given: no line will carry it, and the job's own refusal,
    before any request, is what the wait reports."""
    try:
        return _library("bench.common.rate_label")(_library("bench.common.parse_rate")(rate))
    except _library("bench.common.BenchError"):
        return str(rate)


def sglang_python_path(package):
    """The controller folder to put on PYTHONPATH for this copy's own `package` (sglang_layouts, the
    library; sglang_sim, the simulator): the repo's or the installed collection's, wherever it is."""
    folders = {"sglang_layouts": _MODULE_UTILS, "sglang_sim": str(_ROOT)}
    if package not in folders:
        raise AnsibleFilterError(
            f"sglang_python_path: {package!r} is not one of {', '.join(sorted(folders))}"
        )
    return folders[package]


def sglang_host_addresses(hosts, hostvars, known=None):
    """Each host's ansible_host, or its inventory name: where other nodes reach it. `known` maps
    hosts to addresses already read: hostvars[host] resolves all of that host's variables, and each
    host's planner inputs list the whole cluster, so a play reads them once (the role sglang_plan)."""
    known = known or {}
    out = []
    for host in hosts:
        if host in known:
            out.append(str(known[host]))
            continue
        try:
            address = hostvars[host].get("ansible_host")
        except (KeyError, AttributeError):
            address = None
        out.append(str(address) if address else str(host))
    return out


# filter -> (library function, the errors it raises for bad input); every rule lives in module_utils
_FACES = {
    # sglang_plan_inputs -> the plan document (docs/ARCHITECTURE.md)
    "sglang_plan": ("plan.planner.plan_host", "plan.planner.PlanError"),
    # the same as {plan: ...} or {refused: the message}: the role fails with the message alone
    "sglang_plan_outcome": ("plan.validate.plan_outcome",),
    # one layout of a plan document, or an error naming the known layouts
    "sglang_layout_plan": ("plan.planner.layout_plan", "plan.planner.PlanError"),
    "sglang_layout_secret_env": (_layout_secret_env, "plan.planner.PlanError"),
    # the same for every layout, by name (the unit preview reads the inputs once)
    "sglang_layouts_secret_env": ("plan.planner.layouts_secret_env", "plan.planner.PlanError"),
    # a digest of the planner's inputs: a plan fact made from other inputs is planned again
    "sglang_plan_digest": ("plan.planner.inputs_digest",),
    # whether a plan fact was made from these inputs (the roles then skip sglang_plan altogether)
    "sglang_plan_current": ("plan.inputs.plan_current",),
    # the plan as text lines (layout, GPUs, GiB/GPU, budget, KV tokens, verdict, reason)
    "sglang_plan_table": ("plan.table.plan_table",),
    "sglang_plain_env": (_plain_env,),
    # a layout's engine as the roles see it: label, venv variable, simulated (engines.py)
    "sglang_engine_facts": ("engines.role_facts", "plan.planner.PlanError"),
    # the PATH of an engine's unit: its venv, the base env, the CUDA toolkit, the system (serve/jit_toolchain.py)
    "sglang_unit_path": ("serve.jit_toolchain.unit_path", "plan.planner.PlanError"),
    # how a server gets the API key (--config FILE or --api-key), and that file's text (secrets.py)
    "sglang_api_key_argv": ("secrets.api_key_argv", "plan.planner.PlanError"),
    "sglang_api_key_config": ("secrets.api_key_config", "plan.planner.PlanError", ValueError),
    # where a layout's units run, the stop order, one outcome from every node's (plan/placement.py)
    "sglang_units_on": ("plan.placement.units_on",),
    # the service role's check that every unit of a layout can start, and its router's workers
    "sglang_unit_argv_problems": ("plan.placement.argv_problems",),
    "sglang_router_workers": ("plan.placement.router_workers",),
    # what one unit runs (argv, environment, secret file), and every unit file of a host (serve/units.py)
    "sglang_unit_spec": ("serve.units.unit_spec", "plan.planner.PlanError"),
    "sglang_unit_previews": (_unit_previews, "plan.planner.PlanError"),
    "sglang_units_of_layouts": ("plan.placement.units_of_layouts",),
    "sglang_stop_order": ("plan.placement.stop_order", "plan.planner.PlanError"),
    "sglang_first_failure": ("plan.placement.first_failure",),
    # the router host's outcome of a replica or pd layout's start (alive, workers, readiness, end to end)
    "sglang_router_outcome": ("plan.placement.router_outcome",),
    # a router's GET /workers answer: how many it counts healthy, every registered worker's URL
    "sglang_router_registered": ("plan.placement.router_registered",),
    # a layout's start over its waves of servers, and the server whose KV pool stands for it
    "sglang_layout_readiness": ("plan.placement.layout_readiness",),
    # a sweep's failure of one layout (class, message, evidence) from every source, most specific first
    "sglang_layout_failure": ("gate.failure.layout_failure",),
    # a record's gpu and versions blocks, the same for ok, failed and skipped records (report/results.py)
    "sglang_record_context": ("report.results.record_context",),
    "sglang_nodes_outcome": ("plan.placement.nodes_outcome",),
    # wheel file names -> exact pins; pip steps without some pins (serve/wheels.py)
    "sglang_wheel_pins": ("serve.wheels.wheel_pins", "serve.wheels.WheelError"),
    "sglang_drop_pins": ("serve.wheels.drop_pins", "serve.wheels.WheelError"),
    "sglang_bench_rate_label": (_rate_label,),
    # the layout search after each measured layout: refit, re-rank, next candidate or stop
    "sglang_search_step": ("plan.calibrate.sweep_step", "plan.planner.PlanError"),
    # the plan with one layout's search block set to the step's (the loop over several hosts)
    "sglang_plan_with_search": ("plan.calibrate.with_search",),
}


class FilterModule:
    def filters(self):
        faces = {name: _face(name, fn, *errors) for name, (fn, *errors) in _FACES.items()}
        return {
            **faces,
            "sglang_host_addresses": sglang_host_addresses,
            "sglang_python_path": sglang_python_path,
        }
