"""A layout as the engine's command line and environment.

The planner calls these; the unit file itself is the service role's template
(roles/sglang_service/templates/sglang.service.j2), rendered from what these
return.
"""

from __future__ import annotations

import re

from ..engines import SGLANG, VLLM, is_simulated, simulated_host_env

# The seed's Environment lines for a PCIe-only box: no InfiniBand on one host,
# P2P across the PCIe tree, ring all-reduce. Nothing is forced on NVLink hosts.
PCIE_ENV = {
    "NCCL_IB_DISABLE": "1",
    "NCCL_P2P_LEVEL": "SYS",
    "NCCL_ALGO": "Ring",
}
COMMON_ENV = {"OMP_NUM_THREADS": "8"}

_SLUG = re.compile(r"[^a-z0-9]+")


def slug(text: str) -> str:
    return _SLUG.sub("-", str(text).lower()).strip("-")


def unit_name(model_name: str, layout_name: str, prefix: str = "sglang") -> str:
    """<engine>-<model>-<layout>.service, e.g. sglang-kimi-k2-6-ep8.service."""
    return f"{prefix}-{slug(model_name)}-{slug(layout_name)}.service"


def _flag_value(value) -> list[str]:
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    return [str(value)]


def render_argv(
    spec, lay: dict, par: dict, serving: dict, args: dict, port: int, eng=None, flag_table: dict | None = None
) -> list[str]:
    """The engine's flags for one layout (without the launcher): each engine's own builder.

    flag_table is the engine release's own flag table (engines.engine_flags): where it marks a
    flag deprecated, the builder spells the layout the release's current way."""
    eng = eng if eng is not None else SGLANG
    table_flags = (flag_table or {}).get("flags", {})
    return ARGV_BUILDERS[eng.name](spec, lay, par, serving, args, port, table_flags, eng)


# Serving keys (engines.py: an engine's serving_flags) that the builders do not render in the
# serving block: host leads the command line (a layout's args: may replace it), grammar_backend
# follows --trust-remote-code, and kv_cache_dtype reaches it only through a layout's args:.
_HEAD_KEYS = ("host",)
_TAIL_KEYS = ("grammar_backend",)
_ARGS_ONLY_KEYS = ("kv_cache_dtype",)


def serving_flag_keys(eng, keys=None) -> dict[str, str]:
    """flag -> serving key of eng's serving_flags, in their order (engines.py is the one table): the
    serving block's (keys None: all but the head, tail and args-only keys), else those of keys."""
    if keys is None:
        skip = (*_HEAD_KEYS, *_TAIL_KEYS, *_ARGS_ONLY_KEYS)
        return {flag: key for key, flag in eng.serving_flags.items() if key not in skip}
    return {flag: key for key, flag in eng.serving_flags.items() if key in keys}


def is_deprecated(table_flags: dict, flag: str) -> bool:
    """Whether the release whose table this is deprecates flag (its parser warns when it is given)."""
    return bool((table_flags.get(flag) or {}).get("deprecated"))


def current_spelling(table_flags: dict, flag: str) -> str:
    """flag as the release spells it today: a deprecated alias becomes the flag its table names
    (SGLang 0.5.16: `--cuda-graph-max-bs` is an alias of `--cuda-graph-max-bs-decode`), so a unit
    never makes the parser warn; any other flag is itself."""
    new = (table_flags.get(flag) or {}).get("deprecated")
    if isinstance(new, str) and new.startswith("--") and new in table_flags:
        return new
    return flag


def dp_attention_flags(table_flags: dict, dp: int, enabled: bool) -> list[str]:
    """DP width and DP-attention as the release spells them.

    SGLang 0.5.23 deprecates `--dp-size N --enable-dp-attention` for `--attn-dp-size N` (its parser
    warns, and resolves both to the same attention-DP width); releases without --attn-dp-size
    (0.5.16) only know the old spelling."""
    if (
        enabled
        and dp > 1
        and is_deprecated(table_flags, "--enable-dp-attention")
        and "--attn-dp-size" in table_flags
    ):
        return ["--attn-dp-size", str(dp)]
    flags = ["--dp-size", str(dp)] if dp > 1 else []
    return flags + (["--enable-dp-attention"] if enabled else [])


