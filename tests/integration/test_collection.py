"""The collection sglang.layouts as a user gets it: `make collection`'s tarball installed with
ansible-galaxy into a collections folder of its own, then a playbook and an inventory of the user's,
in a folder outside the repo, that call the roles, modules, filters and playbooks by FQCN: plan, a
sweep of two layouts on the simulated engine (process supervisor), the report. Nothing of the repo's
ansible.cfg, group_vars or plugin paths is in reach: the environment names no repo path."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml

from tests.helpers.net import free_port
from tests.helpers.playbook import REPO, SHORT_BENCH, VENV_BIN

USER_PLAYBOOK = """\
- name: Plan with the collection's role, keep it with its module
  hosts: sglang_hosts
  gather_facts: false
  tasks:
    - name: Plan every layout of the host
      ansible.builtin.include_role:
        name: sglang.layouts.sglang_plan

    - name: Show the plan
      ansible.builtin.debug:
        msg: "{{ sglang_plan | sglang.layouts.sglang_plan_table }}"

    - name: Keep the plan beside this playbook
      sglang.layouts.sglang_write_files:
        dest: "{{ playbook_dir }}/my-plan"
        files: "{{ {inventory_hostname ~ '.json': sglang_plan | to_nice_json} }}"
      delegate_to: localhost

- name: Sweep every layout
  ansible.builtin.import_playbook: sglang.layouts.sweep

- name: The report again, from the stored records
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Report of the run
      ansible.builtin.include_role:
        name: sglang.layouts.sglang_report
      vars:
        sglang_report_run_id: "{{ run_id }}"
        sglang_report_print: false

    - name: The run is the latest
      sglang.layouts.sglang_result:
        state: latest
        results_dir: "{{ sglang_report.dir | dirname }}"
        run_id: "{{ run_id }}"
"""


def _build(tmp: Path) -> Path:
    spec = importlib.util.spec_from_file_location("build_collection", REPO / "ci" / "build_collection.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    tree = build.assemble(tmp / "tree" / "ansible_collections" / "sglang" / "layouts")
    return build.build(tree, tmp / "dist")


def _env(site: Path) -> dict:
    """The user's environment: no ANSIBLE_* of the caller (make exports the repo's ansible.cfg)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(
        {
            "PATH": f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",
            "ANSIBLE_CONFIG": str(site / "ansible.cfg"),
            "ANSIBLE_FORCE_COLOR": "0",
            "ANSIBLE_HOME": str(site / ".ansible"),
        }
    )
    return env


def _run(cmd, site, timeout=600):
    proc = subprocess.run(
        cmd, cwd=site, env=_env(site), capture_output=True, text=True, timeout=timeout, check=False
    )
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))}:\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture
def site(tmp_path, run_dir):
    """The user's folder: ansible.cfg, inventory, the model's config.json, the playbook; the
    collection installed from the tarball into collections/."""
    site = tmp_path / "site"
    (site / "inventory").mkdir(parents=True)
    (site / "models" / "kimi-k2.6").mkdir(parents=True)
    (site / "ansible.cfg").write_text(
        "[defaults]\ncollections_path = ./collections\n"
        "stdout_callback = sglang.layouts.sglang_layouts\nretry_files_enabled = false\n"
        "callbacks_enabled = sglang.layouts.sglang_layouts_preload, sglang.layouts.sglang_layouts_bytecode\n"
    )
    (site / "models" / "kimi-k2.6" / "config.json").write_text(
        (REPO / "models" / "kimi-k2.6" / "config.json").read_text()
    )
    inventory = {
        "sglang_hosts": {
            "hosts": {
                "box": {
                    "ansible_connection": "local",
                    "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                    "gpu_count": 8,
                    "gpu_memory_gib": 94.97,
                    "gpu_interconnect": "pcie",
                }
            },
            "vars": {
                "sglang_engine": "sim",
                "sglang_service_manager": "process",
                "sglang_run_dir": str(run_dir),
                "sglang_model": {
                    "name": "kimi-k2.6",
                    "path": f"{run_dir}/models/kimi-k2.6",
                    "hf_config_file": "{{ inventory_dir }}/../models/kimi-k2.6/config.json",
                },
                "sglang_layouts": [{"name": "tp8", "tp": 8}, {"name": "ep8", "tp": 8, "ep": 8}],
                "sglang_base_port": free_port(),
                **SHORT_BENCH,
            },
        }
    }
    (site / "inventory" / "hosts.yml").write_text(yaml.safe_dump(inventory, sort_keys=False))
    (site / "site.yml").write_text(USER_PLAYBOOK)
    tarball = _build(tmp_path)
    assert tarball.name.startswith("sglang-layouts-") and tarball.is_file()
    _run([VENV_BIN / "ansible-galaxy", "collection", "install", tarball, "-p", "collections"], site)
    return site


def test_a_users_playbook_plans_sweeps_and_reports_with_the_installed_collection(site):
    installed = site / "collections" / "ansible_collections" / "sglang" / "layouts"
    assert (installed / "MANIFEST.json").is_file() and (installed / "plugins" / "modules").is_dir()

    # the collection's own playbook, by FQCN: the plan and the unit previews, in ./plan by default;
    # the enabled preload callback imports the library before the first task, and the bytecode
    # callback is on from the collection too
    proc = _run([VENV_BIN / "ansible-playbook", "-vvv", "-i", "inventory", "sglang.layouts.plan"], site)
    assert "sglang_layouts_preload: the library is imported" in proc.stdout, proc.stdout[-3000:]
    assert "sglang_layouts_bytecode: module payloads carry their Python compiled" in proc.stdout
    plan = json.loads((site / "plan" / "box.json").read_text())
    assert {e["name"]: e["verdict"] for e in plan["layouts"]} == {"tp8": "fits", "ep8": "fits"}
    assert sorted(p.name for p in (site / "plan" / "box").glob("*.service")) == [
        "sglang-kimi-k2-6-ep8.service",
        "sglang-kimi-k2-6-tp8.service",
    ]

    # provision by FQCN: a host of the simulated engine needs none of it and says so
    out = _run([VENV_BIN / "ansible-playbook", "-i", "inventory", "sglang.layouts.provision"], site).stdout
    assert "sglang_engine is sim: nothing to provision" in out

    run_id = f"coll-{uuid.uuid4().hex[:8]}"
    proc = _run(
        [VENV_BIN / "ansible-playbook", "-i", "inventory", "site.yml", "-e", f"run_id={run_id}"], site
    )
    assert "ep8" in proc.stdout and "tp8" in proc.stdout
    # the user's own task wrote the plan with the collection's module
    assert json.loads((site / "my-plan" / "box.json").read_text())["inputs_digest"] == plan["inputs_digest"]
    # the records and the report, in ./results (no sglang_results_dir given)
    run = site / "results" / run_id
    records = {p.stem: json.loads(p.read_text()) for p in (run / "box").glob("*.json")}
    assert sorted(records) == ["ep8", "tp8"]
    for name, rec in records.items():
        assert rec["status"] == "ok" and rec["simulated"] is True, (name, rec.get("failure"))
        assert rec["summary"]["single_request_tok_s"] > 0
        assert [lv["concurrency"] for lv in rec["levels"]] == [1, 4]
    summary = json.loads((run / "summary.json").read_text())
    assert sorted(row["layout"] for row in summary["rows"]) == ["ep8", "tp8"]
    assert "ep8" in (run / "REPORT.md").read_text()
    assert (site / "results" / "latest").resolve() == run.resolve()
    # nothing went to the repo's own folders
    assert not (REPO / "results" / run_id).exists()
