"""Parse what `nvidia-smi` prints into the GPU facts the planner reads.

Pure Python (standard library only), so `library/gpu_facts.py` ships it to the
host through Ansible's module_utils and the tests run it on recorded output
(tests/fixtures/gpu/). Nothing here runs a command.

The facts keep the exact names the planner reads (docs/ARCHITECTURE.md): ``gpu_count``,
``gpu_memory_gib`` (capacity as torch reports it: (fb total - fb reserved) MiB
/ 1024, see docs/gpu-memory.md) and ``gpu_interconnect`` (``nvlink`` when
every pair of GPUs is linked by NVLink, ``pcie`` when any pair is not, ``none``
on a host with one GPU: there is no pair to link).
"""

from __future__ import annotations

import csv
import io
import re
import xml.etree.ElementTree as ET

from .gpu_specs import gpu_spec

MIB_PER_GIB = 1024

# `nvidia-smi --query-gpu=<these> --format=csv,noheader,nounits` (every field
# checked against `nvidia-smi --help-query-gpu` on driver 580.159.04).
QUERY_GPU_FIELDS = (
    "index",
    "name",
    "uuid",
    "pci.bus_id",
    "memory.total",
    "memory.reserved",
    "memory.used",
    "memory.free",
    "driver_version",
    "ecc.errors.uncorrected.volatile.total",
    "compute_mode",
)

# Memory in use on an idle GPU stays far below this; more means someone holds it.
DEFAULT_USED_MEMORY_THRESHOLD_MIB = 1024

_NA = {"", "n/a", "[n/a]", "not supported", "[not supported]", "unknown error", "[unknown error]"}
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_GPU_LABEL = re.compile(r"^GPU\d+$")


class GpuFactsError(ValueError):
    """nvidia-smi's output cannot be understood; the message says what was seen."""


def _text(elem: ET.Element | None, path: str) -> str | None:
    if elem is None:
        return None
    found = elem.find(path)
    if found is None or found.text is None:
        return None
    value = found.text.strip()
    return None if value.lower() in _NA else value


def _number(value: str | None) -> float | None:
    """'143771 MiB' -> 143771.0, '0' -> 0.0, 'N/A' / None -> None."""
    if value is None:
        return None
    match = re.match(r"^\s*(-?\d+(?:\.\d+)?)", value)
    return float(match.group(1)) if match else None


def _int(value: str | None) -> int | None:
    number = _number(value)
    return None if number is None else int(number)


def memory_gib(total_mib: float, reserved_mib: float | None) -> float:
    """Capacity as torch reports it (docs/gpu-memory.md), GiB rounded to 2 places."""
    return round((total_mib - (reserved_mib or 0)) / MIB_PER_GIB, 2)


def memory_bandwidth_gbs(name: str) -> int | None:
    """The datasheet memory bandwidth of the GPU named `name` (gpu_specs.GPU_SPECS), None when unknown."""
    spec = gpu_spec(name)
    return spec["bandwidth_gbs"] if spec else None


def _ecc_uncorrected_volatile(gpu: ET.Element) -> int | None:
    """Uncorrected volatile ECC errors, on every XML dialect nvidia-smi has used.

    R5xx+ (Hopper, Blackwell): <volatile><sram_uncorrectable*/>, <dram_uncorrectable/>;
    older drivers: <volatile><double_bit><total/></double_bit>. None when ECC is off
    or not reported.
    """
    volatile = gpu.find("ecc_errors/volatile")
    if volatile is None:
        return None
    values = []
    for child in volatile:
        if child.tag == "double_bit":
            values.append(_int(_text(child, "total")))
        elif "uncorrectable" in child.tag and child.tag != "sram_threshold_exceeded":
            values.append(_int(child.text.strip() if child.text else None))
    values = [v for v in values if v is not None]
    return sum(values) if values else None


def _processes(gpu: ET.Element) -> list[dict]:
    out = []
    for proc in gpu.findall("processes/process_info"):
        out.append(
            {
                "pid": _int(_text(proc, "pid")),
                "type": _text(proc, "type"),
                "name": _text(proc, "process_name"),
                "used_memory_mib": _int(_text(proc, "used_memory")),
            }
        )
    return out


