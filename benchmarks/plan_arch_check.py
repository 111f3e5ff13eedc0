"""The plan's figures for every model of benchmarks/extra-vars/arch-check.yml on one H200 (issue 31).

Prints, per model: architecture, weight format, KV pool kind, predicted weights GiB per GPU and
KV tokens (and the sliding-window / state pool beside them): the "predicted" column of the H200
check in docs/planner.md. After `make gpu-sweep` with arch-check.yml, the records' prediction /
health.log_figures hold the same predicted figures beside the measured ones.
With --lease DIR (a lease folder, e.g. benchmarks/results/h200-2026-12-04b) it prints below each
row what that lease's start logged (DIR/logs/sglang-<model>-tp1.log: weights GiB, KV tokens, the
sliding-window tokens or the state pool's requests) and the plan's error against it.
Usage: .venv/bin/python benchmarks/plan_arch_check.py [GPU_MEMORY_GIB] [--lease DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "module_utils"))

from sglang_layouts.gate import logclass  # noqa: E402
from sglang_layouts.plan import planner  # noqa: E402


def measured(log: Path) -> dict:
    """What one start logged, read by the gate's own parser (logclass.startup_figures)."""
    out: dict = {}
    if not log.is_file():
        return out
    for line in log.read_text(errors="replace").splitlines():
        out.update(logclass.startup_figures(line))
    return out


# what a unit ran with where the layout's env named no allocator, before the plan gave the MXFP4 path
# expandable segments (memory.allocator_env): PyTorch's default
DEFAULT_ALLOCATOR = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False"}


def as_ran(layout: dict) -> dict:
    """A lease's layout with the allocator its unit ran with, for replaying that lease's logs."""
    env = dict(layout.get("env") or {})
    if not {"PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"} & set(env):
        env.update(DEFAULT_ALLOCATOR)
    return {**layout, "env": env}


def repo_model(name: str, dummy: bool = True) -> dict:
    """sglang_model of a model of models/ (its config.json), as a lease starts it: dummy weights
    unless told otherwise."""
    return {
        "name": name,
        "path": f"/var/lib/sglang-models/{name}",
        "hf_config_file": str(REPO / "models" / name / "config.json"),
        "load_format": "dummy" if dummy else "auto",
    }


def _err(planned, real) -> str:
    return f"{(planned - real) / real * 100:+.1f} %"


def main() -> int:
    args = sys.argv[1:]
    lease = None
    if "--lease" in args:
        i = args.index("--lease")
        lease = Path(args[i + 1])
        del args[i : i + 2]
    gib = float(args[0]) if args else 139.80  # torch's H200 capacity (docs/gpu-memory.md)
    ladders = yaml.safe_load((REPO / "benchmarks/extra-vars/arch-check.yml").read_text())[
        "sglang_gpu_ladders"
    ]
    print(
        f"{'model':26} {'architecture':22} {'weights':42} {'pool':10} {'GiB/GPU':>8} {'KV tokens':>10}  beside"
    )
    for name, layouts in ladders.items():
        inputs = {
            "host": "h",
            "model": repo_model(name),
            "hardware": {
                "gpu_count": 1,
                "gpu_memory_gib": gib,
                "gpu_interconnect": "nvlink",
                "gpu_name": "NVIDIA H200",
            },
            "serving": {"mem_fraction_static": 0.88, "context_length": 32768},
            # a lease's starts are planned as they ran; without one, as the plan runs them now
            "layouts": [as_ran(lay) for lay in layouts] if lease else layouts,
        }
        doc = planner.plan_host(inputs)
        for lay in doc["layouts"]:
            pool = lay["kv_pool"] or {}
            beside = ""
            if pool.get("swa_tokens") is not None:
                beside = f"swa_tokens {pool['swa_tokens']}"
            if pool.get("state_slots") is not None:
                beside = f"state pool {pool['state_slots']} requests = {pool['state_gib']} GiB"
            print(
                f"{name:26} {doc['model']['architecture'][:22]:22} {doc['model']['quantization'][:42]:42} "
                f"{pool.get('kind', '-'):10} {lay['weights_gib_per_gpu']!s:>8} {lay['kv_tokens']!s:>10}  {beside}"
                + ("" if lay["verdict"] == "fits" else f"  [{lay['verdict']}: {'; '.join(lay['reasons'])}]")
            )
            if lease is None:
                continue
            real = measured(lease / "logs" / f"sglang-{name.replace('.', '-')}-{lay['name']}.log")
            if "weights_gib" not in real or "kv_tokens" not in real:
                print(f"{'':26} measured: not started in {lease}")
                continue
            extra = ""
            if "swa_tokens" in real:
                extra = f"  swa_tokens {real['swa_tokens']} ({_err(pool['swa_tokens'], real['swa_tokens'])})"
            if "state_slots" in real:
                extra = f"  state pool {real['state_slots']} requests ({_err(pool['state_slots'], real['state_slots'])})"
            print(
                f"{'':26} measured: {real['weights_gib']} GiB ({_err(lay['weights_gib_per_gpu'], real['weights_gib'])}), "
                f"{real['kv_tokens']} KV tokens ({_err(lay['kv_tokens'], real['kv_tokens'])}){extra}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
