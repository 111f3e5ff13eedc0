"""A layout behind the real sglang-router, deployed by the real playbooks on this machine (test_pd.py,
test_replicas.py): the router's venv, a free port block, the extra vars and run folders of such a
deployment, and what the tests read back (a unit's pid, the router's JSON, closed ports)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import urllib.request
from pathlib import Path

import pytest

from tests.helpers.net import free_port
from tests.helpers.playbook import REPO, run_playbook


def unit_names(layout: str, **suffixes: str) -> dict:
    """The service unit of each of the layout's parts (Kimi K2.6, the demo's model), by the key given."""
    return {key: f"sglang-kimi-k2-6-{layout}-{suffix}.service" for key, suffix in suffixes.items()}


def venv() -> str:
    """The sglang-router venv of the machine cache, built by ci/router.sh (about 20 s once, then under 1 s)."""
    router = subprocess.run(
        [str(REPO / "ci" / "router.sh")], capture_output=True, text=True, timeout=600, check=False
    )
    if router.returncode != 0:
        pytest.fail(f"ci/router.sh could not build the sglang-router venv: {router.stderr[-2000:]}")
    return router.stdout.strip().splitlines()[-1]


def free_base_port() -> int:
    """A base port P with P+1, P+2 (the servers behind the router) and P+1000 (the router's Prometheus
    listener) free too."""
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


@contextlib.contextmanager
def deployment(name: str, venv: str, layouts: list, port: int):
    """The run folder, ansible-runner folder and extra vars of `layouts` (demo inventory, 192 GiB
    simulated GPUs, a short benchmark) behind the router of `venv` on base port `port`; stop.yml and
    removal of both folders after."""
    # Not under pytest's 0700 tmp dir: as root the engines run as the service user, which must reach it.
    run_dir = Path(tempfile.mkdtemp(prefix=f"sglang-{name}-it-"))
    os.chmod(run_dir, 0o755)
    runner = Path(tempfile.mkdtemp(prefix=f"sglang-{name}-runner-"))
    extra = {
        "sglang_run_dir": str(run_dir),
        "sglang_results_dir": str(run_dir / "results"),
        "sglang_base_port": port,
        "sglang_service_health_timeout": 120,
        "sglang_service_router_venv": venv,
        "sglang_layouts": layouts,
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


def get_json(url):
    with urllib.request.urlopen(url, timeout=60) as r:
        return json.loads(r.read())


def assert_stopped(run_dir, units, ports) -> None:
    """No unit of `units` has a pid file left and nothing listens on `ports`."""
    for unit in units:
        assert pid_of(run_dir, unit) is None, unit
    for p in ports:
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", p)) != 0, f"port {p} still open after stop"