def parse_smi_xml(text: str) -> dict:
    """`nvidia-smi -q -x` -> {driver_version, cuda_version, gpus: [per-GPU dict]}.

    GPUs keep nvidia-smi's order, which is its index order (PCI bus order).
    """
    try:
        root = ET.fromstring(text.strip())
    except ET.ParseError as exc:
        raise GpuFactsError(f"nvidia-smi -q -x did not print XML ({exc}): {text.strip()[:200]!r}") from exc
    if root.tag != "nvidia_smi_log":
        raise GpuFactsError(f"nvidia-smi -q -x printed <{root.tag}>, expected <nvidia_smi_log>")
    gpus = []
    for index, gpu in enumerate(root.findall("gpu")):
        total = _number(_text(gpu, "fb_memory_usage/total"))
        reserved = _number(_text(gpu, "fb_memory_usage/reserved"))
        gpus.append(
            {
                "index": index,
                "name": _text(gpu, "product_name"),
                "uuid": _text(gpu, "uuid"),
                "pci_bus_id": _text(gpu, "pci/pci_bus_id") or gpu.get("id"),
                "memory_total_mib": _int(_text(gpu, "fb_memory_usage/total")),
                "memory_reserved_mib": _int(_text(gpu, "fb_memory_usage/reserved")),
                "memory_used_mib": _int(_text(gpu, "fb_memory_usage/used")),
                "memory_free_mib": _int(_text(gpu, "fb_memory_usage/free")),
                "memory_gib": None if total is None else memory_gib(total, reserved),
                "ecc_mode": _text(gpu, "ecc_mode/current_ecc"),
                "ecc_uncorrected_volatile": _ecc_uncorrected_volatile(gpu),
                "compute_mode": _text(gpu, "compute_mode"),
                "remapped_row_pending": _text(gpu, "remapped_rows/remapped_row_pending"),
                "remapped_row_failure": _text(gpu, "remapped_rows/remapped_row_failure"),
                "retired_pages_pending": _text(gpu, "retired_pages/pending_retirement"),
                "recovery_action": _text(gpu, "gpu_recovery_action"),
                "processes": _processes(gpu),
            }
        )
    attached = _int(_text(root, "attached_gpus"))
    if attached is not None and attached != len(gpus):
        raise GpuFactsError(f"nvidia-smi -q -x says {attached} GPUs are attached but lists {len(gpus)}")
    return {
        "driver_version": _text(root, "driver_version"),
        "cuda_version": _text(root, "cuda_version"),
        "gpus": gpus,
    }


def _csv_value(value: str) -> str | None:
    value = value.strip()
    return None if value.lower() in _NA else value


def parse_query_csv(text: str, fields: tuple[str, ...] = QUERY_GPU_FIELDS) -> list[dict]:
    """`nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits` -> one dict per GPU."""
    rows = []
    for row in csv.reader(io.StringIO(text.strip()), skipinitialspace=True):
        if not row:
            continue
        if len(row) != len(fields):
            raise GpuFactsError(
                f"nvidia-smi --query-gpu printed {len(row)} fields, expected {len(fields)}: {row!r}"
            )
        rows.append({field: _csv_value(value) for field, value in zip(fields, row)})  # noqa: B905 (hosts may run Python < 3.10)
    return rows


def parse_compute_apps_csv(text: str) -> list[dict]:
    """`nvidia-smi --query-compute-apps=... --format=csv` (with its header line) -> rows.

    Header cells lose their unit ('used_gpu_memory [MiB]' -> 'used_memory'); pid
    and used_memory become ints.
    """
    reader = csv.reader(io.StringIO(text.strip()), skipinitialspace=True)
    header = next(reader, None)
    if not header:
        return []
    # Driver 580 names the memory column 'used_gpu_memory [MiB]' even when asked for 'used_memory'.
    keys = [re.sub(r"\s*\[.*\]$", "", h.strip()) for h in header]
    keys = ["used_memory" if k == "used_gpu_memory" else k for k in keys]
    rows = []
    for row in reader:
        if not row:
            continue
        item = {}
        for key, value in zip(keys, row):  # noqa: B905 (hosts may run Python < 3.10)
            value = _csv_value(value)
            item[key] = _int(value) if key in ("pid", "used_memory") else value
        rows.append(item)
    return rows


