"""cache_plugins/sglang_facts.py under ansible-core: a fact set by one run is read by the next, from
jsonfile's own files (readable by jsonfile itself), and a host's file is decoded once per run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = Path(sys.executable).with_name("ansible-playbook")

pytestmark = pytest.mark.skipif(
    not PLAYBOOK.exists(), reason="ansible-core is not installed beside this python"
)

WRITE = """
- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.set_fact:
        cacheable: true
        handed_over: {run: first, sizes: [1, 2, 3]}
"""
READ = """
- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.assert:
        that: handed_over.run == 'first' and handed_over.sizes | sum == 6
"""


def _play(tmp_path, text, plugin):
    book = tmp_path / ("write.yml" if text is WRITE else "read.yml")
    book.write_text(text)
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_CACHE_PLUGIN=plugin,
        ANSIBLE_CACHE_PLUGIN_CONNECTION=str(tmp_path / "facts"),
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"),
    )
    cmd = [str(PLAYBOOK), "-i", "localhost,", "-c", "local", str(book)]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


def test_facts_hand_over_between_runs_in_jsonfiles_own_files(tmp_path):
    assert _play(tmp_path, WRITE, "sglang_facts").returncode == 0
    # the file is jsonfile's: a run with jsonfile itself reads it, and this plugin reads jsonfile's
    read = _play(tmp_path, READ, "jsonfile")
    assert read.returncode == 0, read.stdout[-2000:]
    again = _play(tmp_path, READ, "sglang_facts")
    assert again.returncode == 0, again.stdout[-2000:]
    (tmp_path / "other").mkdir()
    missing = _play(tmp_path / "other", READ, "sglang_facts")
    assert missing.returncode != 0 and "handed_over" in missing.stdout


def test_a_hosts_file_is_decoded_once_and_writes_go_through(tmp_path, monkeypatch):
    monkeypatch.setenv("ANSIBLE_CONFIG", str(REPO / "ansible.cfg"))
    monkeypatch.setenv("ANSIBLE_CACHE_PLUGIN_CONNECTION", str(tmp_path / "facts"))
    monkeypatch.chdir(REPO)
    from ansible.plugins.loader import cache_loader, init_plugin_loader

    init_plugin_loader()
    files = cache_loader.get("ansible.builtin.jsonfile")
    files.set("h", {"a": 1})
    cache = cache_loader.get("sglang_facts")
    reads = []
    real_get = cache._files.get
    monkeypatch.setattr(cache._files, "get", lambda key: reads.append(key) or real_get(key))
    first = cache.get("h")
    assert first == {"a": 1} and cache.get("h") is first and reads == ["h"]
    first["b"] = 2  # what Ansible does with a host's facts before it sets them back
    cache.set("h", first)
    assert cache_loader.get("ansible.builtin.jsonfile").get("h") == {"a": 1, "b": 2}
    assert cache.contains("h")
    cache.delete("h")
    assert not cache.contains("h")
    with pytest.raises(KeyError):
        cache.get("h")
