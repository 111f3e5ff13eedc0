"""Planning speed: a layout search in-process, plan.yml over 200 explicit layouts, plan.yml over 10.

  (a) sglang_layout_search over every layout of 8 GPUs x 2 nodes (tp, pp, dp, ep as powers of two,
      dp-attention on and off, nnodes 1-2) with 4 serving knobs, planned and ranked by
      planner.plan_host (target < 10 s on the 2-core machine);
  (b) `ansible-playbook playbooks/plan.yml` with 200 explicit layouts (target < 30 s);
  (c) plan.yml over the demo's layouts plus three (target < 5 s), a few runs, the median.
Usage: make bench-plan   (BENCH_PLAN_RUNS=n for (c), BENCH_PLAN_ONLY=a|b|c for one part)
"""

from __future__ import annotations

import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "module_utils"))
DEMO = yaml.safe_load((REPO / "inventory/demo/group_vars/sglang_hosts.yml").read_text())
# The demo's seven layouts (inventory/demo) plus three more, so that ten are planned.
LAYOUTS = DEMO["sglang_layouts"] + [
    {"name": "moe-tp2-ep4", "tp": 8, "ep": 4},
    {"name": "tp2pp4", "tp": 2, "pp": 4},
    {"name": "tp8-fp8kv", "tp": 8, "args": {"kv_cache_dtype": "fp8_e4m3"}},
]
RUNS = int(os.environ.get("BENCH_PLAN_RUNS", "5"))
ONLY = os.environ.get("BENCH_PLAN_ONLY", "")
KNOBS = {
    "kv_cache_dtype": ["auto", "fp8_e4m3"],
    "max_running_requests": [64, 128, 256],
    "chunked_prefill_size": [4096, 8192],
    "cuda_graph_max_bs_decode": [64, 160],
}


def search_inputs() -> dict:
    return {
        "host": "node-a",
        "model": {"name": "kimi-k2.6", "path": str(REPO / "models" / "kimi-k2.6")},
        "layouts": [],
        "hardware": {
            "gpu_count": 8,
            "gpu_memory_gib": 94.97,
            "gpu_interconnect": "pcie",
            "gpu_name": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
        },
        "serving": {
            "engine": "sim",
            "mem_fraction_static": 0.88,
            "context_length": 32768,
            "max_running_requests": 64,
            "host": "127.0.0.1",
            "base_port": 30000,
        },
        "cluster": {"group": "g", "hosts": ["node-a", "node-b"], "addresses": ["10.0.0.1", "10.0.0.2"]},
        "bench": {k: DEMO[f"sglang_bench_{k}"] for k in ("concurrency", "input_len", "output_len")},
        "search": {"objective": "peak", "knobs": KNOBS},
    }


def part_a() -> None:
    from sglang_layouts.plan import planner

    inputs = search_inputs()
    t0 = time.perf_counter()
    plan = planner.plan_host(inputs)
    wall = time.perf_counter() - t0
    s = plan["search"]
    planned = s["candidates"] - s["dropped"]["gpus"] - s["dropped"]["invalid"]
    print(
        f"(a) search, 8 GPUs x 2 nodes, {len(KNOBS)} knobs ({', '.join(KNOBS)}): {s['candidates']} candidates, "
        f"{planned} of whole hosts with shapes the planner allows planned in full, {s['predictions']} distinct "
        f"speed predictions, {len(s['ranked'])} ranked; dropped {s['dropped']}: {wall:.2f} s (target < 10 s)"
    )
    # the same with prefill/decode candidates, on a model whose roles fit one host of the two
    # (Qwen3-30B-A3B on 8 H200), its servers bound beyond loopback so roles may take both hosts
    inputs = search_inputs()
    inputs["model"] = {"name": "qwen3-30b-a3b", "path": str(REPO / "models" / "qwen3-30b-a3b")}
    inputs["hardware"] = {
        "gpu_count": 8,
        "gpu_memory_gib": 139.8,
        "gpu_interconnect": "nvlink",
        "gpu_name": "NVIDIA H200",
    }
    inputs["serving"] = {**inputs["serving"], "host": "0.0.0.0", "api_key_set": True}
    inputs["search"] = {"objective": "peak", "pd": True}
    t0 = time.perf_counter()
    s = planner.plan_host(inputs)["search"]
    wall = time.perf_counter() - t0
    pd = sum(e["name"].startswith("auto-pd-") for e in s["ranked"])
    print(
        f"(a2) search with pd: true, Qwen3-30B-A3B, 8 H200 x 2 nodes, no knobs: {s['candidates']} candidates, "
        f"{len(s['ranked'])} ranked ({pd} pd); dropped {s['dropped']}: {wall:.2f} s (target < 10 s)"
    )


