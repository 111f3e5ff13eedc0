"""unit_files: what each unit runs (unit_spec) and every unit file of a host at once (render_previews),
from the real planner's plan and the role's own templates."""

from __future__ import annotations

import importlib.util
import shlex

import pytest
from sglang_layouts.estimate.model import PlanError
from sglang_layouts.plan import planner
from sglang_layouts.serve import units as unit_files

from tests.helpers.demo import DEMO_SERVING, SEED_BOX

CTX = {
    "host": "seed-box",
    "model": {"name": "kimi-k2.6"},
    "router_version": "0.2.4",
    "ansible_managed": "Ansible managed",
    "default_engine": "sim",
    "venv_paths": {"sglang_venv_path": "/opt/sv", "vllm_venv_path": "/opt/vv"},
    "base_env": "",
    "cuda_home": "/usr/local/cuda",
    "extra_path": [],
    "sim_python": "/usr/bin/python3",
    "sim_dir": "/opt/sim",
    "router_venv": "/opt/router",
    "redact_path": "/usr/local/bin/sglang-redact",
    "config_dir": "/etc/sglang",
    "manager": "systemd",
    "api_key_set": False,
    "extra_env": {"FOO": "bar", "HF_TOKEN": "hidden"},
    "secret_names": ["HF_TOKEN"],
    "role": {
        "user": "sglang",
        "group": "sglang",
        "gpu_groups": ["video"],
        "home": "/var/lib/sglang",
        "restart": "no",
        "restart_sec": 5,
        "timeout_stop_sec": 120,
        "success_exit_status": [],
        "limit_nofile": 65536,
        "read_write_paths": [],
    },
}


@pytest.fixture(scope="module")
def plan(repo):
    return planner.plan_host(
        {
            "host": "seed-box",
            "model": {"name": "kimi-k2.6", "path": str(repo / "models" / "kimi-k2.6")},
            "layouts": [
                {"name": "tp8", "tp": 8},
                {"name": "tp4x2", "tp": 4, "replicas": 2},
                {"name": "vl8", "tp": 8, "engine": "vllm"},
                {"name": "sim8", "tp": 8, "engine": "sim"},
            ],
            "hardware": SEED_BOX,
            "serving": DEMO_SERVING,
        }
    )


def _pairs(plan, name):
    entry = next(e for e in plan["layouts"] if e["name"] == name)
    return entry, entry["units"]


def test_a_simulated_server_runs_the_simulator_with_the_planners_flags(plan):
    lp, units = _pairs(plan, "tp8")
    assert lp["engine"] == "sglang"  # the planner resolves each layout's engine
    spec = unit_files.unit_spec({**lp, "engine": "sim"}, units[0], CTX)
    assert spec["argv"][:3] == ["/usr/bin/python3", "-m", "sglang_sim"]
    assert spec["argv"][3:] == units[0]["argv"][3:]  # the planner's flags, unchanged
    assert spec["unit_argv"] == spec["argv"] and spec["key_argv"] == []
    # the secret variable stays out of Environment=; the simulator's code is on its PYTHONPATH
    assert (
        spec["env"]["FOO"] == "bar"
        and "HF_TOKEN" not in spec["env"]
        and spec["env"]["PYTHONPATH"] == "/opt/sim"
    )
    assert "PATH" not in spec["env"] and not spec["env_file_needed"]


def test_the_simulated_host_is_the_planned_one(plan):
    """The simulator acts the hardware and SGLang version the layout was planned for: the planner
    puts them in the unit's environment, a real engine's unit has none of them."""
    lp, units = _pairs(plan, "sim8")
    spec = unit_files.unit_spec(lp, units[0], CTX)
    hw = plan["hardware"]
    assert spec["env"]["SGLANG_SIM_GPUS"] == str(hw["gpu_count"])
    assert float(spec["env"]["SGLANG_SIM_GPU_MEMORY_GIB"]) == hw["gpu_memory_gib"]
    assert spec["env"]["SGLANG_SIM_INTERCONNECT"] == hw["gpu_interconnect"]
    assert units[0]["env"]["SGLANG_SIM_GPUS"] == spec["env"]["SGLANG_SIM_GPUS"]  # shown by make plan
    real, real_units = _pairs(plan, "tp8")
    assert not any(k.startswith("SGLANG_SIM_") for k in real["env"])
    assert not any(k.startswith("SGLANG_SIM_") for u in real_units for k in u["env"])


