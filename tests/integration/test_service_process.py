"""deploy.yml / stop.yml in process-supervisor mode on this machine, with the simulated engine.

The demo inventory (sglang_service_manager: process, ansible_connection: local), a private
run directory and a free port: deploy a layout that fits (ready, facts), deploy it again
(nothing changes, same process), a forced oom layout (cuda_oom verdict and the OOM line,
the refusal without force), stop.yml (no process left).
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from tests.helpers.net import free_port
from tests.helpers.playbook import (
    REPO,
    ansible_env,
    changed_count,
    failed_messages,
    playbook_command,
    run_playbook,
    task_results,
)


@pytest.fixture(scope="module")
def env():
    # Not under pytest's 0700 tmp dir: as root the engine runs as the service user, which must reach it.
    run_dir = Path(tempfile.mkdtemp(prefix="sglang-svc-it-"))
    os.chmod(run_dir, 0o755)
    runner = Path(tempfile.mkdtemp(prefix="sglang-svc-runner-"))  # beside the run dir: its files are compared
    port = free_port()
    extra = {"sglang_run_dir": str(run_dir), "sglang_base_port": port, "sglang_service_health_timeout": 120}
    yield {"runner": runner, "extra": extra, "run_dir": run_dir, "port": port}
    run(runner, extra, "stop.yml")
    shutil.rmtree(run_dir, ignore_errors=True)
    shutil.rmtree(runner, ignore_errors=True)


def run(runner, extra, playbook, **kw):
    return run_playbook(playbook, runner, extravars=extra, **kw)


def pids(run_dir):
    return sorted(p.name for p in Path(run_dir).glob("*.pid"))


@pytest.mark.skipif(sys.platform != "linux", reason="the supervisor reads /proc")
def test_deploy_idempotent_oom_and_stop(env):
    e, extra, run_dir = env["runner"], env["extra"], env["run_dir"]

    r = run(e, {**extra, "layout": "ep8"}, "deploy.yml")
    assert r.rc == 0, failed_messages(r)
    facts = next(task_results(r, "Facts | Measured readiness"))["ansible_facts"]["sglang_health"]
    assert facts["layout"] == "ep8"
    assert facts["max_total_num_tokens"] > 0
    assert facts["predicted"]["kv_tokens"] > 0
    assert facts["url"] == f"http://127.0.0.1:{env['port']}"
    pid1 = (run_dir / "sglang-kimi-k2-6-ep8.service.pid").read_text()

    r = run(e, {**extra, "layout": "ep8"}, "deploy.yml")
    assert r.rc == 0
    assert changed_count(r) == 0, "a second deploy of the same layout must change nothing"
    assert (run_dir / "sglang-kimi-k2-6-ep8.service.pid").read_text() == pid1

    r = run(e, {**extra, "layout": "tp4ep2"}, "deploy.yml")
    assert r.rc != 0
    refused = next(task_results(r, "Preflight | Verdict"))
    assert refused["failure_class"] == "refused"
    assert (run_dir / "sglang-kimi-k2-6-ep8.service.pid").read_text() == pid1, "a refusal stops nothing"

    r = run(e, {**extra, "layout": "tp4ep2", "sglang_force": "true"}, "deploy.yml")
    assert r.rc != 0
    failed = next(task_results(r, "Gate | Wait"))
    assert failed["failure_class"] == "cuda_oom"
    assert "CUDA out of memory" in failed["evidence"]["line"]
    assert len(failed["evidence"]["log_tail"]) <= 30
    assert not (run_dir / "sglang-kimi-k2-6-ep8.service.pid").exists(), (
        "tp4ep2 shares ep8's GPUs: ep8 was stopped"
    )

    r = run(e, extra, "stop.yml")
    assert r.rc == 0
    assert pids(run_dir) == []


def _snapshot(run_dir):
    return {
        str(p.relative_to(run_dir)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in Path(run_dir).rglob("*")
    }


@pytest.mark.skipif(sys.platform != "linux", reason="the supervisor reads /proc")
def test_bad_deploys_change_nothing_and_the_running_layout_keeps_running(env):
    """The deploy path of the bad-input matrix: a refused deploy writes no file in the run dir and
    stops nothing (docs/reliability.md)."""
    e, extra, run_dir = env["runner"], env["extra"], env["run_dir"]
    r = run(e, {**extra, "layout": "ep8"}, "deploy.yml")
    assert r.rc == 0, failed_messages(r)
    pid = int((run_dir / "sglang-kimi-k2-6-ep8.service.pid").read_text())
    before = _snapshot(run_dir)
    private = Path(tempfile.mkdtemp(prefix="sglang-private-"))  # 0700, as /root is
    ep8 = {"name": "ep8", "tp": 8, "ep": 8}
    bad = {
        "newline-in-env": (
            {"sglang_layouts": [{**ep8, "env": {"FOO": "x\nExecStartPre=/bin/true"}}]},
            "env.FOO",
        ),
        "unit-name-collision": ({"sglang_layouts": [ep8, {**ep8, "name": "EP8"}]}, "both map to the unit"),
        "unreadable-run-dir": ({"sglang_run_dir": str(private / "run")}, f"cannot enter {private}"),
    }
    try:
        for case, (override, needle) in bad.items():
            r = run(e, {**extra, **override, "layout": "ep8"}, "deploy.yml")
            msgs = failed_messages(r)
            assert r.rc != 0 and any(needle in m for m in msgs), (case, msgs)
            assert _snapshot(run_dir) == before, case
            assert not list(private.iterdir()), case
            os.kill(pid, 0)  # still running
    finally:
        shutil.rmtree(private, ignore_errors=True)
        run(e, extra, "stop.yml")


@pytest.mark.skipif(sys.platform != "linux", reason="the supervisor reads /proc")
def test_the_gate_shows_the_start_up_phase_while_it_waits(env):
    """A start that takes longer than the progress interval is never silent: the action plugin prints
    the phase the engine's log reached (on stderr, so a machine-readable stdout stays clean).

    The engine's weight load is held (SGLANG_SIM_HOLD_DIR) until that line is shown: however long
    ansible takes to reach the gate on a busy host, the gate finds the engine loading."""
    hold = env["run_dir"] / "hold"
    hold.mkdir(mode=0o755, exist_ok=True)
    (hold / "warmup").touch()  # only the load is held
    extra = dict(
        env["extra"],
        sglang_service_health_progress_every=0.3,
        sglang_service_extra_env={"SGLANG_SIM_HOLD_DIR": str(hold)},
    )
    # ansible-playbook itself: ansible-runner's pty would merge the two streams this test tells apart
    penv = {
        **os.environ,
        **ansible_env(),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
        "ANSIBLE_CALLBACKS_ENABLED": "ansible.builtin.json",
        "ANSIBLE_CACHE_PLUGIN": "memory",
    }
    cmd = playbook_command("deploy.yml", extravars={**extra, "layout": "pp8"})
    p = subprocess.Popen(cmd, cwd=REPO, env=penv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out_chunks: list[str] = []
    reader = threading.Thread(target=lambda: out_chunks.append(p.stdout.read()), daemon=True)
    reader.start()
    err_lines = []
    try:
        for line in p.stderr:
            err_lines.append(line)
            if "seed-box sglang-kimi-k2-6-pp8.service:" in line and "loading weights" in line:
                (hold / "load").touch()  # seen while loading: the load may end
        rc = p.wait(timeout=600)
    finally:
        if p.poll() is None:
            p.kill()
        (hold / "load").touch()
    reader.join(timeout=60)
    stdout, stderr = "".join(out_chunks), "".join(err_lines)
    assert rc == 0, stdout[-2000:] + stderr[-2000:]
    shown = [ln for ln in stderr.splitlines() if "seed-box sglang-kimi-k2-6-pp8.service:" in ln]
    assert any("loading weights" in ln for ln in shown), stderr[-2000:]
    out = json.loads(stdout)  # the progress lines left stdout machine-readable
    facts = next(
        res
        for play in out["plays"]
        for task in play["tasks"]
        if "Facts | Measured readiness" in task["task"]["name"]
        for res in task["hosts"].values()
    )["ansible_facts"]["sglang_health"]
    assert 0 < facts["phases"]["loading weights"] < facts["ready_after_s"]
    r = run(env["runner"], env["extra"], "stop.yml")
    assert r.rc == 0


@pytest.mark.skipif(sys.platform != "linux", reason="the supervisor reads /proc")
def test_one_phase_by_tag(env):
    """--tags picks a phase of the role: preflight alone changes nothing; install + run deploy."""
    e, extra, run_dir = env["runner"], env["extra"], env["run_dir"]
    assert run(e, extra, "stop.yml").rc == 0

    r = run(e, {**extra, "layout": "ep8"}, "deploy.yml", tags="sglang_service_preflight")
    assert r.rc == 0, failed_messages(r)
    checked = list(task_results(r, "Preflight | Verdict"))
    assert checked and not any(res.get("failed") for res in checked)
    assert not list(task_results(r, "Gate | ")), "the gate is not part of the preflight phase"
    assert pids(run_dir) == [] and changed_count(r) == 0

    r = run(e, {**extra, "layout": "ep8"}, "deploy.yml", tags="sglang_service_install,sglang_service_run")
    assert r.rc == 0, failed_messages(r)
    assert not list(task_results(r, "Preflight | Verdict"))
    facts = next(task_results(r, "Facts | Measured readiness"))["ansible_facts"]["sglang_health"]
    assert facts["layout"] == "ep8" and facts["max_total_num_tokens"] > 0
    assert pids(run_dir) == ["sglang-kimi-k2-6-ep8.service.pid"]
    assert run(e, extra, "stop.yml").rc == 0
