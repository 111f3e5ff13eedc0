"""One rule per kind of value that reaches the engine, wherever the value is given.

A value reaches SGLang by a structural key (port:, gpus:), a layout's args: or env:, or a group
variable (sglang_host, sglang_base_port, sglang_service_extra_env, ...). Each kind (a bind address, a
secret, a port, a GPU set, a number with a range, a layout name) has one check here, and the planner
runs it on the value as the engine will get it, naming where it was given. Every refusal is a
PlanError of one or two lines: the key, where it came from, what to write instead; a secret's value
is never part of it. The planner runs these before it returns a plan, so a refused input writes
nothing (no plan JSON, no unit, no record).
"""

from __future__ import annotations

from ..estimate.model import PlanError, kind_of
from ..names import NAME_RULE, layout_name_problem, suggest
from ..secrets import carries_credential

LOOPBACK = ("127.0.0.1", "localhost", "::1")
# The service runs as an unprivileged user (roles/sglang_service): it cannot bind below 1024.
FIRST_PORT, LAST_PORT = 1024, 65535
# SGLang flags whose value is a credential: by the flag's own name in the engine's flag table.
_SECRET_WORDS = ("key", "password", "passwd", "secret", "credential", "credentials")
_SECRET_TOKENS = ("hf_token", "auth_token", "access_token", "api_token")
# Flags that take one value or a list (argparse nargs), from the flag table.
_MANY = ("+", "*")


def _type(value) -> str:
    return kind_of(value)


# ---------------------------------------------------------------------------
# The planner's inputs as a whole (before any layout is planned)
# ---------------------------------------------------------------------------


def check_inputs(inputs) -> None:
    """The shapes every later step relies on: mappings and lists where they belong, layout names."""
    if not isinstance(inputs, dict):
        raise PlanError(f"the planner's input (sglang_plan_inputs) must be a mapping, not {_type(inputs)}")
    layouts = inputs.get("layouts")
    if isinstance(layouts, str):
        raise PlanError(
            "sglang_layouts is a string, not a list: on the command line give it as JSON, "
            """e.g. -e '{"sglang_layouts": [{"name": "tp8", "tp": 8}]}' (key=value makes a string)."""
        )
    if layouts in (None, []) and inputs.get("search") is not None:
        layouts = inputs["layouts"] = []  # sglang_layout_search alone: the search makes the layouts
    elif not isinstance(layouts, list) or not layouts:
        raise PlanError("sglang_layouts must be a non-empty list of layouts, e.g. [{name: tp8, tp: 8}]")
    for i, layout in enumerate(layouts, 1):
        if not isinstance(layout, dict):
            raise PlanError(
                f"sglang_layouts entry {i} must be a mapping like {{name: tp8, tp: 8}}, not {_type(layout)}"
            )
        name = layout.get("name")
        if name is None or name == "":
            raise PlanError(f"sglang_layouts entry {i} has no name: every layout needs one, e.g. name: tp8")
        if isinstance(name, str):
            from .inputs import check_text

            check_text(name, f"sglang_layouts entry {i}:", "name")
        problem = layout_name_problem(name)
        if problem:
            shown = (
                repr(name)
                if isinstance(name, str) and len(name) <= 40 and name.isprintable()
                else f"entry {i}"
            )
            hint = f"e.g. name: {suggest(name)}" if isinstance(name, str) else ""
            raise PlanError(f"sglang_layouts {shown}: name {problem}. {hint}".rstrip())
    model = inputs.get("model")
    if not isinstance(model, dict):
        raise PlanError(
            f"sglang_model must be a mapping with name and path (the folder on the GPU host), not {_type(model)}; "
            "e.g. sglang_model: {name: deepseek-v3, path: /models/DeepSeek-V3}"
        )
    check_model(model)
    for key in ("hardware", "serving", "cluster"):
        if inputs.get(key) is not None and not isinstance(inputs[key], dict):
            raise PlanError(f"sglang_plan_inputs.{key} must be a mapping, not {_type(inputs[key])}")


