"""A pd layout (prefill/decode disaggregation) deployed by the real playbooks on this machine.

The demo inventory (process supervisor, simulated engine, 8 simulated GPUs of 192 GiB) with one
layout {name: pd44, pd: {prefill: {tp: 4}, decode: {tp: 4}}}: deploy.yml starts the prefill server
(GPUs 0-3, base+1, its bootstrap port), the decode server (GPUs 4-7, base+2) and sglang-router
--pd-disaggregation on the base port; each server is gated on its own, the router by /workers and
one request end to end. bench.yml measures through the router; stop.yml stops the router, then
the servers. The sweep measures and records it like any other layout, and the report lists it.
A prefill server whose KV transfers fail (the simulator's fault) fails the router's end-to-end
request with the class kv_transfer_failed.

The router is the real sglang-router from PyPI (ci/router.sh), as in test_replicas.py.
"""

import json
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.helpers import router
from tests.helpers.net import free_port
from tests.helpers.playbook import failed_messages, task_results
from tests.helpers.router import assert_stopped, get_json, pid_of, run

LAYOUT = "pd44"
UNITS = router.unit_names(LAYOUT, router="router", prefill="prefill0", decode="decode0")

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the supervisor reads /proc")


def free_ports():
    """A base port P with P+1, P+2 (servers) and P+1000 (the router's Prometheus listener) free,
    and a free bootstrap port."""
    base = router.free_base_port()
    # the OS may hand out a port of the block just checked (they were bound, then let go)
    for _ in range(50):
        bootstrap = free_port()
        if bootstrap not in (base, base + 1, base + 2, base + 1000):
            return base, bootstrap
    pytest.fail("no free bootstrap port")


def layout(bootstrap: int, name: str = LAYOUT, prefill_env: dict | None = None) -> dict:
    return {
        "name": name,
        "pd": {
            "prefill": {"tp": 4, "bootstrap_port": bootstrap, "env": prefill_env or {}},
            # a fraction of its own, so that the decode server's KV pool is not the prefill server's
            "decode": {"tp": 4, "args": {"mem_fraction_static": 0.8}},
            "transfer_backend": "mooncake",
        },
    }


@pytest.fixture(scope="module")
def env():
    venv = router.venv()  # first: the ports are picked right before the deployment takes them
    port, bootstrap = free_ports()
    with router.deployment("pd", venv, [layout(bootstrap)], port) as deployed:
        yield {**deployed, "bootstrap": bootstrap}


def log_of(run_dir, unit) -> str:
    return (Path(run_dir) / f"{unit}.log").read_text(errors="replace")


def test_pd_layout_deploys_gates_benches_and_stops(env):
    e, extra, run_dir, port, bootstrap = (
        env["runner"],
        env["extra"],
        env["run_dir"],
        env["port"],
        env["bootstrap"],
    )

    r = run(e, {**extra, "layout": LAYOUT}, "deploy.yml")
    assert r.rc == 0, failed_messages(r)
    pids = {k: pid_of(run_dir, u) for k, u in UNITS.items()}
    assert all(pids.values()), pids
    # each server gated on its own, then the router: its workers and one request end to end
    gated = [x["__sglang_service_unit"]["name"] for x in task_results(r, "Gate | Wait until each server")]
    assert sorted(gated) == sorted([UNITS["prefill"], UNITS["decode"]])
    e2e = [x for x in task_results(r, "Router | One request end to end") if not x.get("skipped")]
    assert len(e2e) == 1 and e2e[0]["status"] == 200, e2e
    workers = get_json(f"http://127.0.0.1:{port}/workers")
    kinds = sorted((w["worker_type"], w["url"]) for w in workers["workers"] if w["is_healthy"])
    assert kinds == [("decode", f"http://127.0.0.1:{port + 2}"), ("prefill", f"http://127.0.0.1:{port + 1}")]
    with urllib.request.urlopen(f"http://127.0.0.1:{bootstrap}/health", timeout=30) as resp:
        assert resp.status == 200  # the prefill server's bootstrap server
    facts = next(task_results(r, "Facts | Measured readiness"))["ansible_facts"]
    assert facts["sglang_service_current"]["url"] == f"http://127.0.0.1:{port}"
    assert facts["sglang_health"]["pd"] == {
        "prefill": [f"http://127.0.0.1:{port + 1}"],
        "decode": [f"http://127.0.0.1:{port + 2}"],
    }
    # the layout's KV capacity is its decode server's (it holds the conversations), as planned
    health = facts["sglang_health"]
    assert (
        health["max_total_num_tokens"] == health["replica_max_total_num_tokens"][gated.index(UNITS["decode"])]
    )

    r = run(e, {**extra, "layout": LAYOUT, "run_id": "pd-it"}, "bench.yml")
    assert r.rc == 0, failed_messages(r)
    record = json.loads((run_dir / "results" / "pd-it" / "seed-box" / f"{LAYOUT}.json").read_text())
    assert record["status"] == "ok", record.get("summary")
    assert record["summary"]["failed"] == 0
    # each level's TTFT split from the decode server's counters: prefill and KV transfer, measured
    for level in record["levels"]:
        assert level["ttft_split"]["measured"], level["ttft_split"]
        assert level["ttft_split"]["requests"] == level["completed"]
        assert 0 < level["ttft_prefill_ms"] < level["ttft_ms"]["mean"]
        assert 0 < level["ttft_transfer_ms"] < level["ttft_ms"]["mean"]
    # every prompt was prefilled by the prefill server; the decode server prefilled none of them
    prefill_log, decode_log = log_of(run_dir, UNITS["prefill"]), log_of(run_dir, UNITS["decode"])
    big = [ln for ln in prefill_log.splitlines() if "Prefill batch" in ln and "#new-token: 1," not in ln]
    assert len(big) >= 1, prefill_log[-2000:]
    assert not [ln for ln in decode_log.splitlines() if "Prefill batch" in ln and "#new-token: 1," not in ln]

    r = run(e, extra, "stop.yml")
    assert r.rc == 0, failed_messages(r)
    assert_stopped(run_dir, UNITS.values(), (port, port + 1, port + 2, bootstrap))


