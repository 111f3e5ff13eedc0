"""Wall time of `ansible-playbook playbooks/plan.yml` over 10 layouts (target: < 5 s on 2 cores).

Runs the real playbook on the demo host (Kimi K2.6, 8 x 94.97 GiB) with ten layouts given
as extra vars, a few times, and prints each run and the median. Usage: make bench-plan
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
# The demo's seven layouts (inventory/demo) plus three more, so that ten are planned.
LAYOUTS = yaml.safe_load((REPO / "inventory/demo/group_vars/sglang_hosts.yml").read_text())[
    "sglang_layouts"
] + [
    {"name": "moe-tp2-ep4", "tp": 8, "ep": 4},
    {"name": "tp2pp4", "tp": 2, "pp": 4},
    {"name": "tp8-fp8kv", "tp": 8, "args": {"kv_cache_dtype": "fp8_e4m3"}},
]
RUNS = int(os.environ.get("BENCH_PLAN_RUNS", "5"))


def main() -> int:
    walls = []
    with tempfile.TemporaryDirectory() as out:
        extra = json.dumps({"sglang_layouts": LAYOUTS, "sglang_plan_dir": out})
        cmd = [
            str(REPO / ".venv/bin/ansible-playbook"),
            "-i",
            "inventory/demo",
            "playbooks/plan.yml",
            "-e",
            extra,
        ]
        env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}
        for i in range(RUNS):
            t0 = time.perf_counter()
            p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
            wall = time.perf_counter() - t0
            if p.returncode:
                print(p.stdout[-3000:], p.stderr[-2000:], file=sys.stderr)
                return 1
            n = len(json.loads((Path(out) / "seed-box.json").read_text())["layouts"])
            walls.append(wall)
            print(f"run {i + 1}: {wall:.2f} s for {n} layouts")
    print(
        f"plan.yml over {len(LAYOUTS)} layouts: median {statistics.median(walls):.2f} s, max {max(walls):.2f} s (target < 5 s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