def parse_topology(text: str) -> dict:
    """`nvidia-smi topo -m` -> {"links": {"GPU0": {"GPU1": "NV18"}}, "cpu_affinity": {...}, "numa_affinity": {...}}.

    The matrix is tab separated: a header of device columns (GPU0.., NIC0..) then
    'CPU Affinity', 'NUMA Affinity', 'GPU NUMA ID'; one row per device; a blank
    line and the legend follow. Only GPU-to-GPU links are kept; "X" (self) is dropped.
    """
    lines = [_ANSI.sub("", line).rstrip() for line in text.splitlines()]
    header_at = next((i for i, line in enumerate(lines) if re.search(r"\bGPU0\b", line)), None)
    if header_at is None:
        raise GpuFactsError(f"nvidia-smi topo -m printed no GPU0 column: {text.strip()[:200]!r}")
    splitter = "\t" if "\t" in lines[header_at] else None
    header = [cell.strip() for cell in lines[header_at].split(splitter)]
    if header and header[0] == "":
        header = header[1:]
    devices = []
    for cell in header:
        if not re.match(r"^(GPU|NIC|mlx|CX)\w*$", cell):
            break
        devices.append(cell)
    links: dict[str, dict[str, str]] = {}
    cpu_affinity: dict[str, str] = {}
    numa_affinity: dict[str, str] = {}
    for line in lines[header_at + 1 :]:
        if not line.strip() or line.strip().startswith("Legend"):
            break
        cells = [cell.strip() for cell in line.split(splitter)]
        label = cells[0]
        if not _GPU_LABEL.match(label):
            continue
        values = cells[1 : 1 + len(devices)]
        if len(values) < len(devices):
            raise GpuFactsError(
                f"nvidia-smi topo -m: row {label} has {len(values)} cells for {len(devices)} devices"
            )
        links[label] = {
            dev: value
            for dev, value in zip(devices, values)  # noqa: B905 (hosts may run Python < 3.10)
            if _GPU_LABEL.match(dev) and dev != label and value != "X"
        }
        rest = [cell for cell in cells[1 + len(devices) :] if cell]
        if rest:
            cpu_affinity[label] = rest[0]
        if len(rest) > 1:
            numa_affinity[label] = rest[1]
    if not links:
        raise GpuFactsError("nvidia-smi topo -m printed a header but no GPU rows")
    return {"links": links, "cpu_affinity": cpu_affinity, "numa_affinity": numa_affinity}


def interconnect(links: dict[str, dict[str, str]]) -> str:
    """Sum the pairwise links up: nvlink | pcie | none.

    ``nvlink`` only when every pair of GPUs is linked by NVLink (NV<n>, directly or
    through NVSwitch); one pair over PCIe, a host bridge or the SMP interconnect
    (PIX, PXB, PHB, NODE, SYS) makes the whole host ``pcie``: a collective over all
    GPUs runs at the pace of its slowest link. One GPU: ``none``.
    """
    pairs = [value for row in links.values() for value in row.values()]
    if not pairs:
        return "none"
    return "nvlink" if all(value.upper().startswith("NV") for value in pairs) else "pcie"


