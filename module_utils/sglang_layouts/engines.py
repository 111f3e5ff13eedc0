"""What differs between the serving engines: launcher, flags, memory knob, semantics.

The planner asks this module, never an `if engine == ...` scattered elsewhere.
`sim` is SGLang's stand-in: SGLang's rules and flags, another launcher.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from functools import lru_cache

from .model import PlanError

DATA = os.path.join(os.path.dirname(__file__), "data")


@dataclass(frozen=True)
class Engine:
    name: str
    label: str  # how messages name it
    launcher: tuple[str, ...]
    flags_file: str
    unit_prefix: str
    fraction_key: str  # the serving key that sizes the static memory pool
    fraction_flag: str
    # serving key -> flag (a layout's args: may override these)
    serving_flags: dict = field(default_factory=dict)
    # flags rendered from structured keys: args: may not set them
    structural_flags: dict = field(default_factory=dict)
    kv_stop_message: str = ""


SGLANG = Engine(
    name="sglang",
    label="SGLang",
    launcher=("python3", "-m", "sglang.launch_server"),
    flags_file="sglang_flags.json",
    unit_prefix="sglang",
    fraction_key="mem_fraction_static",
    fraction_flag="--mem-fraction-static",
    serving_flags={
        "mem_fraction_static": "--mem-fraction-static",
        "context_length": "--context-length",
        "max_running_requests": "--max-running-requests",
        "attention_backend": "--attention-backend",
        "grammar_backend": "--grammar-backend",
        "host": "--host",
        "kv_cache_dtype": "--kv-cache-dtype",
    },
    structural_flags={
        "--model-path": "sglang_model.path",
        "--tp-size": "tp:",
        "--pp-size": "pp:",
        "--ep-size": "ep:",
        "--dp-size": "dp:",
        "--enable-dp-attention": "enable_dp_attention:",
        "--nnodes": "nnodes:",
        "--node-rank": "nnodes: (ranks follow the inventory order)",
        "--dist-init-addr": "nnodes: (the address of the first host)",
        "--port": "port:",
    },
    kv_stop_message="SGLang stops with 'Loaded weights leave no GPU memory for the KV cache' (0.5.16; 'Not enough memory' before)",
)

VLLM = Engine(
    name="vllm",
    label="vLLM",
    launcher=("python3", "-m", "vllm.entrypoints.openai.api_server"),
    flags_file="vllm_flags.json",
    unit_prefix="vllm",
    fraction_key="gpu_memory_utilization",
    fraction_flag="--gpu-memory-utilization",
    serving_flags={
        "gpu_memory_utilization": "--gpu-memory-utilization",
        "context_length": "--max-model-len",
        "max_running_requests": "--max-num-seqs",
        "host": "--host",
        "kv_cache_dtype": "--kv-cache-dtype",
    },
    structural_flags={
        "--model": "sglang_model.path",
        "--tensor-parallel-size": "tp:",
        "--pipeline-parallel-size": "pp:",
        "--data-parallel-size": "dp:",
        "--enable-expert-parallel": "ep: (tp x dp turns it on)",
        "--port": "port:",
    },
    kv_stop_message="vLLM stops with 'No available memory for the cache blocks'",
)

ENGINES = {"sglang": SGLANG, "sim": SGLANG, "vllm": VLLM}


def engine(name: str | None) -> Engine:
    key = (name or "sglang").lower()
    if key not in ENGINES:
        raise PlanError(f"engine {name!r} is not known; use one of {', '.join(ENGINES)}")
    return ENGINES[key]


@lru_cache(maxsize=4)
def engine_flags(flags_file: str) -> dict:
    """Flags of the pinned engine, dumped from its own argument parser (make flags / ci/dump_vllm_flags.py)."""
    path = os.path.join(DATA, flags_file)
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise PlanError(f"{path} is missing: regenerate it from the engine's parser ({e.strerror})") from e


def flag_index(eng: Engine) -> dict[str, str]:
    """Every spelling (incl. aliases) -> canonical flag."""
    index = {}
    for flag, meta in engine_flags(eng.flags_file)["flags"].items():
        index[flag] = flag
        for alias in meta.get("aliases") or ():
            index[alias] = flag
    return index