def _sglang_argv(
    spec, lay: dict, par: dict, serving: dict, args: dict, port: int, table_flags: dict, eng=SGLANG
) -> list[str]:
    """`python -m sglang.launch_server` flags."""
    flags = ["--model-path", spec.path or spec.name, "--host", str(serving["host"]), "--port", str(port)]
    flags += ["--tp-size", str(par["tp"])]
    if par["pp"] > 1:
        flags += ["--pp-size", str(par["pp"])]  # never --pp: argparse finds it ambiguous
    if par["ep"] > 1:
        flags += ["--ep-size", str(par["ep"])]
    flags += dp_attention_flags(table_flags, par["dp"], bool(lay["enable_dp_attention"]))
    if par["nnodes"] > 1:
        flags += ["--nnodes", str(par["nnodes"])]
        if par.get("dist_init_addr"):
            # the same command on every node but the rank
            flags += [
                "--node-rank",
                str(par.get("node_rank") or 0),
                "--dist-init-addr",
                par["dist_init_addr"],
            ]
    _add_serving_flags(flags, serving, args, eng)
    return _append_args(flags, {current_spelling(table_flags, f): v for f, v in args.items()})


def _add_serving_flags(flags: list[str], serving: dict, args: dict, eng) -> None:
    """eng's serving settings as flags (a layout's args: win), then --trust-remote-code, then the
    tail keys (--grammar-backend)."""
    _add_flags(flags, serving, args, serving_flag_keys(eng))
    if serving.get("trust_remote_code"):
        flags.append("--trust-remote-code")
    _add_flags(flags, serving, args, serving_flag_keys(eng, _TAIL_KEYS))


def _add_flags(flags: list[str], serving: dict, args: dict, flag_keys: dict) -> None:
    """Each set serving value as its flag (flag -> serving key), unless a layout's args: give the flag."""
    for flag, key in flag_keys.items():
        value = serving.get(key)
        if value is not None and flag not in args:
            flags += [flag, str(value)]


def _append_args(flags: list[str], args: dict) -> list[str]:
    for flag, value in args.items():
        if flag == "--host":
            flags[flags.index("--host") + 1] = str(value)
            continue
        if isinstance(value, bool):
            if value:
                flags.append(flag)
            continue
        flags += [flag, *_flag_value(value)]
    return flags


def _vllm_argv(
    spec, lay: dict, par: dict, serving: dict, args: dict, port: int, table_flags: dict, eng=VLLM
) -> list[str]:
    """`python -m vllm.entrypoints.openai.api_server` flags: vLLM's names for the same layout."""
    flags = ["--model", spec.path or spec.name, "--host", str(serving["host"]), "--port", str(port)]
    flags += ["--served-model-name", spec.name]
    flags += ["--tensor-parallel-size", str(par["tp"])]
    if par["pp"] > 1:
        flags += ["--pipeline-parallel-size", str(par["pp"])]
    if par["dp"] > 1:
        flags += ["--data-parallel-size", str(par["dp"])]
    if par["ep"] > 1:
        flags.append("--enable-expert-parallel")
    _add_serving_flags(flags, serving, args, eng)
    return _append_args(flags, args)


# engine name -> its command line (the simulator's entry is named sglang: the same flags)
ARGV_BUILDERS = {"sglang": _sglang_argv, "vllm": _vllm_argv}


def render_env(
    lay: dict,
    gpu_ids: list[int],
    hardware: dict,
    engine: str = SGLANG.name,
    sglang_version: str | None = None,
) -> dict[str, str]:
    env: dict[str, str] = {}
    if gpu_ids:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpu_ids)
    if hardware.get("gpu_interconnect") != "nvlink":
        env.update(PCIE_ENV)
    env.update(COMMON_ENV)
    if is_simulated(engine):
        env.update(simulated_host_env(hardware, sglang_version))
    env.update(lay.get("env") or {})
    return env