def check_model(model: dict) -> None:
    """sglang_model: a name and a path; a missing path must not become the model name (SGLang would
    then fetch the name from the Hub)."""
    name, path = model.get("name"), model.get("path")
    if not isinstance(name, str) or not name.strip():
        raise PlanError(f"sglang_model.name must be text, e.g. name: deepseek-v3, not {_type(name)}")
    if path in (None, "", "None"):
        raise PlanError(
            "sglang_model.path is not set: write the model's folder on the GPU host (path: /models/X), "
            "or its Hugging Face id (path: org/name) to let SGLang download it"
        )
    if not isinstance(path, str):
        raise PlanError(f"sglang_model.path must be text (a folder or a Hub id), not {_type(path)}")
    for key in ("hf_config_file", "load_format"):
        if model.get(key) not in (None, "") and not isinstance(model[key], str):
            raise PlanError(f"sglang_model.{key} must be text, not {_type(model[key])}")


# ---------------------------------------------------------------------------
# Ports
# ---------------------------------------------------------------------------


def check_port(port, where: str, what: str = "port") -> int:
    """A TCP port the unprivileged service user can bind."""
    if isinstance(port, bool) or not isinstance(port, int | str | float):
        raise PlanError(f"{where} {what} must be a port number ({FIRST_PORT}-{LAST_PORT}), not {_type(port)}")
    try:
        n = int(str(port).strip())
    except ValueError:
        raise PlanError(
            f"{where} {what} must be a port number ({FIRST_PORT}-{LAST_PORT}), not {port!r}"
        ) from None
    if not FIRST_PORT <= n <= LAST_PORT:
        why = (
            "the service runs as an unprivileged user, which cannot bind below 1024"
            if 0 < n < FIRST_PORT
            else "TCP ports end at 65535"
        )
        raise PlanError(
            f"{where} {what} {n} is out of range: {why}. Write a port in {FIRST_PORT}-{LAST_PORT}."
        )
    return n


def check_layout_ports(plan: dict, port_given: bool) -> None:
    """Every port a layout opens, as planned: its own, its replicas' and router's, the rendezvous."""
    name = plan["name"]
    where = f"layout {name}:"
    given = "port" if port_given else "sglang_base_port"
    if plan.get("replicas"):
        last = plan["port"] + len(plan["replicas"])
        metrics = plan["port"] + 1000
        if max(last, metrics) > LAST_PORT:
            raise PlanError(
                f"{where} {given} {plan['port']} leaves no room for its {len(plan['replicas'])} replicas "
                f"(port + 1..{len(plan['replicas'])}) and the router's metrics (port + 1000). "
                f"Write a port of at most {LAST_PORT - 1000}."
            )
    dist = (plan.get("parallel") or {}).get("dist_init_addr")
    if dist and int(str(dist).rsplit(":", 1)[-1]) == plan["port"]:
        raise PlanError(
            f"{where} the rendezvous port sglang_dist_init_port {plan['port']} is also node rank 0's HTTP "
            f"{given}: one of them cannot bind. Give the layout another port:, or change sglang_dist_init_port."
        )


# ---------------------------------------------------------------------------
# Secrets
# ---------------------------------------------------------------------------


def secret_flag(flag: str, meta: dict) -> bool:
    """Whether an engine flag takes a credential (--api-key, --admin-api-key, --ssl-keyfile-password, ...)."""
    if not meta.get("takes_value"):
        return False
    dest = str(meta.get("dest") or flag.lstrip("-").replace("-", "_")).lower()
    words = dest.split("_")
    return words[-1] in _SECRET_WORDS or dest == "token" or dest.endswith(_SECRET_TOKENS)


# ---------------------------------------------------------------------------
# args: values as the engine's parser will read them
# ---------------------------------------------------------------------------


