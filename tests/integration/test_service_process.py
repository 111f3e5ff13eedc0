"""deploy.yml / stop.yml in process-supervisor mode on this machine, with the simulated engine.

The demo inventory (sglang_service_manager: process, ansible_connection: local), a private
run directory and a free port: deploy a layout that fits (ready, facts), deploy it again
(nothing changes, same process), a forced oom layout (cuda_oom verdict and the OOM line,
the refusal without force), stop.yml (no process left).
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = REPO / ".venv" / "bin"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def env():
    # Not under pytest's 0700 tmp dir: as root the engine runs as the service user, which must reach it.
    run_dir = Path(tempfile.mkdtemp(prefix="sglang-svc-it-"))
    os.chmod(run_dir, 0o755)
    port = free_port()
    e = dict(os.environ)
    e.update(
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
        ANSIBLE_CALLBACKS_ENABLED="ansible.builtin.json",
        ANSIBLE_CACHE_PLUGIN="memory",
        ANSIBLE_COLLECTIONS_PATH=str(REPO / ".venv" / "collections"),
        PATH=f"{VENV_BIN}:{e.get('PATH', '')}",
    )
    extra = {"sglang_run_dir": str(run_dir), "sglang_base_port": port, "sglang_service_health_timeout": 120}
    yield {"env": e, "extra": extra, "run_dir": run_dir, "port": port}
    run(e, extra, "stop.yml")
    shutil.rmtree(run_dir, ignore_errors=True)


def run(env, extra, playbook, *args):
    cmd = [
        str(VENV_BIN / "ansible-playbook"),
        "-i",
        str(REPO / "inventory" / "demo"),
        str(REPO / "playbooks" / playbook),
        "-e",
        json.dumps(extra),
        *args,
    ]
    p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    try:
        out = json.loads(p.stdout)
    except ValueError:
        pytest.fail(
            f"no JSON from ansible-playbook (rc {p.returncode}): {p.stdout[-2000:]} {p.stderr[-2000:]}"
        )
    return p.returncode, out


def results(out, name_part):
    """Each host's result of the tasks named so; a task that loops over units gives each unit's."""
    for play in out["plays"]:
        for task in play["tasks"]:
            if name_part in task["task"]["name"]:
                for res in task["hosts"].values():
                    yield from res.get("results") or [res]


def stats(out):
    return next(iter(out["stats"].values()))


def pids(run_dir):
    return sorted(p.name for p in Path(run_dir).glob("*.pid"))


@pytest.mark.skipif(sys.platform != "linux", reason="the supervisor reads /proc")
def test_deploy_idempotent_oom_and_stop(env):
    e, extra, run_dir = env["env"], env["extra"], env["run_dir"]

    rc, out = run(e, extra, "deploy.yml", "-e", "layout=ep8")
    assert rc == 0, json.dumps(out["stats"])
    facts = next(r for r in results(out, "Facts | Measured readiness"))["ansible_facts"]["sglang_health"]
    assert facts["layout"] == "ep8"
    assert facts["max_total_num_tokens"] > 0
    assert facts["predicted"]["kv_tokens"] > 0
    assert facts["url"] == f"http://127.0.0.1:{env['port']}"
    pid1 = (run_dir / "sglang-kimi-k2-6-ep8.service.pid").read_text()

    rc, out = run(e, extra, "deploy.yml", "-e", "layout=ep8")
    assert rc == 0
    assert stats(out)["changed"] == 0, "a second deploy of the same layout must change nothing"
    assert (run_dir / "sglang-kimi-k2-6-ep8.service.pid").read_text() == pid1

    rc, out = run(e, extra, "deploy.yml", "-e", "layout=tp4ep2")
    assert rc != 0
    refused = next(results(out, "Preflight | Verdict"))
    assert refused["failure_class"] == "refused"
    assert (run_dir / "sglang-kimi-k2-6-ep8.service.pid").read_text() == pid1, "a refusal stops nothing"

    rc, out = run(e, extra, "deploy.yml", "-e", "layout=tp4ep2", "-e", "sglang_force=true")
    assert rc != 0
    failed = next(results(out, "Gate | Wait"))
    assert failed["failure_class"] == "cuda_oom"
    assert "CUDA out of memory" in failed["evidence"]["line"]
    assert len(failed["evidence"]["log_tail"]) <= 30
    assert not (run_dir / "sglang-kimi-k2-6-ep8.service.pid").exists(), (
        "tp4ep2 shares ep8's GPUs: ep8 was stopped"
    )

    rc, out = run(e, extra, "stop.yml")
    assert rc == 0
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
    e, extra, run_dir = env["env"], env["extra"], env["run_dir"]
    rc, out = run(e, extra, "deploy.yml", "-e", "layout=ep8")
    assert rc == 0, json.dumps(out["stats"])
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
            rc, out = run(e, {**extra, **override}, "deploy.yml", "-e", "layout=ep8")
            msgs = [
                str(r.get("msg"))
                for p in out["plays"]
                for t in p["tasks"]
                for h in t["hosts"].values()
                for r in h.get("results") or [h]
                if r.get("failed")
            ]
            assert rc != 0 and any(needle in m for m in msgs), (case, msgs)
            assert _snapshot(run_dir) == before, case
            assert not list(private.iterdir()), case
            os.kill(pid, 0)  # still running
    finally:
        shutil.rmtree(private, ignore_errors=True)
        run(e, extra, "stop.yml")


@pytest.mark.skipif(sys.platform != "linux", reason="the supervisor reads /proc")
def test_the_gate_shows_the_start_up_phase_while_it_waits(env):
    """A start that takes longer than the progress interval is never silent: the action plugin prints
    the phase the engine's log reached (on stderr, so a machine-readable stdout stays clean)."""
    extra = dict(
        env["extra"],
        sglang_service_health_progress_every=0.3,
        sglang_service_extra_env={"SGLANG_SIM_LOAD_SECONDS": "2.5"},
    )
    cmd = [
        str(VENV_BIN / "ansible-playbook"),
        "-i",
        str(REPO / "inventory" / "demo"),
        str(REPO / "playbooks" / "deploy.yml"),
        "-e",
        json.dumps(extra),
        "-e",
        "layout=pp8",
    ]
    p = subprocess.run(cmd, cwd=REPO, env=env["env"], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    shown = [ln for ln in p.stderr.splitlines() if "seed-box sglang-kimi-k2-6-pp8.service:" in ln]
    assert any("loading weights" in ln for ln in shown), p.stderr[-2000:]
    out = json.loads(p.stdout)
    facts = next(r for r in results(out, "Facts | Measured readiness"))["ansible_facts"]["sglang_health"]
    assert 0 < facts["phases"]["loading weights"] < facts["ready_after_s"]
    rc, _ = run(env["env"], env["extra"], "stop.yml")
    assert rc == 0


@pytest.mark.skipif(sys.platform != "linux", reason="the supervisor reads /proc")
def test_one_phase_by_tag(env):
    """--tags picks a phase of the role: preflight alone changes nothing; install + run deploy."""
    e, extra, run_dir = env["env"], env["extra"], env["run_dir"]
    assert run(e, extra, "stop.yml")[0] == 0

    rc, out = run(e, extra, "deploy.yml", "-e", "layout=ep8", "--tags", "sglang_service_preflight")
    assert rc == 0, json.dumps(out["stats"])
    checked = list(results(out, "Preflight | Verdict"))
    assert checked and not any(r.get("failed") for r in checked)
    assert not list(results(out, "Gate | ")), "the gate is not part of the preflight phase"
    assert pids(run_dir) == [] and stats(out)["changed"] == 0

    rc, out = run(
        e, extra, "deploy.yml", "-e", "layout=ep8", "--tags", "sglang_service_install,sglang_service_run"
    )
    assert rc == 0, json.dumps(out["stats"])
    assert not list(results(out, "Preflight | Verdict"))
    facts = next(results(out, "Facts | Measured readiness"))["ansible_facts"]["sglang_health"]
    assert facts["layout"] == "ep8" and facts["max_total_num_tokens"] > 0
    assert pids(run_dir) == ["sglang-kimi-k2-6-ep8.service.pid"]
    assert run(e, extra, "stop.yml")[0] == 0
