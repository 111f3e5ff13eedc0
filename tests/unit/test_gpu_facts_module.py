"""library/gpu_facts.py run by ansible-core itself, with an nvidia-smi that replays the recorded H200.

The fake nvidia-smi prints tests/fixtures/gpu/h200-1gpu/* byte for byte, so the module's own
plumbing (finding the binary, rc handling, warnings, failing, facts) runs for real.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
H200 = REPO / "tests" / "fixtures" / "gpu" / "h200-1gpu"
ANSIBLE = Path(sys.executable).with_name("ansible")

pytestmark = pytest.mark.skipif(
    not ANSIBLE.exists(), reason="ansible-core is not installed beside this python"
)

FAKE = """#!/bin/sh
# fake nvidia-smi: replays output recorded on a real H200
case "$*" in
  "-q -x") cat "{d}/{prefix}nvidia-smi-q.xml" ;;
  --query-compute-apps=*) cat "{d}/{prefix}compute-apps-full.csv" ;;
  "topo -m") cat "{d}/topo-m.txt" ;;
  *) echo "fake nvidia-smi: unexpected arguments: $*" >&2; exit 2 ;;
esac
"""

BROKEN = """#!/bin/sh
echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running."
exit 9
"""


def make_smi(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "nvidia-smi"
    path.write_text(text)
    path.chmod(0o755)
    return path


def run_module(tmp_path: Path, args: str, extra: list[str] | None = None) -> dict:
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_STDOUT_CALLBACK="json",
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"),
        ANSIBLE_CACHE_PLUGIN="memory",
    )
    cmd = [str(ANSIBLE), "localhost", "-i", "localhost,", "-c", "local", "-m", "gpu_facts", "-a", args]
    cmd += ["-e", f"ansible_python_interpreter={sys.executable}", *(extra or [])]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    # profile_tasks (ansible.cfg) prints timing lines around the json callback's document.
    out = (
        json.JSONDecoder().raw_decode(proc.stdout[proc.stdout.index("{") :])[0]
        if "{" in proc.stdout
        else None
    )
    assert out, f"no JSON from ansible: {proc.stdout}\n{proc.stderr}"
    return out["plays"][0]["tasks"][0]["hosts"]["localhost"]


def test_recorded_h200_through_ansible(tmp_path):
    smi = make_smi(tmp_path, FAKE.format(d=H200, prefix=""))
    res = run_module(tmp_path, f"nvidia_smi={smi}")
    facts = res["ansible_facts"]
    assert not res.get("failed"), res
    assert res["changed"] is False
    assert facts["gpu_present"] is True
    assert (facts["gpu_count"], facts["gpu_memory_gib"], facts["gpu_interconnect"]) == (1, 139.8, "none")
    assert facts["gpu_names"] == ["NVIDIA H200"]
    assert facts["gpu_health"] == "ok"


def test_busy_gpu_warns_then_fails_when_asked(tmp_path):
    smi = make_smi(tmp_path, FAKE.format(d=H200, prefix="busy-"))
    res = run_module(tmp_path, f"nvidia_smi={smi}")
    assert not res.get("failed")
    assert any("pid 462 python3 8802 MiB" in w for w in res["warnings"])
    res = run_module(tmp_path, f"nvidia_smi={smi} fail_on_problems=true")
    assert res["failed"] is True
    assert res["msg"].startswith("GPU problems: GPU 0 (NVIDIA H200, 00000000:00:06.0) already has 1 process")


def test_missing_nvidia_smi_is_a_clear_failure(tmp_path):
    res = run_module(tmp_path, "nvidia_smi=nvidia-smi-not-here")
    assert res["failed"] is True
    assert "nvidia-smi not found" in res["msg"]
    assert "install the NVIDIA driver (>= 580 for CUDA 13)" in res["msg"]


def test_missing_nvidia_smi_not_required_keeps_inventory_values(tmp_path):
    """required=false: no gpu_count fact, so the inventory's gpu_count stays in force."""
    res = run_module(tmp_path, "nvidia_smi=nvidia-smi-not-here required=false")
    assert not res.get("failed")
    assert res["ansible_facts"]["gpu_present"] is False
    assert "gpu_count" not in res["ansible_facts"]
    assert "nvidia-smi not found" in res["ansible_facts"]["gpu_problems"][0]


def test_driver_that_does_not_answer_is_a_clear_failure(tmp_path):
    smi = make_smi(tmp_path, BROKEN)
    res = run_module(tmp_path, f"nvidia_smi={smi}")
    assert res["failed"] is True
    assert "nvidia-smi -q -x failed with rc 9" in res["msg"]
    assert "couldn't communicate with the NVIDIA driver" in res["msg"]


def test_check_mode_reads_for_real(tmp_path):
    smi = make_smi(tmp_path, FAKE.format(d=H200, prefix=""))
    res = run_module(tmp_path, f"nvidia_smi={smi}", ["--check"])
    assert res["ansible_facts"]["gpu_count"] == 1


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has a real nvidia-smi")
def test_default_on_a_host_without_gpu(tmp_path):
    res = run_module(tmp_path, "")
    assert res["failed"] is True
    assert res["msg"].startswith("nvidia-smi not found ('nvidia-smi' is not in PATH)")
