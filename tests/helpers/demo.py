"""The demo host the planner's and the simulator's tests plan for: 8 x 94.97 GiB PCIe GPUs (the
seed box of inventory/demo), the serving settings of group_vars/all/serving.yml, Kimi K2.6."""

from __future__ import annotations

from sglang_layouts.plan import planner

from sglang_sim.launcher import DEFAULT_MODEL

# The simulated engine decodes a token every 2 ms: a test's few requests are done at once.
FAST_DECODE = {"SGLANG_SIM_DECODE_STEP_MS": "2"}

SEED_BOX = {"gpu_count": 8, "gpu_memory_gib": 94.97, "gpu_interconnect": "pcie"}

DEMO_SERVING = {
    "mem_fraction_static": 0.88,
    "context_length": 32768,
    "max_running_requests": 64,
    "attention_backend": "triton",
    "grammar_backend": "none",
    "trust_remote_code": True,
    "host": "127.0.0.1",
    "base_port": 30000,
}


def plan_host(layouts, model, hardware=SEED_BOX, serving=DEMO_SERVING, hosts=("h",), **inputs) -> dict:
    """planner.plan_host of `layouts` of `model` on host h, the first of `hosts` (the group
    sglang_hosts); inputs adds the plan's other inputs (sglang_version)."""
    cluster = {"group": "sglang_hosts", "hosts": list(hosts)}
    return planner.plan_host(
        {
            "host": "h",
            "model": model,
            "layouts": layouts,
            "hardware": hardware,
            "serving": serving,
            "cluster": cluster,
        }
        | inputs
    )


def kimi_plan(hardware=SEED_BOX, **layout) -> tuple:
    """(model spec, the planner's plan) of one layout `layout` of Kimi K2.6 on `hardware`."""
    spec = planner.load_model({"name": "kimi-k2.6", "path": str(DEFAULT_MODEL)})
    return spec, planner.plan_layout({"name": "t", **layout}, spec, hardware, {})