def test_sweep_measures_records_and_reports_the_pd_layout(env):
    e, extra, run_dir = env["runner"], env["extra"], env["run_dir"]
    r = run(e, {**extra, "run_id": "pd-sweep"}, "sweep.yml")
    assert r.rc == 0, failed_messages(r)
    out = run_dir / "results" / "pd-sweep"
    record = json.loads((out / "seed-box" / f"{LAYOUT}.json").read_text())
    assert record["status"] == "ok", record.get("msg")
    assert record["gpus_used"] == 8 and record["simulated"] is True
    assert record["health"]["router"]["url"] == record["health"]["url"]
    assert [x for x in task_results(r, "Check | Each unit still runs") if not x.get("skipped")], (
        "the check ran"
    )
    assert_stopped(run_dir, UNITS.values(), ())
    report = (out / "REPORT.md").read_text()
    assert LAYOUT in report


def start_order(r) -> list[tuple[str, str]]:
    """("start" | "gate", unit suffix) in the order the deploy's events say the process supervisor
    started and the gate passed each unit."""
    steps = []
    for ev in r.events:
        data = ev.get("event_data", {})
        task = str(data.get("task", ""))
        if ev.get("event") != "runner_on_ok" or not task.startswith(
            ("Process | Run each unit", "Gate | Wait")
        ):
            continue
        for res in data.get("res", {}).get("results") or []:
            unit = res.get("__sglang_service_unit", {}).get("name", "")
            steps.append(("start" if task.startswith("Process") else "gate", unit.rsplit("-", 1)[-1]))
    return steps


def test_shared_gpus_start_decode_after_prefill_and_a_failing_kv_transfer_fails_the_gate(env):
    """pd.share_gpus: SGLang sizes a server's pool from the memory free at its start, so the decode
    server on the prefill server's GPUs is started only after the prefill server passed its gate. The
    prefill server's KV transfers fail (the simulator's fault): the router's end-to-end request fails
    with the class kv_transfer_failed."""
    e, extra, bootstrap = env["runner"], env["extra"], env["bootstrap"]
    bad = {
        "name": "pdbad",
        "pd": {
            "prefill": {
                "tp": 8,
                "bootstrap_port": bootstrap,
                "mem_fraction_static": 0.4,
                "env": {"SGLANG_SIM_FAULT": "transfer_error_after:0"},
            },
            "decode": {"tp": 8, "mem_fraction_static": 0.6},
            "transfer_backend": "mooncake",
            "share_gpus": True,
        },
    }
    # 400 GiB simulated GPUs: Kimi K2.6 at tp 8 twice on the same eight GPUs
    extra = {**extra, "sglang_layouts": [bad], "gpu_memory_gib": 400}
    try:
        r = run(e, {**extra, "layout": "pdbad"}, "deploy.yml")
        assert r.rc != 0
        text = "\n".join(failed_messages(r))
        assert "kv_transfer_failed" in text, text
        assert start_order(r) == [
            ("start", "prefill0.service"),
            ("gate", "prefill0.service"),
            ("start", "decode0.service"),
            ("gate", "decode0.service"),
            ("start", "router.service"),
        ], start_order(r)
    finally:
        run(e, extra, "stop.yml")