def test_a_real_engine_with_a_key_runs_behind_the_redactor_and_reads_its_config(plan):
    lp, units = _pairs(plan, "tp8")
    ctx = {**CTX, "api_key_set": True}
    spec = unit_files.unit_spec(lp, units[0], ctx, {"HF_TOKEN": "hidden"})
    assert spec["key_argv"] == ["--config", "/etc/sglang/sglang-kimi-k2-6-tp8.yaml"]
    assert spec["unit_argv"][:3] == [
        "/opt/sv/bin/python",
        "/usr/local/bin/sglang-redact",
        "/opt/sv/bin/python",
    ]
    assert spec["env"]["PATH"].startswith("/opt/sv/bin:") and "/usr/local/cuda/bin" in spec["env"]["PATH"]
    assert spec["env_file_needed"] and spec["secret_names"] == ["HF_TOKEN"]
    # under the process supervisor the config file's path is filled in at exec time
    process = unit_files.unit_spec(lp, units[0], {**ctx, "manager": "process"})
    assert process["key_argv"][0] == "--config" and process["key_argv"][1] != spec["key_argv"][1]
    # vLLM takes the key as --api-key, from its own venv
    vlp, vunits = _pairs(plan, "vl8")
    vspec = unit_files.unit_spec(vlp, vunits[0], ctx)
    assert vspec["argv"][0] == "/opt/vv/bin/python" and "--api-key" in vspec["key_argv"]


def test_a_router_runs_from_its_venv_without_key_or_environment(plan):
    lp, units = _pairs(plan, "tp4x2")
    router = next(u for u in units if u["role"] == "router")
    spec = unit_files.unit_spec(lp, router, {**CTX, "api_key_set": True}, {"HF_TOKEN": "x"})
    assert spec["argv"] == ["/opt/router/bin/python", *router["argv"][1:]]
    assert spec["env"] == {} and spec["key_argv"] == [] and not spec["env_file_needed"]


def test_a_real_engine_without_its_venv_is_a_clear_error(plan):
    lp, units = _pairs(plan, "vl8")
    with pytest.raises(PlanError, match="vllm_venv_path"):
        unit_files.unit_spec(lp, units[0], {**CTX, "venv_paths": {}})


@pytest.mark.skipif(importlib.util.find_spec("ansible") is None, reason="the filter face needs Ansible")
def test_previews_render_every_unit_from_the_roles_templates(repo, plan):
    from filter_plugins.sglang_layouts import FilterModule

    previews = FilterModule().filters()["sglang_unit_previews"](
        plan["layouts"],
        "seed-box",
        {**CTX, "api_key_set": True},
        str(repo / "roles/sglang_service/templates"),
        {"tp8": {"HF_TOKEN": "hidden"}},
    )
    units = [u for e in plan["layouts"] for u in e["units"]]
    assert sorted(previews) == sorted(u["name"] for u in units)
    text = previews["sglang-kimi-k2-6-tp8.service"]
    assert text.startswith("#\n# Ansible managed\n#\n")
    # ExecStart= is the spec's argv, each argument quoted
    lp, tp8_units = _pairs(plan, "tp8")
    spec = unit_files.unit_spec(lp, tp8_units[0], {**CTX, "api_key_set": True}, {"HF_TOKEN": "hidden"})
    exec_start = text.split("ExecStart=", 1)[1].split("\nStandardOutput", 1)[0].replace(" \\\n   ", "")
    assert shlex.split(exec_start) == spec["unit_argv"]
    assert "EnvironmentFile=/etc/sglang/sglang-kimi-k2-6-tp8.env" in text and "hidden" not in text
    assert "# Secret variables (HF_TOKEN, SGLANG_API_KEY)" in text
    router = previews["sglang-kimi-k2-6-tp4x2-router.service"]
    assert "sglang-router 0.2.4" in router and 'ExecStart="/opt/router/bin/python"' in router


def test_the_allocator_the_plan_gives_the_mxfp4_path_reaches_the_unit_file(repo):
    # gpt-oss-120b on an H100: SGLang's triton_kernels MXFP4 path, whose weight swizzle needs
    # expandable segments to load (memory.allocator_env); the plan's env is what the unit runs with
    from filter_plugins.sglang_layouts import FilterModule

    plan = planner.plan_host(
        {
            "host": "gpu-host",
            "model": {"name": "gpt-oss-120b", "path": str(repo / "models" / "gpt-oss-120b")},
            "layouts": [{"name": "tp1", "tp": 1}],
            "hardware": {
                "gpu_count": 1,
                "gpu_memory_gib": 79.18,
                "gpu_interconnect": "none",
                "gpu_name": "NVIDIA H100 80GB HBM3",
            },
            "serving": {"mem_fraction_static": 0.88, "context_length": 8192},
        }
    )
    ctx = {**CTX, "host": "gpu-host", "model": {"name": "gpt-oss-120b"}, "default_engine": "sglang"}
    previews = FilterModule().filters()["sglang_unit_previews"](
        plan["layouts"], "gpu-host", ctx, str(repo / "roles/sglang_service/templates"), {}
    )
    (text,) = previews.values()
    assert '"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"' in text
