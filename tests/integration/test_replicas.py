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
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

import pytest

from tests.helpers.net import free_port
from tests.helpers.playbook import REPO, failed_messages, run_playbook, task_results

LAYOUT = "tp4x2"
UNITS = {
    "router": f"sglang-kimi-k2-6-{LAYOUT}-router.service",
    "r0": f"sglang-kimi-k2-6-{LAYOUT}-r0.service",
    "r1": f"sglang-kimi-k2-6-{LAYOUT}-r1.service",
}

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the supervisor reads /proc")


def free_base_port():
    """A port P with P+1, P+2 (replicas) and P+1000 (the router's Prometheus listener) free too."""
    for _ in range(50):
        base = free_port()
        if base + 1000 > 65000:
            continue
        try:
            for p in (base + 1, base + 2, base + 1000):
                with socket.socket() as t:
                    t.bind(("127.0.0.1", p))
        except OSError:
            continue
        return base
    pytest.fail("no free port block")


@pytest.fixture(scope="module")
def env():
    router = subprocess.run(
        [str(REPO / "ci" / "router.sh")], capture_output=True, text=True, timeout=600, check=False
    )
    if router.returncode != 0:
        pytest.fail(f"ci/router.sh could not build the sglang-router venv: {router.stderr[-2000:]}")
    router_venv = router.stdout.strip().splitlines()[-1]
    # Not under pytest's 0700 tmp dir: as root the engines run as the service user, which must reach it.
    run_dir = Path(tempfile.mkdtemp(prefix="sglang-replicas-it-"))
    os.chmod(run_dir, 0o755)
    port = free_base_port()
    runner = Path(tempfile.mkdtemp(prefix="sglang-replicas-runner-"))
    extra = {
        "sglang_run_dir": str(run_dir),
        "sglang_results_dir": str(run_dir / "results"),
        "sglang_base_port": port,
        "sglang_service_health_timeout": 120,
        "sglang_service_router_venv": router_venv,
        "sglang_layouts": [{"name": LAYOUT, "tp": 4, "replicas": 2}],
        "gpu_memory_gib": 192,
        "sglang_bench_concurrency": [1, 8],
        "sglang_bench_input_len": 64,
        "sglang_bench_output_len": 16,
        "sglang_bench_num_prompts": 16,
        "sglang_report_plots": False,
    }
    yield {"runner": runner, "extra": extra, "run_dir": run_dir, "port": port}
    run(runner, extra, "stop.yml")
    shutil.rmtree(run_dir, ignore_errors=True)
    shutil.rmtree(runner, ignore_errors=True)


def run(runner, extra, playbook):
    return run_playbook(playbook, runner, extravars=extra)


def pid_of(run_dir, unit):
    path = Path(run_dir) / f"{unit}.pid"
    return int(path.read_text().split()[0]) if path.exists() else None


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


def get_json(url):
    with urllib.request.urlopen(url, timeout=60) as r:
        return json.loads(r.read())


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
    for unit in UNITS.values():
        assert pid_of(run_dir, unit) is None, unit
    for p in (port, port + 1, port + 2):
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", p)) != 0, f"port {p} still open after stop"


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
    for unit in UNITS.values():
        assert pid_of(run_dir, unit) is None, unit
