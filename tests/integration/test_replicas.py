"""Data-parallel replicas behind sglang-router, deployed by the real playbooks on this machine.

The demo inventory (process supervisor, simulated engine, 8 simulated GPUs) with one layout
{name: tp4x2, tp: 4, replicas: 2}: deploy.yml starts two replicas (GPUs 0-3 and 4-7, ports
base+1 and base+2) and sglang-router on the base port, gated replica by replica and then by the
router's /workers; bench.yml measures through the router (api=generate) and both replicas serve
requests; the layout check passes; stop.yml stops the router, then the replicas, and leaves nothing.

The router comes from PyPI (sglang-router==sglang_router_version) in a venv of the machine cache,
built once by ci/router.sh (about 20 s; then under 1 s); the role's pip task finds it installed.
The simulated GPUs get 192 GiB each: Kimi K2.6 on 4 GPUs needs about 141 GiB of weights per GPU.
"""

import json
import sys
from pathlib import Path

import pytest

from tests.helpers import router
from tests.helpers.playbook import failed_messages, task_results
from tests.helpers.router import assert_stopped, get_json, pid_of, run

LAYOUT = "tp4x2"
UNITS = router.unit_names(LAYOUT, router="router", r0="r0", r1="r1")

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the supervisor reads /proc")


@pytest.fixture(scope="module")
def env():
    venv = router.venv()  # first: the port is picked right before the deployment takes it
    with router.deployment(
        "replicas", venv, [{"name": LAYOUT, "tp": 4, "replicas": 2}], router.free_base_port()
    ) as e:
        yield e


def group_environ(pgid):
    """CUDA_VISIBLE_DEVICES of the engine: a process of the supervised group (the pidfile names the
    supervisor's wrapper, whose children get the layout's environment)."""
    seen = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) != pgid:
                continue
            raw = (stat.parent / "environ").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        env = dict(kv.decode(errors="replace").split("=", 1) for kv in raw if b"=" in kv)
        if "CUDA_VISIBLE_DEVICES" in env:
            seen.add(env["CUDA_VISIBLE_DEVICES"])
    return seen


def prefill_lines(run_dir, unit):
    log = Path(run_dir) / f"{unit}.log"
    return sum("Prefill batch" in line for line in log.read_text(errors="replace").splitlines())


def test_replicas_behind_the_router(env):
    e, extra, run_dir, port = env["runner"], env["extra"], env["run_dir"], env["port"]

    r = run(e, {**extra, "layout": LAYOUT}, "deploy.yml")
    assert r.rc == 0, failed_messages(r)
    # two replicas on their own GPU blocks and ports, the router on the layout's port
    pids = {k: pid_of(run_dir, u) for k, u in UNITS.items()}
    assert all(pids.values()), pids
    assert group_environ(pids["r0"]) == {"0,1,2,3"}
    assert group_environ(pids["r1"]) == {"4,5,6,7"}
    workers = get_json(f"http://127.0.0.1:{port}/workers")
    healthy = sorted(w["url"] for w in workers["workers"] if w["is_healthy"])
    assert healthy == [f"http://127.0.0.1:{port + 1}", f"http://127.0.0.1:{port + 2}"], workers
    facts = next(task_results(r, "Facts | Measured readiness"))["ansible_facts"]
    assert facts["sglang_service_current"]["url"] == f"http://127.0.0.1:{port}"
    assert facts["sglang_health"]["max_total_num_tokens"] > 0
    # the replicas start together (the slower one's time), then the router registers them: the
    # layout's last wave of its start
    gated = [g["ready_after_s"] for g in task_results(r, "Gate | Wait until each server is ready")]
    router_s = facts["sglang_health"]["router"]["ready_after_s"]
    assert len(gated) == 2 and router_s > 0
    assert facts["sglang_health"]["ready_after_s"] == pytest.approx(max(gated) + router_s, abs=0.01)

    before = {k: prefill_lines(run_dir, UNITS[k]) for k in ("r0", "r1")}
    r = run(e, {**extra, "layout": LAYOUT, "run_id": "replicas-it"}, "bench.yml")
    assert r.rc == 0, failed_messages(r)
    record = json.loads((run_dir / "results" / "replicas-it" / "seed-box" / f"{LAYOUT}.json").read_text())
    assert record["status"] == "ok", record.get("summary")
    assert record["summary"]["failed"] == 0
    served = {k: prefill_lines(run_dir, UNITS[k]) - before[k] for k in ("r0", "r1")}
    assert served["r0"] > 0 and served["r1"] > 0, f"both replicas serve through the router: {served}"

    r = run(e, extra, "stop.yml")
    assert r.rc == 0, failed_messages(r)
    assert_stopped(run_dir, UNITS.values(), (port, port + 1, port + 2))


def test_sweep_measures_the_replica_layout_like_any_other(env):
    """The same per-layout flow as every layout: deploy, bench through the router, check every
    replica and the router, stop; one record with the layout's plan (replicas, router)."""
    e, extra, run_dir = env["runner"], env["extra"], env["run_dir"]
    r = run(e, {**extra, "run_id": "replicas-sweep"}, "sweep.yml")
    assert r.rc == 0, failed_messages(r)
    record = json.loads((run_dir / "results" / "replicas-sweep" / "seed-box" / f"{LAYOUT}.json").read_text())
    assert record["status"] == "ok", record.get("msg")
    assert record["prediction"]["parallel"]["replicas"] == 2 and record["gpus_used"] == 8
    assert record["health"]["router"]["url"] == record["health"]["url"]
    assert [x for x in task_results(r, "Check | Each unit still runs") if not x.get("skipped")], (
        "the check ran"
    )
    assert_stopped(run_dir, UNITS.values(), ())