def _arg_key(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def check_arg_values(name: str, args: dict, flags: dict, eng, api_key_set: bool) -> None:
    """args: values SGLang would reject, misread, or show to every user of the host (argv is public)."""
    where = f"layout {name}: args.{{}}"
    for flag, value in args.items():
        key = where.format(_arg_key(flag))
        meta = flags.get(flag) or {}
        if secret_flag(flag, meta):
            instead = (
                "put the key in sglang_api_key (vaulted: ansible-vault encrypt_string); the unit reads it from a file"
                if flag == "--api-key"
                else "this tool does not pass it on the command line; leave it out"
            )
            raise PlanError(
                f"{key} is a credential ({flag}): the plan JSON and the unit's ExecStart= would show it "
                f"(the value is not shown here). Remove it: {instead}."
            )
        if value is None:
            raise PlanError(
                f"{key} is null (SGLang would get the text 'None'): give a value, or remove the key."
            )
        if isinstance(value, dict):
            raise PlanError(
                f"{key} is a mapping (SGLang would get its Python text): give {flag} one value"
                + (", e.g. a JSON string in quotes." if "config" in flag else ".")
            )
        if isinstance(value, list | tuple):
            if meta.get("nargs") not in _MANY:
                raise PlanError(f"{key} is a list, but {flag} takes one value: write one value, not a list.")
            bad = [v for v in value if isinstance(v, dict | list | tuple) or v is None]
            if bad:
                raise PlanError(f"{key}: each value of {flag} must be text or a number, not {_type(bad[0])}.")
        values = value if isinstance(value, list | tuple) else [value]
        if any(carries_credential(v) for v in values):
            raise PlanError(
                f"{key} carries a credential (a password inside a URL; the value is not shown): the plan and "
                "the unit would show it. Give the URL without user:password@."
            )
        if flag == "--config" and api_key_set and eng.api_key_config_key:
            raise PlanError(
                f"{key}: with sglang_api_key set the unit already passes {eng.label} a --config file (the key's); "
                "a second --config would replace it. Write the file's flags under args: instead."
            )


# One range rule per serving value, wherever it is given (a group variable or a layout's args:).
_SERVING_NUMBERS = {
    "context_length": "sglang_context_length",
    "max_running_requests": "sglang_max_running_requests",
}


def check_serving_overrides(name: str, args: dict, eng) -> None:
    """A serving value given under args: meets the rule of its group variable."""
    for key, flag in eng.serving_flags.items():
        if flag not in args or key not in _SERVING_NUMBERS:
            continue
        var = _SERVING_NUMBERS[key]
        value = args[flag]
        if isinstance(value, bool) or not isinstance(value, int | str | float):
            continue  # check_arg_values names the type
        try:
            n = int(str(value).strip())
        except ValueError:
            n = None
        if n is None or n < 1:
            raise PlanError(
                f"layout {name}: args.{key} must be a whole number >= 1 (like {var}), not {value!r}; "
                "leave it out for the model's own."
            )


def check_bind(source: str, host, api_key_set: bool) -> str:
    """The address a server binds, wherever it was set (sglang_host, a layout's args.host): a public
    one needs the API key."""
    host = str(host)
    if host not in LOOPBACK and not api_key_set:
        raise PlanError(
            f"{source} is {host} (a public address) but no sglang_api_key is set: anyone who reaches the host "
            "could use the server. Set sglang_api_key (vaulted: ansible-vault encrypt_string), or bind 127.0.0.1."
        )
    return host


# ---------------------------------------------------------------------------
# Environment: the GPU set and the layer partition belong to the planner
# ---------------------------------------------------------------------------

# Variables whose value the planner decides from the layout's keys.
PLANNER_ENV = {"CUDA_VISIBLE_DEVICES": "gpus: (the device ids the planner gives the layout)"}


def check_planner_env(env: dict, where: str) -> None:
    for var, instead in PLANNER_ENV.items():
        if var in (env or {}):
            raise PlanError(
                f"{where} {var} would override the GPUs the planner chose for the layout; set {instead} instead."
            )


def check_service_env(env) -> None:
    """sglang_service_extra_env: every unit's environment, checked like a layout's env: before anything
    is written (the service role would otherwise stop on it after the plan JSON was)."""
    from .inputs import check_env

    check_planner_env(
        check_env(env, "group variable", "sglang_service_extra_env"), "sglang_service_extra_env:"
    )


def pp_partition(env: dict, name: str, pp: int, num_layers: int) -> list[int] | None:
    """SGLANG_PP_LAYER_PARTITION from the layout's environment (the engine's, not the controller's)."""
    raw = (env or {}).get("SGLANG_PP_LAYER_PARTITION")
    if raw in (None, ""):
        return None
    try:
        sizes = [int(x) for x in str(raw).split(",")]
    except ValueError:
        sizes = []
    if len(sizes) != pp or sum(sizes) != num_layers or min(sizes, default=0) < 1:
        raise PlanError(
            f"layout {name}: env.SGLANG_PP_LAYER_PARTITION {raw!r} must be {pp} layer counts >= 1, comma-"
            f"separated, summing to the model's {num_layers} layers (pp {pp})."
        )
    return sizes


# ---------------------------------------------------------------------------
# Replicas over hosts: the router must reach every replica
# ---------------------------------------------------------------------------


def check_replica_reach(plan: dict, bind: str) -> None:
    router = (plan.get("router") or {}).get("host")
    away = sorted({r["host"] for r in plan.get("replicas") or [] if r["host"] != router})
    if away and bind in LOOPBACK:
        raise PlanError(
            f"layout {plan['name']}: its replicas on {', '.join(away)} bind {bind}, but the router on {router} "
            "calls them at those hosts' addresses. Set sglang_host: 0.0.0.0 with sglang_api_key (vaulted), or "
            "fewer replicas (one host)."
        )


# ---------------------------------------------------------------------------
# Prefill/decode disaggregation (plan/pd.py)
# ---------------------------------------------------------------------------


def check_pd_transfer_backend(name: str, backend: str, flag_table: dict) -> None:
    """pd.transfer_backend: one of --disaggregation-transfer-backend's choices in the host's SGLang."""
    version = flag_table.get("sglang_version", "?")
    meta = (flag_table.get("flags") or {}).get("--disaggregation-transfer-backend")
    if meta is None:
        raise PlanError(
            f"layout {name}: SGLang {version} has no --disaggregation-transfer-backend, so it cannot run a pd "
            "layout. Pin an SGLang that has it (sglang_version: 0.5.16 or later)."
        )
    choices = [str(c) for c in meta.get("choices") or []]
    if backend == "fake":
        # server_args (arg_groups/pd_disaggregation_hook.py) asserts it on a prefill server: `fake`
        # serves a decode server tested alone, without prefill servers
        raise PlanError(
            f"layout {name}: pd.transfer_backend 'fake' is refused by SGLang's prefill server (\"Prefill server "
            "does not support 'fake' as the transfer backend\"); write mooncake (RDMA), mooncake_tcp (no RDMA) "
            "or nixl."
        )
    if choices and backend not in choices:
        raise PlanError(
            f"layout {name}: pd.transfer_backend {backend!r} is not one SGLang {version} accepts "
            f"(--disaggregation-transfer-backend: {', '.join(choices)}). Write e.g. mooncake (RDMA) or "
            "mooncake_tcp (no RDMA)."
        )


def check_pd_ports(name: str, units: list, port_given: bool) -> None:
    """Every port a pd layout opens on one host, once: servers' HTTP, prefill bootstrap, router's."""
    seen: dict[tuple, str] = {}
    given = "port" if port_given else "sglang_base_port"
    for unit in units:
        opened = [
            (
                unit["port"],
                f"the HTTP port of {unit['role']} {unit['index'] if unit['index'] is not None else ''}",
            )
        ]
        for extra in unit.get("ports") or []:
            what = "bootstrap port" if unit["role"] == "prefill" else "metrics port (--prometheus-port)"
            opened.append(
                (extra, f"the {what} of {unit['role']} {unit['index'] if unit['index'] is not None else ''}")
            )
        for port, what in opened:
            what = what.rstrip()
            check_port(port, f"layout {name}:", what)
            other = seen.get((unit["host"], port))
            if other is not None:
                raise PlanError(
                    f"layout {name}: port {port} on {unit['host']} is both {other} and {what}: the second server "
                    f"cannot bind it. Give pd.prefill.bootstrap_port, pd.<role>.port or the layout's {given} "
                    "other values."
                )
            seen[(unit["host"], port)] = what


def check_pd_reach(name: str, units: list, router_host, bind: str) -> None:
    """The router calls servers on other hosts at their addresses: a loopback bind cannot answer."""
    away = sorted({u["host"] for u in units if u["role"] != "router" and u["host"] != router_host})
    if away and bind in LOOPBACK:
        raise PlanError(
            f"layout {name}: its servers on {', '.join(map(str, away))} bind {bind}, but the router on {router_host} "
            "calls them at those hosts' addresses. Set sglang_host: 0.0.0.0 with sglang_api_key (vaulted), or "
            "keep the layout on one host."
        )


def plan_outcome(inputs) -> dict:
    """{"plan": the plan document} or {"refused": the planner's message}: a refusal as data, which the
    role prints once (a raised filter error is printed with its whole cause chain)."""
    from .planner import plan_host

    try:
        return {"plan": plan_host(inputs)}
    except PlanError as e:
        return {"refused": str(e)}


__all__ = ["NAME_RULE", "check_inputs", "check_port", "plan_outcome", "secret_flag"]
