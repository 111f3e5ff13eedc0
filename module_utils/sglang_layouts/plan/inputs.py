"""The planner's inputs: layouts, hardware, serving and cluster, checked and normalised.

Every bad value is a PlanError that names the key and what to write instead, before anything runs.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re

from ..estimate.model import PlanError, kind_of
from ..names import layout_name_problem, suggest
from ..secrets import patterns as secret_patterns
from ..serve.render import slug
from .validate import check_bind, check_planner_env, check_port

LAYOUT_KEYS = {
    "name": "unique name, used in the unit name",
    "tp": "tensor parallel size (--tp-size)",
    "pp": "pipeline parallel size (--pp-size)",
    "ep": "expert parallel size inside the TP group (--ep-size)",
    "dp": "data parallel size (--dp-size)",
    "enable_dp_attention": "data-parallel attention inside the TP group (--enable-dp-attention)",
    "nnodes": "number of hosts the layout spans (--nnodes)",
    "gpus": "device ids to use on each host (CUDA_VISIBLE_DEVICES)",
    "port": "HTTP port (default sglang_base_port)",
    "args": "extra SGLang flags as a mapping, e.g. {kv_cache_dtype: fp8_e4m3}",
    "env": "extra environment variables for the server",
    "replicas": "independent copies of the layout behind a router",
    "engine": "sglang (default) or sim",
    "force": "start it even when the planner says oom or invalid (to record the real failure)",
}


def _int(value, what: str, minimum: int = 1) -> int:
    if isinstance(value, bool):
        raise PlanError(f"{what} must be an integer, not {value!r}")
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise PlanError(f"{what} must be an integer, not {value!r}") from None
    if n != float(value) or n < minimum:
        raise PlanError(f"{what} must be an integer >= {minimum}, not {value!r}")
    return n


def _float(value, what: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise PlanError(f"{what} must be a number, not {value!r}") from None


def _bool(value, what: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "yes", "1", "false", "no", "0"):
        return value.lower() in ("true", "yes", "1")
    raise PlanError(f"{what} must be true or false, not {value!r}")


# A newline in a value that reaches a unit file starts a new directive (ExecStartPre=... would run as
# root); CR and NUL cut or split the line the same way. No engine flag or variable needs one.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


_CONTROL_NAMES = {"\n": "a newline", "\r": "a carriage return", "\x00": "a NUL byte", "\t": "a tab"}


# POSIX: letters, digits and underscore, not starting with a digit (systemd refuses others too).
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def check_text(value, where: str, key: str) -> None:
    """Refuse control characters in anything that reaches argv, a unit file or an environment."""
    values = value if isinstance(value, list | tuple) else [value]
    for v in values:
        if isinstance(v, dict | list | tuple):
            continue
        m = _CONTROL.search(str(v))
        if m:
            what = _CONTROL_NAMES.get(m.group(), f"the control character {m.group()!r}")
            raise PlanError(
                f"{where} {key} contains {what} at character {m.start() + 1} (the value is not shown: it may be "
                "a secret); a unit file would read what follows as a new line. "
                f"Write {key} as one line of printable text."
            )


def check_env(env, where: str, key: str = "env") -> dict[str, str]:
    """An environment mapping: POSIX names, one-line values."""
    if env is None:
        return {}
    if not isinstance(env, dict):
        raise PlanError(f"{where} {key} must be a mapping of NAME: value, not {kind_of(env)}")
    out = {}
    for name, value in env.items():
        name = str(name)
        if not _ENV_NAME.match(name):
            better = re.sub(r"[^A-Za-z0-9_]", "_", name)
            better = ("_" + better) if better[:1].isdigit() else better
            raise PlanError(
                f"{where} {key} name {name!r} is not an environment variable name (letters, digits and _, "
                f"not starting with a digit). Write {better or 'NAME'} instead."
            )
        if isinstance(value, dict | list):
            # the value is not shown: a secret given in the wrong shape is still a secret
            raise PlanError(
                f"{where} {key}.{name} must be a string or a number, not {kind_of(value)} "
                "(the value is not shown)"
            )
        check_text(value, where, f"{key}.{name}")
        out[name] = "" if value is None else str(value)
    return out


def normalize_layout(layout: dict) -> dict:
    if not isinstance(layout, dict):
        raise PlanError(f"each entry of sglang_layouts must be a mapping, not {kind_of(layout)}")
    name = layout.get("name")
    if name is None or name == "":
        raise PlanError("a layout has no name: every entry of sglang_layouts needs one, e.g. name: tp8")
    if isinstance(name, str):
        check_text(name, f"layout {name!r}:", "name")
    problem = layout_name_problem(name)
    if problem:
        shown = repr(name) if isinstance(name, str) and len(name) <= 40 else "name"
        raise PlanError(f"layout {shown}: name {problem}. E.g. name: {suggest(str(name))}")
    if not slug(name):
        raise PlanError(
            f"layout {name!r}: name has no letter or digit, so it cannot name a unit. Write e.g. name: tp8."
        )
    unknown = sorted(set(layout) - set(LAYOUT_KEYS))
    if unknown:
        hints = []
        for key in unknown:
            close = difflib.get_close_matches(key, LAYOUT_KEYS, n=1)
            hints.append(f"{key}" + (f" (did you mean {close[0]}?)" if close else ""))
        raise PlanError(
            f"layout {name}: unknown key(s) {', '.join(hints)}. Known keys: {', '.join(LAYOUT_KEYS)}; "
            "other SGLang flags go under args:"
        )
    where = f"layout {name}:"
    out = {
        "name": name,
        "tp": _int(layout.get("tp", 1), f"{where} tp"),
        "pp": _int(layout.get("pp", 1), f"{where} pp"),
        "ep": _int(layout.get("ep", 1), f"{where} ep"),
        "dp": _int(layout.get("dp", 1), f"{where} dp"),
        "enable_dp_attention": _bool(
            layout.get("enable_dp_attention", False), f"{where} enable_dp_attention"
        ),
        "nnodes": _int(layout.get("nnodes", 1), f"{where} nnodes"),
        "replicas": _int(layout.get("replicas", 1), f"{where} replicas"),
        "port": check_port(layout["port"], where) if layout.get("port") is not None else None,
        "gpus": None,
        "args": dict(layout.get("args") or {}) if isinstance(layout.get("args") or {}, dict) else {},
        "env": check_env(layout.get("env"), where),
        "engine": layout.get("engine"),
        "force": _bool(layout.get("force", False), f"{where} force"),
    }
    check_planner_env(out["env"], where)
    for key, value in out["args"].items():
        check_text(key, where, "args key")
        check_text(value, where, f"args.{key}")
    if layout.get("gpus") is not None:
        gpus = layout["gpus"]
        if isinstance(gpus, str):
            gpus = [g for g in gpus.split(",") if g.strip()]
        if not isinstance(gpus, list | tuple):
            raise PlanError(f"{where} gpus must be a list of device ids, e.g. gpus: [0, 1], not {gpus!r}")
        out["gpus"] = [_int(g, f"{where} gpus entry", minimum=0) for g in gpus]
    if not isinstance(layout.get("args") or {}, dict):
        raise PlanError(f"{where} args must be a mapping of SGLang flags, e.g. {{kv_cache_dtype: fp8_e4m3}}")
    return out


# A pd layout (prefill/decode disaggregation, plan/pd.py): its own keys, and each role's.
PD_LAYOUT_KEYS = {
    "name": "unique name, used in the unit names",
    "pd": "the prefill and decode roles, the transfer backend and the router",
    "port": "the router's HTTP port (default sglang_base_port); the servers take the ports after it",
    "args": "SGLang flags every server of both roles gets",
    "env": "environment variables every server of both roles gets",
}
PD_KEYS = {
    "prefill": "the prefill role: tp, dp, ep, pp, enable_dp_attention, nnodes, replicas, mem_fraction_static, ...",
    "decode": "the decode role: the same keys as prefill",
    "transfer_backend": "--disaggregation-transfer-backend (SGLang's default: mooncake)",
    "ib_device": "--disaggregation-ib-device, when one is named",
    "router": "the router's policies: policy, prefill_policy, decode_policy",
    "share_gpus": "let the roles share GPUs (decode, started after prefill, takes its mem_fraction_static of what prefill left)",
}
PD_ROLE_KEYS = {
    "tp": LAYOUT_KEYS["tp"],
    "pp": LAYOUT_KEYS["pp"],
    "ep": LAYOUT_KEYS["ep"],
    "dp": LAYOUT_KEYS["dp"],
    "enable_dp_attention": LAYOUT_KEYS["enable_dp_attention"],
    "nnodes": LAYOUT_KEYS["nnodes"],
    "replicas": "servers of this role, each on a GPU block of its own",
    "mem_fraction_static": "this role's --mem-fraction-static (default sglang_mem_fraction_static)",
    "gpus": "device ids of the role's one replica (default: the next free GPU block)",
    "port": "HTTP port of the role's first server (default: after the router's)",
    "bootstrap_port": "prefill only: --disaggregation-bootstrap-port of its first server (SGLang's default 8998)",
    "args": "SGLang flags of this role's servers",
    "env": "environment variables of this role's servers",
}
PD_ROUTER_KEYS = ("policy", "prefill_policy", "decode_policy")
# sglang-router's load-balancing policies
PD_ROUTER_POLICIES = ("random", "round_robin", "cache_aware", "power_of_two")
PD_DEFAULT_TRANSFER_BACKEND = "mooncake"  # SGLang 0.5.16's default
PD_DEFAULT_BOOTSTRAP_PORT = 8998  # SGLang 0.5.16's default
# set with pd's own keys, never under a role's args:
PD_FLAGS = {
    "disaggregation_mode": "the role (pd.prefill or pd.decode)",
    "disaggregation_transfer_backend": "pd.transfer_backend",
    "disaggregation_bootstrap_port": "pd.prefill.bootstrap_port",
    "disaggregation_ib_device": "pd.ib_device",
}


def _unknown(keys, known, where: str, hint: str) -> None:
    unknown = sorted(set(keys) - set(known))
    if unknown:
        hints = []
        for key in map(str, unknown):
            close = difflib.get_close_matches(key, list(known), n=1)
            hints.append(f"{key}" + (f" (did you mean {close[0]}?)" if close else ""))
        raise PlanError(f"{where} unknown key(s) {', '.join(hints)}. Known keys: {', '.join(known)}{hint}")


def normalize_pd(layout: dict) -> dict:
    """A pd layout: {name, pd: {prefill: {...}, decode: {...}, transfer_backend, ib_device, router,
    share_gpus}, port, args, env}, checked key by key."""
    base = normalize_layout({k: v for k, v in layout.items() if k != "pd" and k in LAYOUT_KEYS})
    name = base["name"]
    where = f"layout {name}:"
    _unknown(
        layout,
        PD_LAYOUT_KEYS,
        where,
        "; a pd layout's tp, ep, dp, replicas ... go under pd.prefill and pd.decode",
    )
    pd = layout["pd"]
    if not isinstance(pd, dict):
        raise PlanError(f"{where} pd must be a mapping with prefill: and decode:, not {kind_of(pd)}")
    _unknown(pd, PD_KEYS, f"{where} pd:", "")
    out = {
        "transfer_backend": str(pd.get("transfer_backend") or PD_DEFAULT_TRANSFER_BACKEND),
        "ib_device": None if pd.get("ib_device") in (None, "") else str(pd["ib_device"]),
        "share_gpus": _bool(pd.get("share_gpus", False), f"{where} pd.share_gpus"),
    }
    check_text(out["transfer_backend"], where, "pd.transfer_backend")
    check_text(out["ib_device"], where, "pd.ib_device")
    router = pd.get("router") or {}
    if not isinstance(router, dict):
        raise PlanError(f"{where} pd.router must be a mapping of policies, e.g. {{policy: cache_aware}}")
    _unknown(router, PD_ROUTER_KEYS, f"{where} pd.router:", "")
    for key, value in router.items():
        if str(value) not in PD_ROUTER_POLICIES:
            raise PlanError(
                f"{where} pd.router.{key} must be one of {', '.join(PD_ROUTER_POLICIES)}, not {value!r}"
            )
    out["router"] = {k: str(v) for k, v in router.items()}
    for role in ("prefill", "decode"):
        r = pd.get(role)
        if not isinstance(r, dict):
            raise PlanError(
                f"{where} pd.{role} must be a mapping like {{tp: 4}} (a pd layout has a prefill and a decode "
                f"role), not {kind_of(r)}"
            )
        known = {k: v for k, v in PD_ROLE_KEYS.items() if role == "prefill" or k != "bootstrap_port"}
        _unknown(r, known, f"{where} pd.{role}:", "")
        try:
            shape = normalize_layout(
                {"name": f"{name}-{role}", **{k: v for k, v in r.items() if k in LAYOUT_KEYS}}
            )
        except PlanError as e:  # said of the role's own key: pd.prefill.tp, not a layout of its own
            raise PlanError(str(e).replace(f"layout {name}-{role}: ", f"{where} pd.{role}.", 1)) from None
        for key in shape["args"]:
            plain = str(key).lstrip("-").replace("-", "_")
            if plain in PD_FLAGS:
                raise PlanError(
                    f"{where} pd.{role}.args.{key}: set it with {PD_FLAGS[plain]}, not under args:"
                )
        mfs = r.get("mem_fraction_static")
        shape["mem_fraction_static"] = (
            None if mfs is None else _float(mfs, f"{where} pd.{role}.mem_fraction_static")
        )
        shape["bootstrap_port"] = (
            check_port(
                r.get("bootstrap_port") or PD_DEFAULT_BOOTSTRAP_PORT, where, "pd.prefill.bootstrap_port"
            )
            if role == "prefill"
            else None
        )
        out[role] = shape
    for key in base["args"]:
        plain = str(key).lstrip("-").replace("-", "_")
        if plain in PD_FLAGS:
            raise PlanError(f"{where} args.{key}: set it with {PD_FLAGS[plain]}, not under args:")
    return {**base, "pd": out}


def normalize_cluster(cluster: dict | None, host: str | None) -> dict:
    """The inventory group a multi-node layout spans: host names and addresses in inventory order."""
    cluster = dict(cluster or {})
    for key in ("hosts", "addresses"):
        if cluster.get(key) is not None and not isinstance(cluster[key], list | tuple):
            raise PlanError(
                f"the cluster's {key} must be a list (sglang_cluster_group's hosts), not {cluster[key]!r}"
            )
    hosts = [str(h) for h in cluster.get("hosts") or ([host] if host else [])]
    given = list(cluster.get("addresses") or [])
    addresses = [
        str(given[i]) if i < len(given) and given[i] not in (None, "") else h for i, h in enumerate(hosts)
    ]
    return {
        "group": str(cluster.get("group") or "sglang_hosts"),
        "hosts": hosts,
        "addresses": addresses,
        "dist_init_port": check_port(
            cluster.get("dist_init_port") or 50000, "group variable", "sglang_dist_init_port"
        ),
        "host": host,
    }


def normalize_hardware(hw: dict) -> dict:
    if not isinstance(hw, dict):
        raise PlanError("hardware must be a mapping with gpu_count, gpu_memory_gib, gpu_interconnect")
    for key in ("gpu_count", "gpu_memory_gib"):
        if hw.get(key) in (None, ""):
            raise PlanError(
                f"{key} is not set for this host: run gpu_facts (playbooks/provision.yml) or set {key} in the inventory"
            )
    out = dict(hw)
    out["gpu_count"] = _int(hw["gpu_count"], "gpu_count")
    out["gpu_memory_gib"] = _float(hw["gpu_memory_gib"], "gpu_memory_gib")
    if out["gpu_memory_gib"] <= 0:
        raise PlanError(f"gpu_memory_gib must be positive, not {hw['gpu_memory_gib']!r}")
    ic = str(hw.get("gpu_interconnect") or "pcie").lower()
    if ic not in ("pcie", "nvlink", "none", "single"):
        raise PlanError(f"gpu_interconnect must be pcie, nvlink or none, not {hw.get('gpu_interconnect')!r}")
    out["gpu_interconnect"] = ic
    bw = hw.get("gpu_memory_bandwidth_gbs")
    out["gpu_memory_bandwidth_gbs"] = (
        _float(bw, "gpu_memory_bandwidth_gbs") if bw not in (None, "", "None") else None
    )
    return out


SERVING_DEFAULTS = {
    "mem_fraction_static": 0.88,
    "context_length": None,
    "max_running_requests": None,
    "attention_backend": None,
    "grammar_backend": None,
    "trust_remote_code": False,
    "host": "127.0.0.1",
    "base_port": 30000,
    "api_key_set": False,
    "kv_cache_dtype": None,
    "engine": "sglang",
    "gpu_memory_utilization": 0.9,
}


def normalize_serving(serving: dict) -> dict:
    out = dict(SERVING_DEFAULTS)
    out.update({k: v for k, v in (serving or {}).items() if v not in (None, "", "None")})
    out["trust_remote_code"] = _bool(out["trust_remote_code"], "sglang_trust_remote_code")
    out["api_key_set"] = _bool(out["api_key_set"], "api_key_set")
    if out["context_length"] is not None:
        out["context_length"] = _int(out["context_length"], "sglang_context_length")
    if out["max_running_requests"] is not None:
        out["max_running_requests"] = _int(out["max_running_requests"], "sglang_max_running_requests")
    out["base_port"] = check_port(out["base_port"], "group variable", "sglang_base_port")
    for key in ("host", "attention_backend", "grammar_backend", "kv_cache_dtype"):
        check_text(out.get(key), "serving:", f"sglang_{key}")
    secret_env = (serving or {}).get("secret_env")
    if secret_env is not None and (
        not isinstance(secret_env, list | tuple) or not all(isinstance(x, str) for x in secret_env)
    ):
        raise PlanError(
            "sglang_secret_env must be a list of names or patterns, e.g. ['HF_TOKEN', '*_KEY'], "
            f"not {kind_of(secret_env)}"
        )
    out["secret_env"] = secret_patterns(secret_env)
    check_bind("sglang_host", out["host"], out["api_key_set"])
    return out


def inputs_digest(inputs) -> str:
    """sha256 of the planner's inputs as canonical JSON: a stored plan of other inputs is stale."""
    text = json.dumps(inputs, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def plan_current(plan, inputs) -> bool:
    """Whether `plan` (the fact sglang_plan, or nothing yet) was made from these very inputs: then the
    roles read it as it is, and neither plan nor validate them again (the same inputs passed before)."""
    return (
        isinstance(plan, dict)
        and bool(plan.get("inputs_digest"))
        and plan["inputs_digest"] == inputs_digest(inputs)
    )
