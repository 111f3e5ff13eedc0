"""The pure nvidia-smi parser (module_utils/sglang_layouts/gpu.py) on recorded output.

h200-1gpu/ was recorded on a real NVIDIA H200 (tests/fixtures/gpu/README.md); synthetic/ holds
multi-GPU topologies written from NVIDIA's format, labelled as such.
"""

from pathlib import Path

import pytest
from sglang_layouts import gpu

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"
H200 = FIX / "h200-1gpu"
UUID = "GPU-316b40f5-93ce-dbe6-3905-b0ca397d46ee"


def read(path: Path) -> str:
    """A fixture without its '# ' header lines (synthetic files say SYNTHETIC there)."""
    return "".join(line for line in path.read_text().splitlines(keepends=True) if not line.startswith("# "))


@pytest.fixture(scope="module")
def idle_xml() -> str:
    return read(H200 / "nvidia-smi-q.xml")


def test_recorded_h200_facts(idle_xml):
    facts = gpu.build_facts(idle_xml, read(H200 / "topo-m.txt"), read(H200 / "compute-apps-full.csv"))
    assert facts["gpu_count"] == 1
    assert facts["gpu_names"] == ["NVIDIA H200"]
    assert facts["gpu_uuids"] == [UUID]
    assert facts["gpu_pci_bus_ids"] == ["00000000:00:06.0"]
    assert facts["gpu_driver_version"] == "580.159.04"
    assert facts["gpu_cuda_version"] == "13.0"
    assert facts["gpu_memory_bandwidth_gbs"] == 4800
    assert facts["gpu_interconnect"] == "none"
    assert facts["gpu_topology"] == {"GPU0": {}}
    assert facts["gpu_cpu_affinity"] == {"GPU0": "0-15"}
    assert facts["gpu_health"] == "ok"
    assert facts["gpu_problems"] == []
    dev = facts["gpu_devices"][0]
    assert (dev["memory_total_mib"], dev["memory_reserved_mib"], dev["memory_used_mib"]) == (143771, 616, 0)
    assert dev["ecc_mode"] == "Enabled"
    assert dev["ecc_uncorrected_volatile"] == 0
    assert dev["compute_mode"] == "Default"
    assert dev["processes"] == []


def test_memory_is_what_torch_reports(idle_xml):
    """torch.cuda.get_device_properties(0).total_memory on the same GPU, same minute (torch.txt)."""
    torch_line = next(
        line for line in (H200 / "torch.txt").read_text().splitlines() if line.startswith("total_memory")
    )
    torch_bytes = int(torch_line.split()[1])
    assert torch_bytes == 150109880320
    facts = gpu.build_facts(idle_xml)
    assert facts["gpu_memory_gib"] == round(torch_bytes / 2**30, 2) == 139.8
    # nvidia-smi's total alone would overstate it by the reserved 616 MiB.
    assert round(143771 / 1024, 2) != facts["gpu_memory_gib"]


def test_xml_and_csv_agree(idle_xml):
    """The --query-gpu CSV of the same moment (fields checked in help-query-gpu.txt) says the same."""
    help_text = (H200 / "help-query-gpu.txt").read_text()
    for field in gpu.QUERY_GPU_FIELDS:
        assert f'"{field}"' in help_text, field
    (row,) = gpu.parse_query_csv(read(H200 / "query-gpu.csv"))
    (dev,) = gpu.parse_smi_xml(idle_xml)["gpus"]
    assert row["index"] == "0"
    assert row["name"] == dev["name"]
    assert row["uuid"] == dev["uuid"]
    assert row["pci.bus_id"] == dev["pci_bus_id"]
    assert int(row["memory.total"]) == dev["memory_total_mib"]
    assert int(row["memory.reserved"]) == dev["memory_reserved_mib"]
    assert row["ecc.errors.uncorrected.volatile.total"] == "0"
    assert gpu.memory_gib(float(row["memory.total"]), float(row["memory.reserved"])) == dev["memory_gib"]