def health_problems(
    smi: dict,
    compute_apps: list[dict] | None = None,
    used_threshold_mib: int = DEFAULT_USED_MEMORY_THRESHOLD_MIB,
) -> list[str]:
    """Sentences naming every GPU in a state SGLang should not be started on."""
    problems = []
    apps_by_uuid: dict[str, list[dict]] = {}
    for app in compute_apps or []:
        apps_by_uuid.setdefault(app.get("gpu_uuid") or "", []).append(app)
    for gpu in smi["gpus"]:
        who = f"GPU {gpu['index']} ({gpu['name']}, {gpu['pci_bus_id']})"
        ecc = gpu.get("ecc_uncorrected_volatile")
        if ecc:
            problems.append(
                f"{who} has {ecc} uncorrected volatile ECC error(s) since the driver loaded:"
                " drain it and reset the GPU (nvidia-smi -r) or reboot before serving on it"
            )
        if (gpu.get("remapped_row_pending") or "").lower() == "yes":
            problems.append(
                f"{who} has a pending row remap: reset the GPU (nvidia-smi -r) before serving on it"
            )
        if (gpu.get("remapped_row_failure") or "").lower() == "yes":
            problems.append(f"{who} failed a row remap: the GPU needs service")
        if (gpu.get("retired_pages_pending") or "").lower() == "yes":
            problems.append(f"{who} has pages pending retirement: reset the GPU before serving on it")
        action = gpu.get("recovery_action")
        if action and action.lower() != "none":
            problems.append(f"{who} asks for recovery action {action!r} (nvidia-smi -q)")
        if gpu.get("compute_mode") and gpu["compute_mode"].lower() == "prohibited":
            problems.append(f"{who} is in compute mode Prohibited: no CUDA context can be created on it")
        procs = [p for p in gpu.get("processes", []) if p.get("used_memory_mib")]
        procs += [
            {"pid": a.get("pid"), "name": a.get("process_name"), "used_memory_mib": a.get("used_memory")}
            for a in apps_by_uuid.get(gpu.get("uuid") or "", [])
            if a.get("pid") not in {p.get("pid") for p in procs}
        ]
        used = gpu.get("memory_used_mib") or 0
        if procs:
            held = ", ".join(
                f"pid {p['pid']} {p.get('name') or '?'} {p.get('used_memory_mib')} MiB" for p in procs
            )
            problems.append(
                f"{who} already has {len(procs)} process(es) holding memory ({held}; {used} MiB used in all):"
                " stop them or SGLang's memory plan will not fit"
            )
        elif used > used_threshold_mib:
            problems.append(
                f"{who} has {used} MiB in use by processes this host cannot list (another container or VM?):"
                " free it or SGLang's memory plan will not fit"
            )
    return problems


def build_facts(
    smi_xml: str,
    topo_text: str | None = None,
    compute_apps_csv: str | None = None,
    used_threshold_mib: int = DEFAULT_USED_MEMORY_THRESHOLD_MIB,
) -> dict:
    """Everything nvidia-smi said, as the ansible_facts `gpu_facts` returns."""
    smi = parse_smi_xml(smi_xml)
    gpus = smi["gpus"]
    problems = []
    if not gpus:
        problems.append("nvidia-smi lists no GPU: is the driver loaded and the device passed through?")
    apps = parse_compute_apps_csv(compute_apps_csv) if compute_apps_csv else None
    problems += health_problems(smi, apps, used_threshold_mib)
    facts: dict = {
        "gpu_count": len(gpus),
        "gpu_names": [g["name"] for g in gpus],
        "gpu_uuids": [g["uuid"] for g in gpus],
        "gpu_pci_bus_ids": [g["pci_bus_id"] for g in gpus],
        "gpu_driver_version": smi["driver_version"],
        "gpu_cuda_version": smi["cuda_version"],
        "gpu_devices": gpus,
    }
    capacities = [g["memory_gib"] for g in gpus if g["memory_gib"] is not None]
    if capacities:
        # The planner sizes every rank alike, so the smallest GPU is the one that counts.
        facts["gpu_memory_gib"] = min(capacities)
        if len(set(capacities)) > 1:
            problems.append(
                f"GPUs differ in memory ({sorted(set(capacities))} GiB): planning with the smallest"
            )
    names = sorted({g["name"] for g in gpus if g["name"]})
    if len(names) > 1:
        problems.append(f"GPUs of different models on one host: {names}")
    if names:
        # the speed model's key into gpu_specs.GPU_SPECS (one model per host, checked above)
        facts["gpu_name"] = names[0]
        bandwidths = [memory_bandwidth_gbs(n) for n in names]
        if all(bandwidths):
            facts["gpu_memory_bandwidth_gbs"] = min(bandwidths)
    if topo_text is not None:
        topo = parse_topology(topo_text)
        facts["gpu_topology"] = topo["links"]
        facts["gpu_cpu_affinity"] = topo["cpu_affinity"]
        facts["gpu_interconnect"] = interconnect(topo["links"])
        if gpus and len(topo["links"]) != len(gpus):
            problems.append(f"nvidia-smi topo -m shows {len(topo['links'])} GPUs, nvidia-smi -q {len(gpus)}")
    facts["gpu_problems"] = problems
    facts["gpu_health"] = "ok" if not problems else "degraded"
    return facts
