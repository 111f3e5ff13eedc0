"""A 2-node layout through the real playbooks on this machine: two inventory hosts (both local,
process supervisor, simulated engine, each with its own run directory and API port) stand for two
nodes; rank 0's address is 127.0.0.1 and the rendezvous port a free one.

- sweep.yml: tp16-2n runs on both hosts at once (linear play), is benchmarked on node rank 0,
  checked on both, stopped on both; one record, under node rank 0.
- deploy.yml with node rank 1's API port taken: node rank 1's preflight refuses, and the barrier
  fails both nodes before anything starts (the failure names node-b and its class).
"""

import json
import shutil
import sys
from pathlib import Path

import pytest

from tests.helpers.net import free_port, listening
from tests.helpers.playbook import REPO, failed_messages, local_nodes, run_playbook

UNIT = "sglang-kimi-k2-6-tp16-2n.service"

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the supervisor reads /proc")


@pytest.fixture(scope="module")
def env():
    common = {
        "sglang_engine": "sim",
        "sglang_service_manager": "process",
        "sglang_model": {"name": "kimi-k2.6", "path": str(REPO / "models" / "kimi-k2.6")},
        "sglang_dist_init_port": free_port(),
        "sglang_layouts": [
            {
                "name": "tp16-2n",
                "tp": 16,
                "nnodes": 2,
                "env": {
                    # the nodes start as ansible reaches them: the rendezvous waits as long as torch's
                    # default, so a busy host never decides it (the health gate's ceiling comes first)
                    "SGLANG_SIM_DIST_TIMEOUT": "600",
                    "SGLANG_SIM_NCCL_TIMEOUT_SECONDS": "5",
                },
            }
        ],
        "sglang_service_health_timeout": 120,
        "sglang_bench_concurrency": [1, 4],
        "sglang_bench_input_len": 32,
        "sglang_bench_output_len": 8,
        "sglang_bench_prompts_per_stream": 1,
        "sglang_bench_min_prompts": 4,
        "sglang_report_plots": False,
    }
    root, inventory, hosts = local_nodes("sglang-mn-it-", common)
    yield {"inventory": inventory, "root": root, "hosts": hosts}
    run(inventory, "stop.yml")
    shutil.rmtree(root, ignore_errors=True)


def run(inventory, playbook, **extra):
    # extra vars: the controller's plays (run id, report) read the results directory too
    root = Path(inventory).parent
    extra = {"sglang_results_dir": str(root / "results"), **extra}
    return run_playbook(playbook, root / "runner", inventory=str(inventory), extravars=extra)


def pids(root):
    return sorted(str(p.relative_to(root)) for p in Path(root).glob("node-*/*.pid"))


def test_sweep_runs_the_two_nodes_together(env):
    r = run(env["inventory"], "sweep.yml", run_id="mn-it")
    assert r.rc == 0, failed_messages(r)
    records = sorted(
        p.relative_to(env["root"] / "results" / "mn-it")
        for p in (env["root"] / "results" / "mn-it").rglob("*.json")
        if p.name != "summary.json"
    )
    assert [str(p) for p in records] == ["node-a/tp16-2n.json"], records
    record = json.loads((env["root"] / "results" / "mn-it" / "node-a" / "tp16-2n.json").read_text())
    assert record["status"] == "ok", record.get("msg")
    assert pids(env["root"]) == [], "the sweep stops both nodes"


def test_a_refused_node_fails_both_before_any_start(env):
    port_b = env["hosts"]["node-b"]["sglang_base_port"]
    with listening(port_b):
        r = run(env["inventory"], "deploy.yml", layout="tp16-2n")
    assert r.rc != 0
    msgs = failed_messages(r)
    barrier = [m for m in msgs if "Every node of the layout passed preflight" in m]
    assert {m.split(":")[0] for m in barrier} == {"node-a", "node-b"}, msgs
    assert all("refused on node-b" in m and f"port {port_b}" in m for m in barrier), barrier
    assert pids(env["root"]) == [], "no node started"


def test_sweep_records_a_failed_node_with_its_class_and_host(env):
    port_b = env["hosts"]["node-b"]["sglang_base_port"]
    with listening(port_b):
        r = run(env["inventory"], "sweep.yml", run_id="mn-it-failed")
    # the one layout failed: a sweep that measured nothing exits non-zero, after storing its record
    assert r.rc != 0 and any("could be measured" in f for f in failed_messages(r)), failed_messages(r)
    folder = env["root"] / "results" / "mn-it-failed"
    assert not (folder / "node-b").exists(), "one record per layout, under node rank 0"
    record = json.loads((folder / "node-a" / "tp16-2n.json").read_text())
    assert record["status"] == "failed"
    assert record["failure_class"] == "refused"
    assert record["evidence"]["host"] == "node-b"
    assert [n["host"] for n in record["evidence"]["nodes"]] == ["node-b"]
    assert pids(env["root"]) == []