def test_busy_gpu_recorded_is_a_problem():
    """Recorded while a python3 process held 8 GiB: reported, naming pid and MiB."""
    facts = gpu.build_facts(
        read(H200 / "busy-nvidia-smi-q.xml"),
        read(H200 / "topo-m.txt"),
        read(H200 / "busy-compute-apps-full.csv"),
    )
    assert facts["gpu_health"] == "degraded"
    (problem,) = facts["gpu_problems"]
    assert "GPU 0 (NVIDIA H200, 00000000:00:06.0)" in problem
    assert "pid 462 python3 8802 MiB" in problem
    assert "8811 MiB used in all" in problem
    # Capacity is a property of the GPU, not of who holds it.
    assert facts["gpu_memory_gib"] == 139.8


def test_compute_apps_csv_recorded():
    apps = gpu.parse_compute_apps_csv(read(H200 / "busy-compute-apps-full.csv"))
    assert apps == [{"pid": 462, "process_name": "python3", "gpu_uuid": UUID, "used_memory": 8802}]
    assert gpu.parse_compute_apps_csv(read(H200 / "compute-apps.csv")) == []


def test_memory_held_by_an_unlisted_process_is_a_problem(idle_xml):
    """Edited from the recorded XML: 20 GiB used, no process listed (another VM/container holds it)."""
    xml = idle_xml.replace("<used>0 MiB</used>", "<used>20480 MiB</used>", 1)
    assert xml != idle_xml
    facts = gpu.build_facts(xml)
    assert any("20480 MiB in use by processes this host cannot list" in p for p in facts["gpu_problems"])
    assert gpu.build_facts(xml, used_threshold_mib=30000)["gpu_problems"] == []


def test_ecc_error_is_a_problem(idle_xml):
    """Edited from the recorded XML: 2 uncorrectable DRAM errors in the volatile counters."""
    volatile_dram = "<dram_uncorrectable>0</dram_uncorrectable>\n\t\t\t</volatile>"
    assert volatile_dram in idle_xml
    xml = idle_xml.replace(volatile_dram, volatile_dram.replace(">0<", ">2<"), 1)
    facts = gpu.build_facts(xml)
    assert facts["gpu_devices"][0]["ecc_uncorrected_volatile"] == 2
    assert facts["gpu_health"] == "degraded"
    assert "2 uncorrected volatile ECC error(s)" in facts["gpu_problems"][0]


def test_pending_row_remap_and_recovery_action(idle_xml):
    xml = idle_xml.replace(
        "<remapped_row_pending>No</remapped_row_pending>", "<remapped_row_pending>Yes</remapped_row_pending>"
    ).replace("<gpu_recovery_action>None<", "<gpu_recovery_action>Reset<")
    problems = gpu.build_facts(xml)["gpu_problems"]
    assert any("pending row remap" in p for p in problems)
    assert any("recovery action 'Reset'" in p for p in problems)


def test_old_driver_ecc_dialect():
    """Drivers before R5xx report <double_bit><total>; it still counts."""
    xml = """<nvidia_smi_log><driver_version>470.1</driver_version><cuda_version>11.4</cuda_version>
      <attached_gpus>1</attached_gpus><gpu id="00000000:3B:00.0"><product_name>Tesla V100</product_name>
      <uuid>GPU-x</uuid><fb_memory_usage><total>32510 MiB</total><used>0 MiB</used><free>32510 MiB</free>
      </fb_memory_usage><ecc_errors><volatile><single_bit><total>5</total></single_bit>
      <double_bit><device_memory>1</device_memory><total>1</total></double_bit></volatile></ecc_errors>
      </gpu></nvidia_smi_log>"""
    facts = gpu.build_facts(xml)
    assert facts["gpu_devices"][0]["ecc_uncorrected_volatile"] == 1
    assert facts["gpu_memory_gib"] == round(32510 / 1024, 2)  # no <reserved>: nothing subtracted
    assert "gpu_memory_bandwidth_gbs" not in facts  # V100 is not in the table: the planner's default applies


