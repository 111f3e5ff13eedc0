"""The library the filters call is imported once, in the controller's main process (issue 32: the
import in every forked worker was a fifth of plan.yml's CPU)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers.playbook import VENV_BIN, ansible_env


def test_preload_imports_every_library_module_the_filters_name(repo):
    code = f"""
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("f", {str(repo / "filter_plugins" / "sglang_layouts.py")!r})
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
before = sorted(m for m in sys.modules if m.startswith("sglang_layouts."))
mod.preload_library()
named = {{n.rsplit(".", 1)[0] for face in mod._FACES.values() for n in face if isinstance(n, str)}}
print(json.dumps({{"before": before, "missing": sorted(n for n in named if "sglang_layouts." + n not in sys.modules),
                  "named": len(named)}}))
"""
    out = json.loads(
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    )
    # loading the plugin imports nothing of the library; preloading imports every module a filter names
    assert out["before"] == [] and out["missing"] == [] and out["named"] > 10


def test_the_callback_preloads_before_the_first_task(repo, tmp_path):
    play = tmp_path / "play.yml"
    play.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.debug:\n        msg: \"{{ {'a': 1} | sglang_plan_digest }}\"\n"
    )
    r = subprocess.run(
        [str(VENV_BIN / "ansible-playbook"), "-vvv", "-i", "localhost,", "-c", "local", str(play)],
        capture_output=True,
        text=True,
        env={**ansible_env(), "ANSIBLE_STDOUT_CALLBACK": "default"},
        cwd=repo,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    # loaded though no configuration enables it, and before the task that uses a filter
    preloaded = r.stdout.find("sglang_layouts_preload: the library is imported")
    assert 0 <= preloaded < r.stdout.find("TASK [ansible.builtin.debug]")
