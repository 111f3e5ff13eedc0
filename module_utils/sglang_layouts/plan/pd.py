"""Prefill/decode disaggregation as a layout: a `pd` layout planned as its roles.

A pd layout is prefill servers and decode servers behind one sglang-router (SGLang 0.5.16:
`--disaggregation-mode prefill|decode`, `--disaggregation-transfer-backend`,
`--disaggregation-bootstrap-port` on each prefill server, the router's `--pd-disaggregation
--prefill URL BOOTSTRAP_PORT --decode URL`). Each role is planned by planner.plan_layout as a
layout of its own (the same rules, memory and KV arithmetic), then placed: its replicas on GPU
blocks, their HTTP and bootstrap ports, the router in front. The decode pool holds the
conversations (every running request's whole KV cache); the prefill pool only the prompts in flight.

The entry is deployed like a replica layout: its `units` are the prefill servers, the decode
servers and the router, in start order (plan/placement.py); `router` names the router unit and `pd`
keeps each role's plan (memory, KV, units).
"""

from __future__ import annotations

from ..engines import SGLANG, engine_flags, is_simulated
from ..estimate.memory import CUDA_CONTEXT_GIB
from ..estimate.model import ModelSpec
from ..serve.render import unit_name
from .inputs import (
    _float,
    normalize_cluster,
    normalize_hardware,
    normalize_layout,
    normalize_pd,
    normalize_serving,
)
from .placement import add_probe_urls, placement
from .rules import parallel_shape, pd_gpu_problems, pd_tp_problems
from .validate import check_pd_ports, check_pd_reach, check_pd_transfer_backend

ROLES = ("prefill", "decode")
# What each transfer backend's KV transfer imports when a server starts, and the package that has it
# (SGLang 0.5.16: distributed/device_communicators/mooncake_transfer_engine.py for mooncake, and for
# mooncake_tcp, mooncake's engine over TCP; disaggregation/nixl/conn.py for nixl). A server that
# cannot import it dies after loading its weights ("Please install mooncake ..."): the preflight
# imports it first, with the unit's Python, environment and user.
TRANSFER_IMPORTS = {
    "mooncake": {"module": "mooncake.engine", "package": "mooncake-transfer-engine"},
    "mooncake_tcp": {"module": "mooncake.engine", "package": "mooncake-transfer-engine"},
    "nixl": {"module": "nixl._api", "package": "nixl"},
}
# sglang-router's own flags for the router: policies (docs/router.md)
ROUTER_POLICY_FLAGS = {
    "policy": "--policy",
    "prefill_policy": "--prefill-policy",
    "decode_policy": "--decode-policy",
}


def _with_flag(flags: list[str], flag: str, value: str) -> list[str]:
    """The same flags with `flag`'s value replaced (another replica: another port)."""
    out = list(flags)
    for i, arg in enumerate(out[:-1]):
        if arg == flag:
            out[i + 1] = value
    return out


def pd_engine(serving: dict) -> str:
    """The engine of a pd layout: SGLang, or its simulator where the inventory runs the simulator
    (vLLM has no pd layouts here)."""
    name = str(serving.get("engine") or SGLANG.name).lower()
    return name if is_simulated(name) else SGLANG.name


def _role_layout(
    name: str, pd: dict, role: str, lay: dict, gpus: list[int], port: int, bootstrap, engine: str = "sglang"
) -> dict:
    """The plain layout planner.plan_layout plans for one replica of a role."""
    r = pd[role]
    args = {**lay["args"], **r["args"]}
    if r["mem_fraction_static"] is not None:
        args["mem_fraction_static"] = r["mem_fraction_static"]
    # the benchmark reads each level's prefill/transfer split from the decode servers' /metrics
    args.setdefault("enable_metrics", True)
    args["disaggregation_mode"] = role
    args["disaggregation_transfer_backend"] = pd["transfer_backend"]
    if pd["ib_device"]:
        args["disaggregation_ib_device"] = pd["ib_device"]
    if bootstrap is not None:
        args["disaggregation_bootstrap_port"] = bootstrap
    return {
        "name": f"{name}-{role}",
        **{k: r[k] for k in ("tp", "pp", "ep", "dp", "enable_dp_attention", "nnodes")},
        "gpus": gpus,
        "port": port,
        "args": args,
        "env": {**lay["env"], **r["env"]},
        "engine": engine,
    }


