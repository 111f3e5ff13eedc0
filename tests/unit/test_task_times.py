"""callback_plugins/task_times.py through a real ansible-playbook run on this machine."""

import json
import os
import sys

import pytest

from tests.helpers.playbook import REPO, VENV_BIN
from tests.helpers.procs import run_captured

pytestmark = pytest.mark.skipif(
    not (VENV_BIN / "ansible-playbook").exists(), reason="ansible-core is not installed in .venv"
)

PLAYBOOK = """
- name: Two tasks
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Sleep a little
      ansible.builtin.command: sleep 0.3
      changed_when: false
    - name: Loop twice
      ansible.builtin.debug:
        msg: "{{ item }}"
      loop: [1, 2]
"""


def test_each_task_is_written_with_its_seconds_and_summed_at_the_end(tmp_path):
    book = tmp_path / "book.yml"
    book.write_text(PLAYBOOK)
    out = tmp_path / "times.jsonl"
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_CALLBACKS_ENABLED": "task_times",
        "SGLANG_LAYOUTS_TASK_TIMES": str(out),
        "ANSIBLE_LOCALHOST_WARNING": "false",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false",
    }
    argv = [
        str(VENV_BIN / "ansible-playbook"),
        *("-i", "localhost,", "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}"),
        str(book),
    ]
    proc = run_captured(argv, env, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["task"], r["action"]) for r in rows] == [
        ("Sleep a little", "ansible.builtin.command"),
        ("Loop twice", "ansible.builtin.debug"),
    ]
    assert rows[0]["seconds"] >= 0.3 and all(r["play"] == "Two tasks" for r in rows)
    assert "task_times: " in proc.stdout and "x1   Sleep a little" in proc.stdout, proc.stdout
