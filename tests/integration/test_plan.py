"""plan.yml and the shared group_vars, through ansible-runner on the real inventories."""

import json

import pytest
import yaml
from conftest import REPO, failed_messages

INVENTORIES = sorted(p.name for p in (REPO / "inventory").iterdir() if (p / "hosts.yml").exists())
SHARED = yaml.safe_load((REPO / "group_vars" / "all" / "engine.yml").read_text())


def debug_msg(runner, task):
    for ev in runner.events:
        if ev.get("event") == "runner_on_ok" and ev["event_data"].get("task") == task:
            return ev["event_data"]["res"]["msg"]
    raise AssertionError(f"no output from task {task!r}")


@pytest.mark.parametrize("inventory", INVENTORIES)
def test_shared_group_vars_load_for_every_inventory(run_playbook, inventory):
    r = run_playbook("vars.yml", inventory=f"inventory/{inventory}")
    assert r.status == "successful", failed_messages(r)
    msg = debug_msg(r, "Effective sglang-layouts variables")
    # defined only in the repo's top-level group_vars/all/engine.yml
    assert msg["sglang_version"] == SHARED["sglang_version"]
    assert msg["serving"]["mem_fraction_static"] == 0.88


def test_inventory_and_extra_vars_win_over_shared_defaults(run_playbook):
    r = run_playbook("vars.yml", extravars={"sglang_mem_fraction_static": 0.9, "gpu_count": 4})
    assert r.status == "successful", failed_messages(r)
    msg = debug_msg(r, "Effective sglang-layouts variables")
    assert msg["sglang_engine"] == "sim"  # inventory/demo's group_vars beat group_vars/all
    assert msg["serving"]["mem_fraction_static"] == 0.9  # -e beats everything
    assert msg["hardware"]["gpu_count"] == 4


def test_plan_writes_json_and_says_why(run_playbook, tmp_path):
    out = tmp_path / "plan"
    r = run_playbook("plan.yml", extravars={"sglang_plan_dir": str(out)})
    assert r.status == "successful", failed_messages(r)
    doc = json.loads((out / "seed-box.json").read_text())
    verdicts = {e["name"]: e["verdict"] for e in doc["layouts"]}
    assert verdicts["tp4ep2"] == "oom" and verdicts["tp2ep4"] == "invalid" and verdicts["ep8"] == "fits"
    assert doc["mode"] == "config" and doc["model"]["name"] == "kimi-k2.6"
    for e in doc["layouts"]:
        for key in (
            "name",
            "gpus_used",
            "verdict",
            "weights_gib_per_gpu",
            "budget_gib",
            "kv_tokens",
            "reasons",
            "argv",
            "env",
        ):
            assert key in e
    table = debug_msg(r, "Show the plan")
    assert "tp4ep2" in table and "uses 4 of the 8 GPUs" in table
    units = sorted(p.name for p in (out / "seed-box").glob("*.service"))
    assert "sglang-kimi-k2-6-ep8.service" in units
    assert "sglang-kimi-k2-6-tp2ep4.service" not in units  # invalid layouts get no unit
    unit = (out / "seed-box" / "sglang-kimi-k2-6-ep8.service").read_text()
    assert "--ep-size 8" in unit.replace("\\\n", " ").replace("  ", " ") or "--ep-size" in unit


def test_plan_refuses_bad_input_before_anything(run_playbook, tmp_path):
    r = run_playbook(
        "plan.yml",
        extravars={
            "sglang_plan_dir": str(tmp_path / "p"),
            "sglang_layouts": [{"name": "x", "tp": 8, "tpp": 2}],
        },
    )
    assert r.status == "failed"
    assert any("unknown key(s) tpp" in m for m in failed_messages(r))
    assert not (tmp_path / "p").exists()


def test_every_bad_input_is_refused_by_plan_yml_in_one_run(run_playbook, tmp_path):
    """The bad-input matrix (tests/bad_inputs.py) through plan.yml: one inventory host per case, one run.
    A refused host gets a message naming the layout and the key, and no plan JSON or unit is written
    for it; a sanitised one gets units and a plan with *** for the secret, its value in neither."""
    from bad_inputs import CASES, materialise

    cases = [c for c in CASES if c.plan_yml]
    inv = tmp_path / "inv"
    (inv / "group_vars").mkdir(parents=True)
    (inv / "group_vars" / "sglang_hosts.yml").write_text(
        yaml.safe_dump(
            {
                "sglang_model": {"name": "kimi-k2.6", "path": str(REPO / "models" / "kimi-k2.6")},
                "sglang_engine": "sim",
                "sglang_service_manager": "process",
                "sglang_run_dir": str(tmp_path / "run"),
                "sglang_layouts": [{"name": "tp8", "tp": 8}],
            }
        )
    )
    hosts = {}
    for case in cases:
        folder = tmp_path / "files" / case.id
        folder.mkdir(parents=True)
        hosts[case.id] = {
            "ansible_connection": "local",
            "ansible_python_interpreter": "{{ ansible_playbook_python }}",
            "gpu_count": 8,
            "gpu_memory_gib": 94.97,
            "gpu_interconnect": "pcie",
            **materialise(case, folder, REPO),
        }
    (inv / "hosts.yml").write_text(yaml.safe_dump({"sglang_hosts": {"hosts": hosts}}))
    out = tmp_path / "plan"
    r = run_playbook("plan.yml", inventory=str(inv / "hosts.yml"), extravars={"sglang_plan_dir": str(out)})
    failed = {}
    for ev in r.events:
        if ev.get("event") == "runner_on_failed":
            failed[ev["event_data"]["host"]] = str(ev["event_data"]["res"].get("msg"))
    for case in cases:
        if case.expect == "error":
            assert case.id in failed, f"{case.id}: plan.yml did not refuse it"
            for needle in case.needles:
                assert needle in failed[case.id], f"{case.id}: {failed[case.id]}"
            assert not (out / f"{case.id}.json").exists() and not (out / case.id).exists(), case.id
            continue
        assert case.id not in failed, f"{case.id}: {failed.get(case.id)}"
        doc = json.loads((out / f"{case.id}.json").read_text())
        units = {p.name: p.read_text() for p in (out / case.id).glob("*.service")}
        if case.expect == "invalid":
            bad = [e["unit_name"] for e in doc["layouts"] if e["verdict"] == "invalid"]
            assert bad and not set(bad) & set(units), case.id  # invalid layouts get no unit
        else:
            name, value = case.check["masked"], case.check["absent"]
            assert value not in (out / f"{case.id}.json").read_text()
            assert doc["layouts"][0]["env"][name] == "***"
            (unit,) = units.values()
            assert value not in unit and f'Environment="{name}=' not in unit
            assert "EnvironmentFile=/etc/sglang/sglang-kimi-k2-6-tp8.env" in unit
