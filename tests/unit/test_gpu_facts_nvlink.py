"""gpu_facts on nvidia-smi output recorded on a real 2 x H200 NVLink host (tests/fixtures/gpu/h200-2gpu/).

Recorded through the device tool's nvidia-h200-x2 kind on 2026-11-29 (the directory's README
names machine, date and driver). The pure parser is checked on the raw files; the Ansible module
itself is run by ansible-core with a fake nvidia-smi that replays them byte for byte.
"""

import json
from pathlib import Path

import pytest
from sglang_layouts import gpu
from sglang_layouts.plan import planner

from tests.helpers import ansible_module
from tests.helpers.gpu_fakes import fake_nvidia_smi

REPO = Path(__file__).resolve().parents[2]
D = REPO / "tests" / "fixtures" / "gpu" / "h200-2gpu"
UUIDS = ["GPU-15f80d2e-40c8-bf50-ec40-64d283e7f4c9", "GPU-91b2b36d-cdc9-785a-2c8d-2f81f8c67966"]


def read(name: str) -> str:
    return (D / name).read_text()


def facts(prefix: str = "") -> dict:
    return gpu.build_facts(
        read(f"{prefix}nvidia-smi-q.xml"), read("topo-m.txt"), read(f"{prefix}compute-apps-full.csv")
    )


def test_two_h200_on_nvlink():
    f = facts()
    assert f["gpu_count"] == 2
    assert f["gpu_names"] == ["NVIDIA H200", "NVIDIA H200"]
    assert f["gpu_uuids"] == UUIDS
    assert f["gpu_pci_bus_ids"] == ["00000000:00:06.0", "00000000:00:07.0"]
    assert f["gpu_driver_version"] == "580.159.04" and f["gpu_cuda_version"] == "13.0"
    # (143771 - 616) MiB / 1024, what torch reported there for both (torch.txt: 150109880320 B)
    assert f["gpu_memory_gib"] == 139.8
    assert [d["memory_gib"] for d in f["gpu_devices"]] == [139.8, 139.8]
    assert "150109880320" in read("torch.txt") and "device 1 NVIDIA H200 150109880320" in read("torch.txt")
    assert f["gpu_memory_bandwidth_gbs"] == 4800
    # the real matrix: one NV18 link each way, no PCIe pair
    assert f["gpu_topology"] == {"GPU0": {"GPU1": "NV18"}, "GPU1": {"GPU0": "NV18"}}
    assert f["gpu_interconnect"] == "nvlink"
    assert f["gpu_cpu_affinity"] == {"GPU0": "0-31", "GPU1": "0-31"}
    assert f["gpu_health"] == "ok" and f["gpu_problems"] == []


def test_topology_matrix_as_recorded():
    raw = read("topo-m.txt")
    assert "\x1b[4m" in raw  # the ANSI-underlined header, as on one GPU
    topo = gpu.parse_topology(raw)
    assert topo["links"] == {"GPU0": {"GPU1": "NV18"}, "GPU1": {"GPU0": "NV18"}}
    # an empty cell sits between 'NUMA Affinity' and 'GPU NUMA ID' (N/A) on this driver
    assert topo["numa_affinity"] == {"GPU0": "0", "GPU1": "0"}
    # 18 links a GPU in nvlink -s agree with NV18
    status = read("nvlink-status.txt")
    assert status.count("Link ") == 36 and status.count("26.562 GB/s") == 36


def test_xml_and_csv_agree():
    smi = gpu.parse_smi_xml(read("nvidia-smi-q.xml"))
    rows = gpu.parse_query_csv(read("query-gpu.csv"))
    assert [r["uuid"] for r in rows] == UUIDS == [g["uuid"] for g in smi["gpus"]]
    for row, dev in zip(rows, smi["gpus"], strict=True):
        assert int(row["memory.total"]) == dev["memory_total_mib"] == 143771
        assert int(row["memory.reserved"]) == dev["memory_reserved_mib"] == 616
        assert gpu.memory_gib(float(row["memory.total"]), float(row["memory.reserved"])) == dev["memory_gib"]
        assert dev["ecc_uncorrected_volatile"] == 0 and dev["compute_mode"] == "Default"


def test_busy_gpu0_only():
    f = facts("busy-")
    assert f["gpu_health"] == "degraded"
    assert len(f["gpu_problems"]) == 1
    assert f["gpu_problems"][0].startswith("GPU 0 (NVIDIA H200, 00000000:00:06.0) already has 1 process(es)")
    assert "pid 676 python3 8802 MiB" in f["gpu_problems"][0]
    assert f["gpu_interconnect"] == "nvlink"


def test_what_the_host_made_of_it_is_what_the_parser_makes_now():
    at_record = json.loads(read("parsed-at-record.json"))
    now = json.loads(json.dumps(facts()))
    # gpu_name (the speed model's key) came after the record; everything else is unchanged
    assert now.pop("gpu_name") == "NVIDIA H200" == now["gpu_names"][0]
    assert at_record["idle"]["facts"] == now
    assert json.loads(read("facts-live.json")) == now
    assert all(all(v for k, v in c.items() if k.endswith("_equal")) for c in at_record["idle"]["checks"])


def test_planner_on_the_real_facts():
    f = facts()
    hw = {k: f[k] for k in ("gpu_count", "gpu_memory_gib", "gpu_interconnect", "gpu_memory_bandwidth_gbs")}
    live = json.loads(read("plan-live.json"))
    assert live["hardware"] == hw
    cfg = json.loads((REPO / "tests" / "fixtures" / "configs" / "llama-3.1-70b.json").read_text())
    doc = planner.plan_host(
        {
            "host": "h200x2",
            "model": {"name": "llama-3.1-70b", "path": "/models/llama-3.1-70b", "hf_config": cfg},
            "layouts": [{"name": "tp1", "tp": 1}, {"name": "tp2", "tp": 2}],
            "hardware": hw,
            "serving": {"mem_fraction_static": 0.88, "context_length": 32768, "max_running_requests": 64},
        }
    )
    tp1, tp2 = doc["layouts"]
    assert (tp1["verdict"], tp1["failure"]) == ("oom", "kv_no_memory")
    assert tp2["verdict"] == "fits" and tp2["gpu_ids"] == [0, 1]
    assert tp2["cost"]["interconnect"] == "nvlink"
    by_name = {e["name"]: e for e in live["layouts"]}
    assert by_name["tp2"]["verdict"] == "fits" and by_name["tp1"]["failure"] == "kv_no_memory"
    # plan-live.json was planned before the planner counted SGLang's rotary cos/sin cache (issue 31)
    rope = tp2["ranks"][0]["components"]["rope_cache"]
    assert tp2["weights_gib_per_gpu"] == pytest.approx(
        by_name["tp2"]["weights_gib_per_gpu"] + rope, abs=0.006
    )


@pytest.mark.skipif(
    not ansible_module.ANSIBLE.exists(), reason="ansible-core is not installed beside this python"
)
def test_module_on_the_recorded_host(tmp_path):
    smi = fake_nvidia_smi(tmp_path / "nvidia-smi", D)
    result = ansible_module.run_module(tmp_path, "gpu_facts", f"nvidia_smi={smi}", check_rc=True)
    assert not result.get("failed"), result
    got = result["ansible_facts"]
    assert got["gpu_count"] == 2 and got["gpu_memory_gib"] == 139.8
    assert got["gpu_interconnect"] == "nvlink"
    assert got["gpu_topology"] == {"GPU0": {"GPU1": "NV18"}, "GPU1": {"GPU0": "NV18"}}
    assert got["gpu_health"] == "ok"
