"""plan.yml and the shared group_vars, through ansible-runner on the real inventories."""

import json
import os
import sys

import pytest
import yaml

from tests.helpers.playbook import REPO, failed_messages
from tests.helpers.procs import run_captured

INVENTORIES = sorted(p.name for p in (REPO / "inventory").iterdir() if (p / "hosts.yml").exists())
SHARED = yaml.safe_load((REPO / "group_vars" / "all" / "engine.yml").read_text())


def debug_msg(runner, task):
    for ev in runner.events:
        if ev.get("event") == "runner_on_ok" and ev["event_data"].get("task") == task:
            return ev["event_data"]["res"]["msg"]
    raise AssertionError(f"no output from task {task!r}")


def _site_vars(inventory):
    path = REPO / "inventory" / inventory / "group_vars" / "sglang_hosts.yml"
    return yaml.safe_load(path.read_text()) if path.exists() else {}


@pytest.mark.parametrize("inventory", INVENTORIES)
def test_shared_group_vars_load_for_every_inventory(run_playbook, inventory):
    # inventory/gpu leaves the hardware to gpu_facts: give it here, as the facts would
    hosts = yaml.safe_load((REPO / "inventory" / inventory / "hosts.yml").read_text())["sglang_hosts"][
        "hosts"
    ]
    known = all("gpu_count" in (h or {}) for h in hosts.values())
    hardware = {} if known else {"gpu_count": 1, "gpu_memory_gib": 139.8, "gpu_interconnect": "nvlink"}
    r = run_playbook("vars.yml", inventory=f"inventory/{inventory}", extravars=hardware)
    assert r.status == "successful", failed_messages(r)
    msg = debug_msg(r, "Effective sglang-layouts variables")
    # the release: the site's own pin where it has one, else the repo's group_vars/all/engine.yml
    assert msg["sglang_version"] == _site_vars(inventory).get("sglang_version", SHARED["sglang_version"])
    # defined only in the repo's top-level group_vars/all/serving.yml
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
    # nothing in the inventory folder that Ansible cannot read as inventory, no other warning
    warnings = [ln for ln in r.stdout.read().splitlines() if "[WARNING]" in ln]
    assert not warnings, warnings
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


@pytest.mark.parametrize("version", ["0.5.16", "0.5.23"])
def test_extra_var_sglang_version_picks_that_releases_flag_table(run_playbook, tmp_path, version):
    # --torchao-config exists in SGLang 0.5.16's parser and not in 0.5.23's
    layouts = [{"name": "ep8", "tp": 8, "ep": 8, "args": {"torchao_config": "int8wo"}}]
    out = tmp_path / "plan"
    r = run_playbook(
        "plan.yml",
        extravars={"sglang_plan_dir": str(out), "sglang_version": version, "sglang_layouts": layouts},
    )
    if version == "0.5.23":
        assert r.status == "failed"
        assert any("SGLang 0.5.23 has no flag --torchao-config" in m for m in failed_messages(r))
        return
    assert r.status == "successful", failed_messages(r)
    doc = json.loads((out / "seed-box.json").read_text())
    assert doc["sglang_version"] == "0.5.16"
    assert "--torchao-config" in doc["layouts"][0]["flags"]


def test_a_release_without_a_flag_table_is_refused_with_the_command(run_playbook, tmp_path):
    r = run_playbook(
        "plan.yml", extravars={"sglang_plan_dir": str(tmp_path / "p"), "sglang_version": "0.5.17"}
    )
    assert r.status == "failed"
    assert any("`make flags SGLANG_VERSION=0.5.17`" in m for m in failed_messages(r)), failed_messages(r)
    assert not (tmp_path / "p").exists()


TORCH_PIN_PLAY = """
- name: The torch pin sglang_venv derives from sglang_version
  hosts: localhost
  gather_facts: false
  vars_files:
    - {repo}/group_vars/all/engine.yml
    - {repo}/roles/sglang_venv/defaults/main.yml
  tasks:
    - name: Torch pin
      ansible.builtin.debug:
        msg: "{{{{ sglang_venv_torch_version }}}}"
"""


@pytest.mark.parametrize("version", ["0.5.16", "0.5.23", None])
def test_the_torch_pin_follows_sglang_version(run_playbook, tmp_path, version):
    play = tmp_path / "torch_pin.yml"
    play.write_text(TORCH_PIN_PLAY.format(repo=REPO))
    r = run_playbook(
        str(play), inventory="localhost,", extravars={"sglang_version": version} if version else {}
    )
    assert r.status == "successful", failed_messages(r)
    # the torch== each release's wheel pins; without -e, the pin's
    torch = {"0.5.16": "2.11.0", "0.5.23": "2.14.1"}.get(version) or SHARED["sglang_torch_pins"][
        SHARED["sglang_version"]
    ]
    assert debug_msg(r, "Torch pin") == torch


def test_a_release_without_a_torch_pin_is_a_clear_error(run_playbook, tmp_path):
    play = tmp_path / "torch_pin.yml"
    play.write_text(TORCH_PIN_PLAY.format(repo=REPO))
    r = run_playbook(str(play), inventory="localhost,", extravars={"sglang_version": "0.5.17"})
    assert r.status == "failed"
    assert any("SGLang 0.5.17 has no torch pin in sglang_torch_pins" in m for m in failed_messages(r))


def test_every_bad_input_is_refused_by_plan_yml_in_one_run(run_playbook, tmp_path):
    """The bad-input matrix (tests/bad_inputs.py) through plan.yml: one inventory host per case, one run.
    A refused host gets a message naming the layout and the key, and no plan JSON or unit is written
    for it; a sanitised one gets units and a plan with *** for the secret, its value in neither."""
    from bad_inputs import CASES, SECRET, materialise

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
            # the planner's sentence alone (no filter-error cause chain), never the secret
            assert len(failed[case.id].splitlines()) <= 2 and SECRET not in failed[case.id], failed[case.id]
            assert not (out / f"{case.id}.json").exists() and not (out / case.id).exists(), case.id
            continue
        assert case.id not in failed, f"{case.id}: {failed.get(case.id)}"
        doc = json.loads((out / f"{case.id}.json").read_text())
        units = {p.name: p.read_text() for p in (out / case.id).glob("*.service")}
        assert SECRET not in (out / f"{case.id}.json").read_text()
        assert not any(SECRET in text for text in units.values()), case.id
        if case.expect == "accepted":
            assert units, case.id
            continue
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


def test_a_refusal_is_printed_once_on_the_console(tmp_path):
    """ansible-playbook as a user runs it (the repo's ansible.cfg and its stdout callback): the
    sentence that says what to write instead appears once, without Ansible's error block around it."""
    bad = tmp_path / "bad.yml"
    bad.write_text(yaml.safe_dump({"sglang_layouts": [{"name": "all", "tp": 8}]}))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_FORCE_COLOR": "0"}
    env.pop("ANSIBLE_STDOUT_CALLBACK", None)
    argv = [
        os.path.join(os.path.dirname(sys.executable), "ansible-playbook"),
        "playbooks/plan.yml",
        *("-e", f"@{bad}", "-e", f"sglang_plan_dir={tmp_path / 'plan'}"),
    ]
    proc = run_captured(argv, env, timeout=300, cwd=REPO)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert out.count("name is reserved") == 1, out
    assert "[ERROR]" not in out and "Origin:" not in out, out
    assert not (tmp_path / "plan").exists()
