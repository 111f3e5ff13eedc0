"""library/gpu_facts.py run by ansible-core itself, with an nvidia-smi that replays the recorded H200.

The fake nvidia-smi prints tests/fixtures/gpu/h200-1gpu/* byte for byte, so the module's own
plumbing (finding the binary, rc handling, warnings, failing, facts) runs for real.
"""

import shutil
from pathlib import Path

import pytest

from tests.helpers import ansible_module
from tests.helpers.gpu_fakes import fake_nvidia_smi, write_script

REPO = Path(__file__).resolve().parents[2]
H200 = REPO / "tests" / "fixtures" / "gpu" / "h200-1gpu"

pytestmark = pytest.mark.skipif(
    not ansible_module.ANSIBLE.exists(), reason="ansible-core is not installed beside this python"
)

BROKEN = """#!/bin/sh
echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running."
exit 9
"""


def run_module(tmp_path: Path, args: str, extra: list[str] | None = None) -> dict:
    return ansible_module.run_module(tmp_path, "gpu_facts", args, extra=extra or [])


def test_recorded_h200_through_ansible(tmp_path):
    smi = fake_nvidia_smi(tmp_path / "nvidia-smi", H200)
    res = run_module(tmp_path, f"nvidia_smi={smi}")
    facts = res["ansible_facts"]
    assert not res.get("failed"), res
    assert res["changed"] is False
    assert facts["gpu_present"] is True
    assert (facts["gpu_count"], facts["gpu_memory_gib"], facts["gpu_interconnect"]) == (1, 139.8, "none")
    assert facts["gpu_names"] == ["NVIDIA H200"]
    assert facts["gpu_health"] == "ok"


def test_busy_gpu_warns_then_fails_when_asked(tmp_path):
    smi = fake_nvidia_smi(tmp_path / "nvidia-smi", H200, prefix="busy-")
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
    smi = write_script(tmp_path / "nvidia-smi", BROKEN)
    res = run_module(tmp_path, f"nvidia_smi={smi}")
    assert res["failed"] is True
    assert "nvidia-smi -q -x failed with rc 9" in res["msg"]
    assert "couldn't communicate with the NVIDIA driver" in res["msg"]


def test_check_mode_reads_for_real(tmp_path):
    smi = fake_nvidia_smi(tmp_path / "nvidia-smi", H200)
    res = run_module(tmp_path, f"nvidia_smi={smi}", ["--check"])
    assert res["ansible_facts"]["gpu_count"] == 1


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has a real nvidia-smi")
def test_default_on_a_host_without_gpu(tmp_path):
    res = run_module(tmp_path, "")
    assert res["failed"] is True
    assert res["msg"].startswith("nvidia-smi not found ('nvidia-smi' is not in PATH)")