def _blocks(pd: dict, par_gpus: dict, hosts: list, gpu_count: int) -> tuple[dict, list[str]]:
    """Each role's replicas on (host index, GPU ids): prefill first, decode after, a block never
    split over two hosts; with share_gpus each role starts again at the first GPU."""
    out: dict[str, list] = {}
    problems: list[str] = []
    cursor = (0, 0)
    for role in ROLES:
        r = pd[role]
        if pd["share_gpus"]:
            cursor = (0, 0)
        need = par_gpus[role]
        placed = []
        for _replica in range(r["replicas"]):
            if r["gpus"] is not None:
                placed.append((0, list(r["gpus"])))
                continue
            host_i, first = cursor
            if first + need > gpu_count:
                host_i, first = host_i + 1, 0
            if need > gpu_count or host_i >= len(hosts):
                problems.append(
                    f"the {role} role's {r['replicas']} replica(s) of {need} GPUs do not fit on "
                    f"{len(hosts)} host(s) of {gpu_count} GPUs after the roles before it; "
                    "use fewer replicas or GPUs, share_gpus: true, or more hosts in the group."
                )
                break
            placed.append((host_i, list(range(first, first + need))))
            cursor = (host_i, first + need)
        out[role] = placed
    return out, problems


def role_lines(name: str, lines: dict[str, list[str]]) -> list[str]:
    """Each role's reasons or notes as the pd layout's: "<name>: <role>: <the role's own text>" (the
    role layout's name <name>-<role> taken off its front). A role uses part of the host by design,
    so the rules' "<role layout> uses N of the M GPUs" note says nothing here and is left out."""
    out = []
    for role, texts in lines.items():
        prefix = f"{name}-{role}: "
        for text in texts:
            if text.startswith(f"{name}-{role} uses "):
                continue
            out.append(f"{name}: {role}: {text[len(prefix) :] if text.startswith(prefix) else text}")
    return out