def _playbook(layouts: list[dict], out: str, profile: bool = False) -> tuple[float, int]:
    extra = json.dumps({"sglang_layouts": layouts, "sglang_plan_dir": out})
    cmd = [
        str(REPO / ".venv/bin/ansible-playbook"),
        "-i",
        "inventory/demo",
        "playbooks/plan.yml",
        "-e",
        extra,
    ]
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}
    if profile:
        # where the time goes, per task (ansible.posix, where installed)
        env["ANSIBLE_CALLBACKS_ENABLED"] = "ansible.posix.profile_tasks"
    t0, cpu0 = time.perf_counter(), _children_cpu()
    p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    _LAST_CPU[0] = _children_cpu() - cpu0
    if p.returncode:
        print(p.stdout[-3000:], p.stderr[-2000:], file=sys.stderr)
        raise SystemExit(1)
    _LAST_STDOUT[0] = p.stdout
    return wall, len(json.loads((Path(out) / "seed-box.json").read_text())["layouts"])


_LAST_STDOUT = [""]
# CPU seconds of the last playbook run (with its forks): on a shared machine the wall time also
# counts other processes' turns, the CPU time only this run's work.
_LAST_CPU = [0.0]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _load() -> str:
    return f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"


def slowest_tasks(stdout: str, n: int = 4) -> list[str]:
    """The task recap of profile_tasks (where installed): where the playbook's time went."""
    lines = stdout.split("TASKS RECAP", 1)[-1].splitlines() if "TASKS RECAP" in stdout else []
    return [line.strip() for line in lines if re.search(r" -+ [0-9.]+s$", line.rstrip())][:n]


def two_hundred() -> list[dict]:
    """200 layouts that all fit and share GPUs (one port is fine): tp8 and ep8 over 100 prefill chunks."""
    out = []
    for i in range(100):
        cps = 2048 + 64 * i
        out.append({"name": f"tp8-c{cps}", "tp": 8, "args": {"chunked_prefill_size": cps}})
        out.append({"name": f"ep8-c{cps}", "tp": 8, "ep": 8, "args": {"chunked_prefill_size": cps}})
    return out


def part_b() -> None:
    with tempfile.TemporaryDirectory() as out:
        wall, n = _playbook(two_hundred(), out, profile=True)
    print(
        f"(b) plan.yml over {n} explicit layouts: {wall:.2f} s (target < 30 s), {_LAST_CPU[0]:.2f} s of CPU "
        f"({_load()}); slowest tasks:"
    )
    for line in slowest_tasks(_LAST_STDOUT[0]):
        print(f"    {line}")


def part_c() -> None:
    walls = []
    with tempfile.TemporaryDirectory() as out:
        for i in range(RUNS):
            wall, n = _playbook(LAYOUTS, out)
            walls.append(wall)
            print(f"    run {i + 1}: {wall:.2f} s for {n} layouts")
    print(
        f"(c) plan.yml over {len(LAYOUTS)} layouts: median {statistics.median(walls):.2f} s, max {max(walls):.2f} s (target < 5 s)"
    )


def main() -> int:
    for key, part in (("a", part_a), ("b", part_b), ("c", part_c)):
        if not ONLY or key in ONLY:
            part()
    return 0


if __name__ == "__main__":
    sys.exit(main())
