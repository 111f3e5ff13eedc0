"""What differs between the serving engines: launcher, flags, memory knob, readiness, semantics.

The planner, the readiness gate and the sglang_health module ask this module, never an
`if engine == ...` scattered elsewhere. `sim` is SGLang's stand-in, an entry of its own (SIM):
SGLang's rules, flags, launcher line and unit names, with `simulated` set, another module run by
the unit and no JIT builds. Whether an engine is the simulator is asked of it (`.simulated`),
never of its name.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field, replace
from functools import lru_cache

from .estimate.model import PlanError

DATA = os.path.join(os.path.dirname(__file__), "data")


@dataclass(frozen=True)
class Engine:
    name: str
    label: str  # how messages name it
    launcher: tuple[str, ...]
    # Its flag table under data/, dumped from its own parser; "{version}" is the SGLang version
    # the host gets (sglang_version): SGLang's flags change between releases.
    flags_file: str
    flags_command: str  # the command that makes that table
    fraction_key: str  # the serving key that sizes the static memory pool
    # serving key -> flag (a layout's args: may override these)
    serving_flags: dict = field(default_factory=dict)
    # flags rendered from structured keys: args: may not set them
    structural_flags: dict = field(default_factory=dict)
    kv_stop_message: str = ""
    # -- the readiness gate (gate/readiness.py) --
    # the one-token request that confirms a /health 200
    confirm_route: str = "/generate"
    # where the KV capacity (max_total_num_tokens) comes from: "server_info" (/server_info, else
    # the start-up log's max_total_num_tokens=) or "log" (the start-up line `KV cache size: N tokens`)
    kv_tokens_from: str = "server_info"
    # stop semantics: the hint for an exit with status 0 nobody asked for, where the engine exits 0
    # when it dies ("": such an exit is the plain "the engine exited")
    exit_zero_hint: str = ""
    # -- parallelism and memory semantics (plan/rules.py, plan/planner.py) --
    # MoE layers span all tp x dp GPUs and every dp rank is an engine of its own (vLLM); else ep
    # carves the experts inside the tp group and dp without dp-attention runs replicas (SGLang)
    moe_spans_dp: bool = False
    # it has --enable-dp-attention (attention data-parallel inside the tp group)
    dp_attention: bool = True
    # the planner can lay it over several hosts (--nnodes)
    multinode: bool = True
    # its memory fraction covers the whole card, activations included (vLLM profiles them);
    # else the fraction sizes a static pool out of the memory free before load and CUDA graphs
    # and activations live outside it (SGLang)
    fraction_covers_activations: bool = False
    activation_reserve_gib: float = 0.0  # what it profiles for activations inside the fraction
    # a KV-cache size given outright (it then ignores the fraction for the KV cache): a flag in
    # bytes, an environment variable in GiB
    kv_size_flag: str = ""
    kv_size_env_gib: str = ""
    # a KV cache smaller than the context length stops it at start (else requests are capped)
    short_kv_fatal: bool = False
    # -- the API key --
    # the key of the engine's --config YAML file that carries the API key, so the key stays off the
    # command line (/proc/PID/cmdline is world-readable). SGLang turns each key into `--<key>`
    # verbatim (its ConfigArgumentMerger), so it is the flag's own spelling. "": the engine has no
    # --config, the key goes as --api-key, filled in at exec time.
    api_key_config_key: str = ""
    # -- the roles --
    # the inventory variable naming the venv whose python runs it (group_vars/all/engine.yml)
    venv_var: str = "sglang_venv_path"
    # what its JIT kernel builds run at start (serve/jit_toolchain.py checks them on the unit's PATH at
    # provision): SGLang and flashinfer call ninja, nvcc and c++, and compile flashinfer's data/
    jit_tools: tuple[str, ...] = ()
    # its venv may be built over a base environment (sglang_venv_base_env: an image's torch), whose
    # bin/ then holds what its JIT runs (ninja beside torch on NGC-style images)
    venv_over_base_env: bool = False
    # -- the simulator --
    # it is the simulator (sglang_sim): a stand-in that serves like the engine on no GPU
    simulated: bool = False
    # the module its unit runs in place of the launcher's (`python -m <unit_module>`); "": the
    # launcher's own. The plan's argv keeps the launcher, so plans and records read the same.
    unit_module: str = ""

    @property
    def unit_prefix(self) -> str:
        """Its units are <unit_prefix>-<model>-<layout>.service."""
        return self.name

    @property
    def fraction_flag(self) -> str:
        return self.serving_flags[self.fraction_key]


SGLANG = Engine(
    name="sglang",
    label="SGLang",
    launcher=("python3", "-m", "sglang.launch_server"),
    flags_file="sglang_flags/{version}.json",
    flags_command="make flags SGLANG_VERSION={version}",
    fraction_key="mem_fraction_static",
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
        "--attn-dp-size": "dp: with enable_dp_attention: true",
        "--nnodes": "nnodes:",
        "--node-rank": "nnodes: (ranks follow the inventory order)",
        "--dist-init-addr": "nnodes: (the address of the first host)",
        "--port": "port:",
    },
    kv_stop_message="SGLang stops with 'Loaded weights leave no GPU memory for the KV cache' (0.5.16; 'Not enough memory' before)",
    api_key_config_key="api-key",
    jit_tools=("nvcc", "ninja", "c++", "flashinfer data"),
    venv_over_base_env=True,
)

VLLM = Engine(
    name="vllm",
    label="vLLM",
    launcher=("python3", "-m", "vllm.entrypoints.openai.api_server"),
    flags_file="vllm_flags.json",
    flags_command="make vllm-flags",
    fraction_key="gpu_memory_utilization",
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
    # its port stays closed until it is up; it has no /generate and no /server_info
    confirm_route="/v1/completions",
    kv_tokens_from="log",
    exit_zero_hint="vLLM exited with status 0 without being asked to stop (its engine core died)",
    moe_spans_dp=True,
    dp_attention=False,
    multinode=False,  # Ray: not supported here yet
    fraction_covers_activations=True,
    activation_reserve_gib=1.0,  # its profiled peak: a few hundred MiB to ~2 GiB
    kv_size_flag="--kv-cache-memory-bytes",
    kv_size_env_gib="VLLM_CPU_KVCACHE_SPACE",
    short_kv_fatal=True,
    venv_var="vllm_venv_path",
)

# SGLang's stand-in: SGLang in everything the planner and the records read (its name, so its unit
# names, flag table and messages are SGLang's; its launcher line in the plan), run from the role's
# own copy of sglang_sim by the host's python3, compiling nothing
SIM = replace(SGLANG, simulated=True, unit_module="sglang_sim", jit_tools=())

SIM_NAME = "sim"  # how the inventory (sglang_engine) and the records name the simulator

ENGINES = {SGLANG.name: SGLANG, SIM_NAME: SIM, VLLM.name: VLLM}


def simulated_host_env(hardware: dict, sglang_version: str | None) -> dict[str, str]:
    """The host the simulator acts, as its SGLANG_SIM_* environment: the planner's own hardware and
    SGLang version, so a simulated layout runs on what it was planned for."""
    env = {
        "SGLANG_SIM_GPUS": str(hardware["gpu_count"]),
        "SGLANG_SIM_GPU_MEMORY_GIB": str(hardware["gpu_memory_gib"]),
        "SGLANG_SIM_INTERCONNECT": str(hardware.get("gpu_interconnect") or "pcie"),
        "SGLANG_SIM_GPU_NAME": str(hardware.get("gpu_name") or ""),
        "SGLANG_SIM_SGLANG_VERSION": str(sglang_version or ""),
    }
    if hardware.get("gpu_memory_bandwidth_gbs"):
        env["SGLANG_SIM_GPU_BANDWIDTH_GBS"] = str(hardware["gpu_memory_bandwidth_gbs"])
    return env


def engine_of_unit(unit: str | None) -> str:
    """The engine whose unit this is (<unit_prefix>-<model>-<layout>), else sglang."""
    for eng in (VLLM, SGLANG):
        if (unit or "").startswith(eng.unit_prefix + "-"):
            return eng.name
    return SGLANG.name


def engine(name: str | None) -> Engine:
    key = (name or "sglang").lower()
    if key not in ENGINES:
        raise PlanError(f"engine {name!r} is not known; use one of {', '.join(ENGINES)}")
    return ENGINES[key]


def is_simulated(name: str | None) -> bool:
    """Whether the engine named so is the simulator; a name no engine has is not (a record or a
    report names what it is given)."""
    eng = ENGINES.get(str(name or "").lower())
    return bool(eng and eng.simulated)


def role_facts(name: str | None) -> dict:
    """What the roles read of a layout's engine: how units and messages name it, the variable naming
    its venv, and whether it is the simulator (which runs `python3 -m sglang_sim` from the role's
    own copy instead of a venv), and what its JIT builds run (none for the simulator: it compiles nothing)."""
    eng = engine(name)
    return {
        "label": eng.label,
        "venv_var": eng.venv_var,
        "simulated": eng.simulated,
        "jit_tools": list(eng.jit_tools),
    }


# What ci/oracle.sh accepts as an SGLang version; anything else never names a file under data/.
VERSION_RE = re.compile(r"^[0-9]+(\.[0-9A-Za-z]+)+$")


def sglang_flag_tables() -> list[str]:
    """The SGLang versions that have a flag table (data/sglang_flags/<version>.json), oldest first."""
    folder = os.path.join(DATA, os.path.dirname(SGLANG.flags_file))
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    versions = [n[: -len(".json")] for n in names if n.endswith(".json")]
    return sorted(versions, key=_version_key)


def _version_key(version: str) -> list[tuple[int, int | str]]:
    return [(0, int(p)) if p.isdigit() else (1, p) for p in version.split(".")]


def flags_path(eng: Engine, sglang_version: str | None = None) -> str:
    """The flag table eng validates against: SGLang's for sglang_version, vLLM's pinned one.

    The playbooks always pass sglang_version; None (a direct Python caller) means the newest
    table there is. A version without a table is an error that names the command that makes one.
    """
    if "{version}" not in eng.flags_file:
        return os.path.join(DATA, eng.flags_file)
    tables = sglang_flag_tables()
    if sglang_version is None:
        if not tables:
            raise PlanError(f"no SGLang flag table under {DATA}: run `make flags`")
        sglang_version = tables[-1]
    version = str(sglang_version)
    if not VERSION_RE.match(version):
        raise PlanError(f"sglang_version {version!r} is not an SGLang version such as 0.5.23")
    if version not in tables:
        rel = eng.flags_file.format(version=version)
        raise PlanError(
            f"SGLang {version} has no flag table (module_utils/sglang_layouts/data/{rel}), so the planner "
            f"cannot check its flags. Make it from SGLang {version}'s own parser: "
            f"`{eng.flags_command.format(version=version)}`. Tables exist for: {', '.join(tables) or 'none'}."
        )
    return os.path.join(DATA, eng.flags_file.format(version=version))


def engine_flags(eng: Engine, sglang_version: str | None = None) -> dict:
    """eng's flags as its own parser declares them (make flags / make vllm-flags)."""
    path = flags_path(eng, sglang_version)
    try:
        return _load_table(path)
    except (OSError, ValueError, KeyError) as e:
        version = os.path.basename(path)[: -len(".json")]
        raise PlanError(
            f"{path} is not a flag table ({e}): remake it from {eng.label}'s own parser with "
            f"`{eng.flags_command.format(version=version)}`"
        ) from e


@lru_cache(maxsize=8)
def _load_table(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        table = json.load(f)
    if not isinstance(table, dict) or not isinstance(table["flags"], dict):
        raise ValueError("no flags mapping")
    return table


_INDEX: dict[int, tuple[dict, dict[str, str]]] = {}


def flag_index(table: dict) -> dict[str, str]:
    """Every spelling (incl. aliases) in a flag table -> canonical flag (once per loaded table: the
    search plans thousands of layouts against one)."""
    hit = _INDEX.get(id(table))
    if hit is not None and hit[0] is table:
        return hit[1]
    index = _build_index(table)
    if len(_INDEX) > 16:
        _INDEX.clear()
    _INDEX[id(table)] = (table, index)
    return index


def _build_index(table: dict) -> dict[str, str]:
    index = {}
    for flag, meta in table["flags"].items():
        index[flag] = flag
        for alias in meta.get("aliases") or ():
            index[alias] = flag
    return index
