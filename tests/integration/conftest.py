"""Drive playbooks the way CI and users do: ansible-runner over the real repo.

`run_playbook` runs one playbook of playbooks/ against an inventory of
inventory/ (or a given path) in a private copy of the runner's private_data_dir,
and returns the Runner: its .status, .rc, .events and .get_fact_cache(host).
"""

from __future__ import annotations

import os
from pathlib import Path

import ansible_runner
import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def run_playbook(tmp_path):
    def run(playbook: str, inventory: str = "inventory/demo", extravars: dict | None = None, **kw):
        env = {
            "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
            "ANSIBLE_ROLES_PATH": str(REPO / "roles"),
            "ANSIBLE_LIBRARY": str(REPO / "library"),
            "ANSIBLE_MODULE_UTILS": str(REPO / "module_utils"),
            "ANSIBLE_FILTER_PLUGINS": str(REPO / "filter_plugins"),
            "ANSIBLE_ACTION_PLUGINS": str(REPO / "action_plugins"),
            "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".venv" / "collections"),
            "ANSIBLE_FORCE_COLOR": "0",
            "PATH": str(REPO / ".venv" / "bin") + os.pathsep + os.environ.get("PATH", ""),
        }
        env.update(kw.pop("envvars", {}))
        inv = inventory if os.path.isabs(inventory) else str(REPO / inventory)
        pdd = tmp_path / "runner"
        pdd.mkdir(exist_ok=True)
        return ansible_runner.run(
            private_data_dir=str(pdd),
            project_dir=str(REPO),
            playbook=str(REPO / "playbooks" / playbook),
            inventory=inv,
            extravars=extravars or {},
            envvars=env,
            quiet=True,
            **kw,
        )

    return run


def failed_messages(runner) -> list[str]:
    """The msg of every failed task event, for assertion messages."""
    out = []
    for ev in runner.events:
        if ev.get("event") == "runner_on_failed":
            res = ev["event_data"].get("res", {})
            out.append(f"{ev['event_data'].get('task')}: {res.get('msg')}")
    return out
