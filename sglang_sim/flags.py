"""The command line of `python -m sglang.launch_server`, as the simulator accepts it.

When the flag table of the SGLang the simulator stands in for is present
(`sglang_layouts/data/sglang_flags/<SGLANG_VERSION>.json`, made by `make flags` from that
SGLang's real parser) every flag of that SGLang is accepted; otherwise the flags the planner
renders (the seed's). Unknown flags fail
like SGLang's argparse: usage, `error: unrecognized arguments: ...`, exit status 2.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from . import SGLANG_VERSION

PROG = "launch_server.py"

# (option strings, dest, kind, default); kind: int | float | str | bool
SEED_FLAGS: list[tuple[tuple[str, ...], str, str, object]] = [
    (("--model-path", "--model"), "model_path", "str", None),
    (("--tokenizer-path",), "tokenizer_path", "str", None),
    (("--host",), "host", "str", "127.0.0.1"),
    (("--port",), "port", "int", 30000),
    (("--tp-size", "--tp", "--tensor-parallel-size"), "tp_size", "int", 1),
    (("--pp-size", "--pipeline-parallel-size"), "pp_size", "int", 1),
    (("--ep-size", "--ep", "--expert-parallel-size"), "ep_size", "int", 1),
    (("--dp-size", "--dp", "--data-parallel-size"), "dp_size", "int", 1),
    (("--enable-dp-attention",), "enable_dp_attention", "bool", False),
    (("--mem-fraction-static",), "mem_fraction_static", "float", None),
    (("--context-length",), "context_length", "int", None),
    (("--max-running-requests",), "max_running_requests", "int", None),
    (("--attention-backend",), "attention_backend", "str", None),
    (("--trust-remote-code",), "trust_remote_code", "bool", False),
    (("--grammar-backend",), "grammar_backend", "str", None),
    (("--nnodes",), "nnodes", "int", 1),
    (("--node-rank",), "node_rank", "int", 0),
    (("--dist-init-addr", "--nccl-init-addr"), "dist_init_addr", "str", None),
    (("--api-key",), "api_key", "str", None),
    (("--served-model-name",), "served_model_name", "str", None),
    (("--enable-metrics",), "enable_metrics", "bool", False),
    (("--kv-cache-dtype",), "kv_cache_dtype", "str", "auto"),
    (("--chunked-prefill-size",), "chunked_prefill_size", "int", None),
    (("--max-prefill-tokens",), "max_prefill_tokens", "int", 16384),
    (("--log-level",), "log_level", "str", "info"),
    (("--skip-server-warmup",), "skip_server_warmup", "bool", False),
    (("--dist-timeout",), "dist_timeout", "int", None),
    (("--stream-response-default-include-usage",), "stream_response_default_include_usage", "bool", False),
    # prefill/decode disaggregation (pd.py)
    (("--disaggregation-mode",), "disaggregation_mode", "str", "null"),
    (("--disaggregation-bootstrap-port",), "disaggregation_bootstrap_port", "int", 8998),
    (("--disaggregation-transfer-backend",), "disaggregation_transfer_backend", "str", "mooncake"),
    (("--disaggregation-ib-device",), "disaggregation_ib_device", "str", None),
]

# Types of the flags the simulator acts on, for the generated (full) flag list.
TYPES = {dest: kind for _opts, dest, kind, _default in SEED_FLAGS}
DEFAULTS = {dest: default for _opts, dest, _kind, default in SEED_FLAGS}

# The simulator's own flags (documented in README.md); SGLang has none of these.
SIM_FLAGS: list[tuple[tuple[str, ...], str, str, object]] = [
    (("--sim-fault",), "sim_fault", "str", None),
    (("--sim-schedule-log",), "sim_schedule_log", "str", None),
]

_CONVERT = {"int": int, "float": float, "str": str}


def flags_file() -> Path | None:
    try:
        import sglang_layouts
    except ImportError:
        return None
    path = Path(sglang_layouts.__file__).resolve().parent / "data" / "sglang_flags" / f"{SGLANG_VERSION}.json"
    return path if path.is_file() else None


def _add(parser: argparse.ArgumentParser, opts, dest, kind, default, choices=None, nargs=None):
    if kind == "bool":
        parser.add_argument(*opts, dest=dest, action="store_true", default=bool(default))
        return
    kw = {"dest": dest, "type": _CONVERT.get(kind, str), "default": default}
    if choices:
        kw["choices"] = choices
    if nargs not in (None, 1, "1"):
        kw["nargs"] = nargs
    parser.add_argument(*opts, **kw)


def _from_json(parser: argparse.ArgumentParser, data: dict) -> None:
    seen: set[str] = set()
    for flag, spec in data.get("flags", {}).items():
        opts = [flag, *[a for a in spec.get("aliases", []) if a != flag]]
        if any(o in seen for o in opts):
            continue
        seen.update(opts)
        dest = spec.get("dest") or flag.lstrip("-").replace("-", "_")
        kind = spec.get("type") if spec.get("type") in _CONVERT else TYPES.get(dest, "str")
        if not spec.get("takes_value", True):
            kind = "bool"
        action = spec.get("action")
        if action in ("store_false",):
            parser.add_argument(*opts, dest=dest, action="store_false", default=spec.get("default", True))
            continue
        default = DEFAULTS.get(dest, spec.get("default"))
        choices = spec.get("choices") if kind != "bool" else None
        if choices and kind in ("int", "float"):
            choices = [_CONVERT[kind](c) for c in choices]
        _add(parser, opts, dest, kind, default, choices, spec.get("nargs"))
    # Flags the simulator acts on must exist even if the dump lacks one.
    for opts, dest, kind, default in SEED_FLAGS:
        if not any(o in seen for o in opts):
            _add(parser, opts, dest, kind, default)
            seen.update(opts)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG)
    path = flags_file()
    if path is not None:
        _from_json(parser, json.loads(path.read_text()))
    else:
        for opts, dest, kind, default in SEED_FLAGS:
            _add(parser, opts, dest, kind, default)
    for opts, dest, kind, default in SIM_FLAGS:
        _add(parser, opts, dest, kind, default)
    return parser


def merge_config(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """SGLang's --config FILE.yaml: the file's keys become flags placed before the command line
    (command line > config > defaults), each key spelled as its flag (`api-key:`). JSON is YAML, so
    a JSON object needs no YAML library."""
    if "--config" not in argv:
        return argv
    i = argv.index("--config")
    if i == len(argv) - 1:
        parser.error("No config file specified after --config flag!")
    path = Path(argv[i + 1])
    if path.suffix.lower() not in (".yaml", ".yml"):
        parser.error(f"Config file must be YAML format, got: {path.suffix}")
    text = path.read_text()
    try:
        data = json.loads(text) if text.strip() else {}
    except ValueError:
        import yaml  # a hand-written YAML file: the simulator's host then needs PyYAML

        data = yaml.safe_load(text) or {}
    extra: list[str] = []
    for key, value in data.items():
        flag = "--" + str(key)  # verbatim, as SGLang does: `api_key:` is --api_key, which argparse refuses
        if isinstance(value, bool):
            extra += [flag] if value else []
        elif isinstance(value, list):
            extra += [flag, *map(str, value)]
        else:
            extra += [flag, str(value)]
    return extra + argv[:i] + argv[i + 2 :]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse like SGLang: unknown flags -> argparse's error and exit status 2."""
    parser = build_parser()
    if argv is None:
        import sys

        argv = sys.argv[1:]
    args = parser.parse_args(merge_config(parser, list(argv)))
    if not args.model_path:
        parser.error("the following arguments are required: --model-path/--model")
    # SGLang 0.5.23 spells dp-attention also as --attn-dp-size N (--enable-dp-attention is deprecated).
    attn_dp = getattr(args, "attn_dp_size", None)
    if attn_dp not in (None, "") and int(attn_dp) > 1 and not args.enable_dp_attention:
        args.dp_size, args.enable_dp_attention = int(attn_dp), True
    if args.sim_fault is None:
        args.sim_fault = os.environ.get("SGLANG_SIM_FAULT") or None
    if args.sim_schedule_log is None:
        args.sim_schedule_log = os.environ.get("SGLANG_SIM_SCHEDULE_LOG") or None
    return args


def server_args_repr(args: argparse.Namespace) -> str:
    items = ", ".join(f"{k}={v!r}" for k, v in vars(args).items() if not k.startswith("sim_"))
    return f"ServerArgs({items})"