@pytest.mark.parametrize(
    ("name", "expected", "links"),
    [
        ("topo-8x-pcie.txt", "pcie", {"PIX", "NODE", "SYS"}),
        ("topo-8x-nvlink.txt", "nvlink", {"NV18"}),
        ("topo-4x-nvlink-pairs.txt", "pcie", {"NV4", "SYS"}),
    ],
)
def test_synthetic_topologies(name, expected, links):
    topo = gpu.parse_topology(read(FIX / "synthetic" / name))
    n = len(topo["links"])
    assert n in (4, 8)
    for i in range(n):
        row = topo["links"][f"GPU{i}"]
        assert set(row) == {f"GPU{j}" for j in range(n) if j != i}  # every pair, no NIC, no self
    assert {v for row in topo["links"].values() for v in row.values()} == links
    assert gpu.interconnect(topo["links"]) == expected


def test_seed_box_topology_details():
    topo = gpu.parse_topology(read(FIX / "synthetic" / "topo-8x-pcie.txt"))
    assert topo["links"]["GPU0"]["GPU1"] == "PIX"
    assert topo["links"]["GPU0"]["GPU2"] == "NODE"
    assert topo["links"]["GPU3"]["GPU4"] == "SYS"
    assert topo["cpu_affinity"]["GPU7"] == "48-95,144-191"
    assert topo["numa_affinity"]["GPU7"] == "1"


def test_topology_is_symmetric_and_nics_are_dropped():
    topo = gpu.parse_topology(read(FIX / "synthetic" / "topo-8x-nvlink.txt"))
    for a, row in topo["links"].items():
        for b, link in row.items():
            assert topo["links"][b][a] == link
    assert "NIC0" not in topo["links"]
    assert topo["cpu_affinity"]["GPU0"] == "0-55,112-167"


def test_eight_gpu_facts_with_recorded_xml_shape(idle_xml):
    """8 copies of the recorded H200 <gpu> block + the synthetic NVLink topology -> an HGX host's facts."""
    start, end = idle_xml.index("<gpu id="), idle_xml.index("</gpu>") + len("</gpu>")
    block = idle_xml[start:end]
    blocks = "\n".join(block.replace("00000000:00:06.0", f"00000000:{i:02x}:00.0") for i in range(8))
    xml = idle_xml[:start] + blocks + idle_xml[end:]
    xml = xml.replace("<attached_gpus>1</attached_gpus>", "<attached_gpus>8</attached_gpus>")
    facts = gpu.build_facts(xml, read(FIX / "synthetic" / "topo-8x-nvlink.txt"))
    assert facts["gpu_count"] == 8
    assert facts["gpu_interconnect"] == "nvlink"
    assert facts["gpu_memory_gib"] == 139.8
    assert facts["gpu_problems"] == []
    # topology and -q disagree -> said, not hidden
    facts = gpu.build_facts(xml, read(FIX / "synthetic" / "topo-4x-nvlink-pairs.txt"))
    assert any("topo -m shows 4 GPUs, nvidia-smi -q 8" in p for p in facts["gpu_problems"])


def test_bad_output_is_a_clear_error():
    with pytest.raises(gpu.GpuFactsError, match="did not print XML"):
        gpu.parse_smi_xml("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
    with pytest.raises(gpu.GpuFactsError, match="no GPU0 column"):
        gpu.parse_topology("nothing here")
    with pytest.raises(gpu.GpuFactsError, match="expected 11"):
        gpu.parse_query_csv("0, NVIDIA H200")


def test_no_gpu_listed_is_a_problem():
    facts = gpu.build_facts("<nvidia_smi_log><attached_gpus>0</attached_gpus></nvidia_smi_log>")
    assert facts["gpu_count"] == 0
    assert "gpu_memory_gib" not in facts
    assert "lists no GPU" in facts["gpu_problems"][0]


@pytest.mark.parametrize(
    ("name", "gbs"),
    [
        ("NVIDIA H200", 4800),
        ("NVIDIA H100 80GB HBM3", 3350),
        ("NVIDIA H100 PCIe", 2000),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", 1792),
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", 1792),
        ("NVIDIA A100-SXM4-80GB", 2039),
        ("Tesla T4", None),
    ],
)
def test_bandwidth_table(name, gbs):
    assert gpu.memory_bandwidth_gbs(name) == gbs
