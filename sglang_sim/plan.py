"""Glue between SGLang's command line and the planner: layout, hardware, serving, the plan.

The planner (`sglang_layouts.plan.planner`) is the only place that knows whether a layout fits
and how much memory each rank holds; this module only maps flags and the simulated
hardware (SGLANG_SIM_* environment) onto its inputs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

DEFAULT_GPUS = 8
DEFAULT_GPU_MEMORY_GIB = 94.97
DEFAULT_BANDWIDTH_GBS = 1792.0


def hardware_from_env(env=None) -> dict:
    env = os.environ if env is None else env
    return {
        "gpu_count": int(env.get("SGLANG_SIM_GPUS") or DEFAULT_GPUS),
        "gpu_memory_gib": float(env.get("SGLANG_SIM_GPU_MEMORY_GIB") or DEFAULT_GPU_MEMORY_GIB),
        "gpu_interconnect": (env.get("SGLANG_SIM_INTERCONNECT") or "pcie").lower(),
        "gpu_memory_bandwidth_gbs": float(env.get("SGLANG_SIM_GPU_BANDWIDTH_GBS") or DEFAULT_BANDWIDTH_GBS),
        # the speed model's row in gpu_specs (sglang_sim/cost.py defaults it to the seed's GPU)
        "gpu_name": env.get("SGLANG_SIM_GPU_NAME") or None,
    }


def layout_from_args(args) -> dict:
    dp, dp_attention = args.dp_size, bool(args.enable_dp_attention)
    return {
        "name": "sim",
        "tp": args.tp_size,
        "pp": args.pp_size,
        "ep": args.ep_size,
        "dp": dp,
        "enable_dp_attention": dp_attention,
        "nnodes": args.nnodes,
    }


def serving_from_args(args) -> dict:
    serving = {
        # the server's own --port: the planner's rules (a rendezvous port that is also node rank 0's
        # HTTP port) must see the port this server binds, not the default a command line left out
        "base_port": args.port,
        "mem_fraction_static": args.mem_fraction_static,
        "context_length": args.context_length,
        "max_running_requests": args.max_running_requests,
        "kv_cache_dtype": None if args.kv_cache_dtype in (None, "auto") else args.kv_cache_dtype,
    }
    return {k: v for k, v in serving.items() if v is not None}


def model_name(args) -> str:
    return args.served_model_name or Path(args.model_path).name or args.model_path


def read_hf_config(model_path: str) -> dict:
    """config.json as SGLang reads it (text_config for multimodal wrappers)."""
    cfg = json.loads((Path(model_path) / "config.json").read_text())
    return cfg


def text_config(cfg: dict) -> dict:
    return cfg.get("text_config") or cfg


def make_plan(args, hardware: dict):
    """Return (planner module, model spec, layout plan)."""
    from sglang_layouts.plan import planner

    spec = planner.load_model({"name": model_name(args), "path": args.model_path})
    layout_plan = planner.plan_layout(
        layout_from_args(args), spec, hardware, serving_from_args(args), cluster_from_args(args, planner)
    )
    return planner, spec, layout_plan


def cluster_from_args(args, planner) -> dict | None:
    """The hosts of a multi-node launch as the planner wants them: node0..node{n-1}, this one node{rank}."""
    normalize = getattr(planner, "normalize_cluster", None)
    if normalize is None or args.nnodes <= 1:
        return None
    host, _colon, port = (args.dist_init_addr or "127.0.0.1:50000").rpartition(":")
    hosts = [f"node{i}" for i in range(args.nnodes)]
    cluster = {
        "group": "sim",
        "hosts": hosts,
        "addresses": [host or "127.0.0.1"],
        "dist_init_port": port or 50000,
    }
    return normalize(cluster, f"node{args.node_rank}")