def plan_pd_layout(
    layout: dict,
    spec: ModelSpec,
    hardware: dict,
    serving: dict,
    cluster: dict | None = None,
    sglang_version: str | None = None,
) -> dict:
    """One pd layout's plan entry: each role's plan (memory, KV, units), the router, the verdict."""
    from .planner import ROUTER_LAUNCHER, plan_layout

    lay = normalize_pd(layout)
    name, pd = lay["name"], lay["pd"]
    hardware = normalize_hardware(hardware)
    serving_n = normalize_serving(serving)
    cluster = cluster or normalize_cluster(None, None)
    flags = engine_flags(SGLANG, sglang_version)
    check_pd_transfer_backend(name, pd["transfer_backend"], flags)
    hosts = cluster["hosts"] or [cluster["host"]]
    addresses = cluster["addresses"] or hosts
    base = lay["port"] or int(serving_n["base_port"])
    engine = pd_engine(serving_n)

    # the shape of each role decides its GPUs per replica (rules, as for any layout)
    reasons: list[str] = []
    notes: list[str] = []
    per_replica = {
        role: parallel_shape(normalize_layout(_role_layout(name, pd, role, lay, None, base, None)), SGLANG)[
            "gpus_per_engine"
        ]
        for role in ROLES
    }
    reasons += [f"{name}: {r}" for r in pd_tp_problems(pd, spec)]
    placed, problems = _blocks(pd, per_replica, hosts, hardware["gpu_count"])
    reasons += [f"{name}: {p}" for p in problems]
    for role in ROLES:
        if pd[role]["nnodes"] > 1:
            reasons.append(
                f"{name}: the {role} role spans {pd[role]['nnodes']} nodes; multi-node roles are not "
                "planned yet: use replicas: (one host each) instead."
            )

    # HTTP ports: the router on the layout's port, then prefill replicas, then decode replicas
    ports: dict[str, list[int]] = {}
    nxt = base + 1
    for role in ROLES:
        first = pd[role]["port"] or nxt
        ports[role] = [first + i for i in range(pd[role]["replicas"])]
        nxt = max(nxt, ports[role][-1] + 1)
    bootstrap = [pd["prefill"]["bootstrap_port"] + i for i in range(pd["prefill"]["replicas"])]

    # A decode server on a GPU a prefill server also uses starts second (start_wave 1), once that
    # prefill server is ready, and SGLang sizes its static pool from the memory free at its own start:
    # the card less the prefill server's CUDA context and static pool (its fraction of what was free
    # at its start, context gone). The prefill server's CUDA graphs and activations outside its pool
    # are not counted here.
    prefill_gpus = {(host_i, g) for host_i, gpus in placed.get("prefill") or [] for g in gpus}

    def after_prefill(host_i: int, gpus: list) -> list:
        return sorted(g for g in gpus if (host_i, g) in prefill_gpus)

    roles: dict[str, dict] = {}
    subs: dict[str, dict] = {}
    for role in ROLES:
        blocks = placed.get(role) or []
        gpus0 = blocks[0][1] if blocks else None
        hw = dict(hardware)
        shared = after_prefill(*blocks[0]) if role == "decode" and blocks else []
        if shared:
            left = 1 - _float(roles["prefill"][SGLANG.fraction_key], "mem_fraction_static")
            # a prefill fraction outside (0, 1) is refused in the prefill role's own reasons
            if 0 < left < 1:
                hw["gpu_memory_gib"] = round((hardware["gpu_memory_gib"] - CUDA_CONTEXT_GIB) * left, 2)
                notes.append(
                    f"{name}: decode shares GPU(s) {shared} with prefill and starts after it: planned on "
                    f"the {hw['gpu_memory_gib']:g} GiB the prefill server's CUDA context and mem_fraction_static "
                    "leave; its CUDA graphs and activations outside that pool leave the decode pool smaller "
                    "(SGLang 0.5.16's prefill server captures prefill CUDA graphs too)."
                )
        sub = plan_layout(
            _role_layout(
                name,
                pd,
                role,
                lay,
                gpus0,
                ports[role][0],
                bootstrap[0] if role == "prefill" else None,
                engine,
            ),
            spec,
            hw,
            serving,
            cluster,
            sglang_version,
        )
        units = []
        for i, (host_i, gpus) in enumerate(blocks):
            port = ports[role][i]
            unit_flags = _with_flag(sub["flags"], "--port", str(port))
            extra_ports = []
            if role == "prefill":
                unit_flags = _with_flag(unit_flags, "--disaggregation-bootstrap-port", str(bootstrap[i]))
                extra_ports = [bootstrap[i]]
            env = dict(sub["env"])
            env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, gpus))
            host = hosts[host_i]
            transfer = TRANSFER_IMPORTS.get(pd["transfer_backend"]) if engine == "sglang" else None
            units.append(
                {
                    "name": unit_name(spec.name, f"{name}-{role}{i}", SGLANG.unit_prefix),
                    "role": role,
                    "host": host,
                    "address": addresses[host_i],
                    "node_rank": None,
                    "index": i,
                    "gpu_ids": gpus,
                    "start_wave": 1 if role == "decode" and after_prefill(host_i, gpus) else 0,
                    "port": port,
                    "argv": [*SGLANG.launcher, *unit_flags],
                    "env": env,
                    "gate": "ready",
                    "ports": extra_ports,
                    "bootstrap_port": bootstrap[i] if role == "prefill" else None,
                    # Python modules the server imports at start beyond SGLang's own (preflight)
                    "imports": [{**transfer, "for": f"pd.transfer_backend {pd['transfer_backend']}"}]
                    if transfer
                    else [],
                    # where the router reaches it (loopback on the router's host), set below
                    "url": None,
                }
            )
        groups = sub["parallel"]["dp"] if sub["parallel"]["dp"] > 1 else 1
        subs[role] = sub
        roles[role] = {
            "verdict": sub["verdict"],
            "failure": sub["failure"],
            "reasons": sub["reasons"],
            "notes": sub["notes"],
            "parallel": sub["parallel"],
            "replicas": pd[role]["replicas"],
            "gpus_per_replica": per_replica[role],
            "gpus_used": per_replica[role] * pd[role]["replicas"],
            SGLANG.fraction_key: sub[SGLANG.fraction_key],
            "gpu_memory_gib": hw["gpu_memory_gib"],
            "weights_gib_per_gpu": sub["weights_gib_per_gpu"],
            "budget_gib": sub["budget_gib"],
            "kv_tokens": sub["kv_tokens"],
            "kv_tokens_total": (sub["kv_tokens"] or 0) * groups * pd[role]["replicas"],
            "kv_pool": sub["kv_pool"],
            "kv_bytes_per_token": sub["kv_bytes_per_token"],
            "ranks": sub["ranks"],
            "cost": sub["cost"],
            "holds": (
                "the prompts in flight: a request's KV leaves for a decode server once its prefill is done"
                if role == "prefill"
                else "the conversations: every running request's whole KV cache, for as long as it decodes"
            ),
            "units": units,
        }

    if not problems:
        reasons += [
            f"{name}: {r}"
            for r in pd_gpu_problems(pd, placed, roles, hosts, float(hardware["gpu_memory_gib"]))
        ]
    # the layout's own rules first: they decide invalid before either role's memory verdict
    rules_refuse = bool(reasons)

    # a role alone leaves GPUs idle that the other role uses: the layout's GPUs are counted above
    reasons += role_lines(name, {role: roles[role]["reasons"] for role in ROLES})
    notes += role_lines(name, {role: roles[role]["notes"] for role in ROLES})

    router_host_i = 0
    router_host = hosts[router_host_i]

    def url(unit: dict) -> str:
        at = "127.0.0.1" if unit["host"] == router_host else unit["address"]
        return f"http://{at}:{unit['port']}"

    for role in ROLES:
        for unit in roles[role]["units"]:
            unit["url"] = url(unit)
    router_flags = ["--pd-disaggregation"]
    for unit in roles["prefill"]["units"]:
        router_flags += ["--prefill", url(unit), str(unit["bootstrap_port"])]
    for unit in roles["decode"]["units"]:
        router_flags += ["--decode", url(unit)]
    router_flags += ["--host", str(serving_n["host"]), "--port", str(base)]
    for key, flag in ROUTER_POLICY_FLAGS.items():
        if pd["router"].get(key):
            router_flags += [flag, str(pd["router"][key])]
    # one Prometheus listener per router (29000 by default), as for replicas behind a router
    router_flags += ["--prometheus-port", str(base + 1000)]
    router_unit = {
        "name": unit_name(spec.name, f"{name}-router", SGLANG.unit_prefix),
        "role": "router",
        "host": router_host,
        "address": addresses[router_host_i],
        "node_rank": None,
        "index": None,
        "gpu_ids": [],
        "start_wave": 0,
        "port": base,
        "argv": [*ROUTER_LAUNCHER, *router_flags],
        "env": {},
        "gate": "router",
        "ports": [base + 1000],
    }
    all_units = [*roles["prefill"]["units"], *roles["decode"]["units"], router_unit]
    check_pd_ports(name, all_units, lay["port"] is not None)
    check_pd_reach(name, all_units, router_host, str(serving_n["host"]))

    verdicts = [roles[r]["verdict"] for r in ROLES]
    if rules_refuse or "invalid" in verdicts:
        verdict, failure = "invalid", "invalid"
    elif "oom" in verdicts:
        verdict = "oom"
        failure = next(roles[r]["failure"] for r in ROLES if roles[r]["verdict"] == "oom")
    else:
        verdict, failure = "fits", None
    here = cluster["host"]
    gpu_ids = sorted(
        {g for u in all_units if u["host"] in (here, None) or here is None for g in u["gpu_ids"]}
    )
    shared_gpus = {(u["host"], g) for u in all_units for g in u["gpu_ids"]}
    plan = {
        "name": name,
        "engine": engine,
        "verdict": verdict,
        "failure": failure,
        "reasons": reasons,
        "notes": notes,
        "gpus_used": len(shared_gpus),
        "gpu_ids": gpu_ids,
        "nnodes": 1,
        "node_rank": 0,
        "nodes": sorted({u["host"] for u in all_units}, key=hosts.index),
        "parallel": None,
        "weights_gib_per_gpu": max((roles[r]["weights_gib_per_gpu"] or 0) for r in ROLES) or None,
        "budget_gib": None,
        "kv_tokens": roles["decode"]["kv_tokens"],
        "kv_tokens_total": roles["decode"]["kv_tokens_total"],
        "kv_pool": roles["decode"]["kv_pool"],
        "kv_bytes_per_token": roles["decode"]["kv_bytes_per_token"],
        "ranks": [],
        "cost": None,
        "port": base,
        "unit_name": router_unit["name"],
        "conflicts": [],
        SGLANG.fraction_key: None,
        "force": False,
        "load_format": subs["decode"]["load_format"],
        "dummy_weights": subs["decode"]["dummy_weights"],
        "flags": [],
        # no one server command line: each unit has its own (units below)
        "argv": [],
        "env": {},
        "secret_env": sorted({k for role in ROLES for k in subs[role]["secret_env"]}),
        "pd": {
            "transfer_backend": pd["transfer_backend"],
            "ib_device": pd["ib_device"],
            "share_gpus": pd["share_gpus"],
            "bootstrap_ports": bootstrap,
            "hosts": sorted({u["host"] for u in all_units}, key=hosts.index),
            "prefill": roles["prefill"],
            "decode": roles["decode"],
            "router": {**router_unit, "policies": dict(pd["router"]), "units": [router_unit]},
            "start_order": ["prefill", "decode", "router"],
        },
        "router": {
            "unit_name": router_unit["name"],
            "host": router_host,
            "port": base,
            "argv": router_unit["argv"],
            "policies": dict(pd["router"]),
        },
        "units": all_units,
    }
    plan["placement"] = placement(plan, here)
    add_probe_urls(plan, serving_n["host"])
    return plan
