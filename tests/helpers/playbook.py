"""The one way tests run a playbook: ansible-runner over the real repo, as CI and users run it.

`run_playbook` runs a playbook of playbooks/ (or a path) against an inventory of inventory/
(or a path) with private_data_dir as ansible-runner's folder (its artifacts, and a fact cache
of the run's own), and returns the Runner: .status, .rc, .stats, .events, .stdout; its fact
cache folder is `fact_cache_dir(runner)`, a host's facts `cached_facts(runner, host)`.

A test that needs the ansible-playbook process itself (to send it SIGINT, or to tell its
stdout from its stderr, which ansible-runner's pty merges) starts `playbook_command(...)`
with `ansible_env()`, the same command line and environment.
"""

from __future__ import annotations

import json
import os
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import ansible_runner

from tests.helpers.demo import SEED_BOX
from tests.helpers.net import free_port

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = REPO / ".venv" / "bin"

# Extra vars of a benchmark small enough for a test but real: two concurrency levels, short requests.
SHORT_BENCH = {
    "sglang_bench_concurrency": [1, 4],
    "sglang_bench_input_len": 32,
    "sglang_bench_output_len": 8,
    "sglang_bench_prompts_per_stream": 2,
    "sglang_bench_min_prompts": 3,
}


def local_nodes(prefix: str, common: dict, names=("node-a", "node-b")) -> tuple[Path, Path, dict]:
    """Inventory hosts that stand for the nodes of a multi-node layout on this machine: each local with
    the seed box's GPUs, its own run folder root/<name> and API port, then `common` (host variables:
    they outrank the collection's group_vars/all, group vars of an inventory file do not).
    Returns (root, its hosts.yml, the host variables by name); the caller removes root."""
    # Not under pytest's 0700 tmp dir: as root the engines run as the service user, which must reach it.
    root = Path(tempfile.mkdtemp(prefix=prefix))
    os.chmod(root, 0o755)
    hosts = {}
    for name in names:
        run_dir = root / name
        run_dir.mkdir()
        os.chmod(run_dir, 0o755)
        hosts[name] = {
            "ansible_connection": "local",
            "ansible_host": "127.0.0.1",
            "ansible_python_interpreter": "{{ ansible_playbook_python }}",
            **SEED_BOX,
            "sglang_run_dir": str(run_dir),
            "sglang_base_port": free_port(),
            **common,
        }
    inventory = root / "hosts.yml"
    inventory.write_text(json.dumps({"sglang_hosts": {"hosts": hosts}}))
    return root, inventory, hosts


# tests/plugins/callback: ansiballz_shared_cache, one module payload build per test session
CALLBACK_PLUGINS = os.pathsep.join(
    [str(REPO / "callback_plugins"), str(REPO / "tests" / "plugins" / "callback")]
)


def ansible_env() -> dict:
    return {
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_ROLES_PATH": str(REPO / "roles"),
        "ANSIBLE_LIBRARY": str(REPO / "library"),
        "ANSIBLE_MODULE_UTILS": str(REPO / "module_utils"),
        "ANSIBLE_FILTER_PLUGINS": str(REPO / "filter_plugins"),
        "ANSIBLE_ACTION_PLUGINS": str(REPO / "action_plugins"),
        # ansible-runner sets this variable (its own stdout callback), which hides ansible.cfg's
        # callback_plugins: named here, the preload callback loads under the runner too
        "ANSIBLE_CALLBACK_PLUGINS": CALLBACK_PLUGINS,
        "ANSIBLE_CACHE_PLUGINS": str(REPO / "cache_plugins"),
        "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".venv" / "collections"),
        "ANSIBLE_FORCE_COLOR": "0",
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    }


def _paths(playbook: str, inventory: str) -> tuple[str, str]:
    return (
        playbook if os.path.isabs(playbook) else str(REPO / "playbooks" / playbook),
        inventory if os.path.isabs(inventory) else str(REPO / inventory),
    )


def playbook_command(
    playbook: str, inventory: str = "inventory/demo", extravars: dict | None = None
) -> list[str]:
    play, inv = _paths(playbook, inventory)
    return [str(VENV_BIN / "ansible-playbook"), "-i", inv, play, "-e", json.dumps(extravars or {})]


def run_playbook(
    playbook: str,
    private_data_dir,
    inventory: str = "inventory/demo",
    extravars: dict | None = None,
    envvars: dict | None = None,
    timeout: int | None = None,
    **kw,
):
    pdd = Path(private_data_dir)
    pdd.mkdir(parents=True, exist_ok=True)
    play, inv = _paths(playbook, inventory)
    ident = kw.pop("ident", None) or uuid.uuid4().hex
    return ansible_runner.run(
        private_data_dir=str(pdd),
        project_dir=str(REPO),
        playbook=play,
        inventory=inv,
        extravars=extravars or {},
        # The fact cache of ansible.cfg (sglang_facts: jsonfile's files, decoded once per run), in the
        # folder where ansible-runner keeps a run's facts. Left to its default, ansible-runner would
        # force ansible.builtin.jsonfile, and the tests would run a cache that users do not.
        ident=ident,
        fact_cache_type="sglang_facts",
        envvars={
            **ansible_env(),
            "ANSIBLE_CACHE_PLUGIN": "sglang_facts",
            "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(pdd / "artifacts" / ident / "fact_cache"),
            **(envvars or {}),
        },
        quiet=True,
        timeout=timeout,  # None: pytest's own timeout (pytest.ini) bounds the run
        # ansible-runner otherwise writes the first run's extra vars and environment into
        # private_data_dir/env/ and passes them to every later run in that folder
        suppress_env_files=True,
        **kw,
    )


def fact_cache_dir(runner) -> Path:
    """The folder of a run's fact cache (one file per host, as ansible.builtin.jsonfile writes it)."""
    return Path(runner.config.artifact_dir) / "fact_cache"


def cached_facts(runner, host: str) -> dict:
    """A host's facts as the run left them in its fact cache, decoded as Ansible's cache decodes them
    (ansible-core 2.19 stores fact_cache/s1_<host> = {"__payload__": <tagged JSON>})."""
    from ansible._internal._json._profiles import _cache_persistence

    path = fact_cache_dir(runner) / f"s{_cache_persistence._Profile.schema_id}_{host}"
    return json.loads(json.loads(path.read_text())["__payload__"], cls=_cache_persistence.Decoder)


def task_results(runner, name_part: str) -> Iterator[dict]:
    """The result of every host that ran (ok or failed) a task whose name contains name_part; a task
    that loops (over a layout's units) gives each item's result."""
    for ev in runner.events:
        if ev.get("event") in ("runner_on_ok", "runner_on_failed"):
            data = ev["event_data"]
            if name_part in str(data.get("task", "")):
                res = data.get("res", {})
                yield from res.get("results") or [res]


def failed_messages(runner) -> list[str]:
    """`host: task: msg` of every failed task, for assertions and their messages."""
    out = []
    for ev in runner.events:
        if ev.get("event") == "runner_on_failed":
            data = ev["event_data"]
            res = data.get("res", {})
            for item in [i for i in res.get("results") or [] if i.get("failed")] or [res]:
                out.append(f"{data.get('host')}: {data.get('task')}: {item.get('msg')}")
    return out


def changed_count(runner) -> int:
    """How many task results reported a change, over every host of the run."""
    return sum((runner.stats or {}).get("changed", {}).values())
