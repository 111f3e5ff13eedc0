"""Where a layout runs: its units, the hosts they run on, and how the nodes' outcomes combine.

A layout is a list of units, each one process under systemd or the supervisor:
- a plain layout: one `server` unit on the planned host;
- a multi-node layout (nnodes > 1): one `server` unit per node, node rank r on the r-th host of
  the group; node rank 0 serves HTTP and is gated for readiness, the others for liveness;
- a replica layout: N `replica` units on the hosts' GPU blocks and one `router` unit in front;
- a pd layout (plan/pd.py): `prefill` and `decode` units and one `router` unit in front, planned
  with their units already; it is placed as a replica layout is (the router serves and records).

The planner puts `units` and `placement` into every layout plan; the service role loops over the
units of its host and never works out placement itself.
"""

from __future__ import annotations

from ..engines import ENGINES
from ..estimate.model import PlanError

# Each unit's `gate` says how it is judged after its start (library/sglang_health.py): `ready` waits
# for the server's readiness, `alive` checks that it still runs and logged nothing fatal (a node rank
# >= 1 serves no HTTP), `router` is the router's own check (every replica registered and healthy).

# Addresses that mean "every address of the host": probed through loopback.
_ANY_ADDRESS = ("", "0.0.0.0", "::")


def probe_host(bind: str | None) -> str:
    """Where the host itself reaches a server bound to `bind` (sglang_host)."""
    host = str(bind or "")
    return "127.0.0.1" if host in _ANY_ADDRESS else host


def add_probe_urls(plan: dict, bind: str | None) -> None:
    """Each unit's `probe_url` (its health, readiness and facts, from its own host) and the layout's
    `placement.api_url` (its server, node rank 0, or its router), for servers bound to `bind`."""
    host = probe_host(bind)
    host = f"[{host}]" if ":" in host else host
    for unit in plan["units"]:
        unit["probe_url"] = f"http://{host}:{unit['port']}"
    plan["placement"]["api_url"] = f"http://{host}:{plan['port']}"


def _server_unit(plan: dict, host, node_rank, argv: list, gate: str) -> dict:
    return {
        "name": plan["unit_name"],
        "role": "server",
        "host": host,
        "node_rank": node_rank,
        "index": None,
        "gpu_ids": list(plan["gpu_ids"]),
        "port": plan["port"],
        "argv": list(argv),
        "env": dict(plan["env"]),
        "gate": gate,
        "ports": [],
        "start_wave": 0,
    }


def _with_node_rank(argv: list, rank: int) -> list:
    """The same command line for another node: only --node-rank differs between the nodes."""
    out = list(argv)
    for i, arg in enumerate(out[:-1]):
        if arg == "--node-rank":
            out[i + 1] = str(rank)
    return out


# Roles stopped in the second phase, after the router in front of them.
BEHIND_ROUTER = ("replica", "prefill", "decode")


def layout_units(plan: dict) -> list[dict]:
    """Every unit of a layout plan, over all its hosts, in start order (replicas before the router)."""
    if plan.get("pd"):
        return [dict(u) for u in plan["units"]]  # planned with its units (plan/pd.py)
    if plan.get("replicas") and plan.get("router"):
        units = [
            {
                "name": r["unit_name"],
                "role": "replica",
                "host": r["host"],
                "node_rank": None,
                "index": r["index"],
                "gpu_ids": list(r["gpu_ids"]),
                "port": r["port"],
                "argv": [*plan["argv"][:3], *r["flags"]],
                "env": dict(r["env"]),
                "gate": "ready",
                "ports": [],
                "start_wave": 0,
            }
            for r in plan["replicas"]
        ]
        router = plan["router"]
        units.append(
            {
                "name": router["unit_name"],
                "role": "router",
                "host": router["host"],
                "node_rank": None,
                "index": None,
                "gpu_ids": [],
                "port": router["port"],
                "argv": list(router["argv"]),
                "env": {},
                "gate": "router",
                # every router opens its Prometheus listener (--prometheus-port): a taken one kills its API
                "ports": [router["port"] + 1000],
                "start_wave": 0,
            }
        )
        return units
    if plan.get("nnodes", 1) > 1 and plan.get("nodes"):
        dist = (plan.get("parallel") or {}).get("dist_init_addr")
        units = []
        for rank, node in enumerate(plan["nodes"]):
            unit = _server_unit(
                plan, node, rank, _with_node_rank(plan["argv"], rank), "ready" if rank == 0 else "alive"
            )
            if rank == 0 and dist:
                unit["ports"] = [int(str(dist).rsplit(":", 1)[-1])]
            units.append(unit)
        return units
    host = (plan.get("nodes") or [None])[0]
    return [_server_unit(plan, host, 0, plan["argv"], "ready")]


def placement(plan: dict, host: str | None) -> dict:
    """Which hosts run the layout, which one serves its API and keeps its record, seen from `host`."""
    units = plan["units"]
    multinode = plan.get("nnodes", 1) > 1
    # behind a router: a replica layout or a pd layout (its router serves and records it)
    replicated = bool((plan.get("replicas") or plan.get("pd")) and plan.get("router"))
    hosts: list = []
    for unit in units:
        if unit["host"] is not None and unit["host"] not in hosts:
            hosts.append(unit["host"])
    if replicated:
        api_host = plan["router"]["host"]
        # the router last in start order, first among the hosts: it serves and records the layout
        hosts = [api_host, *[h for h in hosts if h != api_host]]
    elif multinode and plan.get("nodes"):
        api_host = plan["nodes"][0]
    else:
        api_host = host
        hosts = [host] if host is not None else []
    spans = len(hosts) > 1
    if multinode:
        here = plan.get("node_rank") is not None
    elif replicated:
        here = host in hosts
    else:
        here = True
    return {
        "hosts": hosts,
        "api_host": api_host,
        "record_host": api_host,
        "multinode": multinode,
        "replicated": replicated,
        "pd": bool(plan.get("pd")),
        "spans": spans,
        "here": here,
    }


def units_on(plan: dict, host: str | None, role: str | None = None) -> list[dict]:
    """The units of a layout that run on `host` (a single-host layout's unit runs on the planned host)."""
    spans = (plan.get("placement") or {}).get("spans")
    out = []
    for unit in plan["units"]:
        on_host = unit["host"] in (None, host) if not spans else unit["host"] == host
        if on_host and (role is None or unit["role"] == role):
            out.append(unit)
    return out


def router_workers(plan: dict) -> dict:
    """What a layout's router must count healthy: its engine units (replicas, or prefill and decode
    servers), their URLs as the router reaches them, by role."""
    workers = [u for u in plan.get("units") or [] if u["role"] != "router"]
    urls = {r["unit_name"]: r.get("url") for r in plan.get("replicas") or []}
    by_role: dict[str, list] = {}
    for unit in workers:
        by_role.setdefault(unit["role"], []).append(unit.get("url") or urls.get(unit["name"]))
    return {"count": len(workers), "urls": [u for v in by_role.values() for u in v], "by_role": by_role}


def argv_problems(plan: dict) -> list[str]:
    """Why the service role cannot start a layout's units: a layout with no unit, or a unit whose
    command line is neither an engine's server nor sglang-router (the role swaps only the
    interpreter and, for the simulator, the module). Empty when every unit can start."""
    name = plan.get("name")
    units = plan.get("units") or []
    if not units:
        return [
            f"layout {name}: the plan has no unit to start (verdict {plan.get('verdict')}): "
            "run `make plan` (or plan.yml) and read its reasons"
        ]
    servers = [list(eng.launcher[1:3]) for eng in ENGINES.values()]
    out = []
    for unit in units:
        argv = [str(a) for a in unit.get("argv") or []]
        want = [["-m", "sglang_router.launch_router"]] if unit.get("role") == "router" else servers
        if argv[1:3] not in want:
            out.append(
                f"layout {name}: unit {unit.get('name')} ({unit.get('role')}) would run {argv[:3] or 'nothing'}, "
                f"not {' or '.join('python3 ' + ' '.join(w) for w in want)}: the plan is not one this "
                "collection made (plan again) or the planner has a bug"
            )
    return out


def units_of_layouts(layouts: list, host: str | None) -> list[dict]:
    """Every (layout, unit) pair of `layouts` that runs on `host`, in plan order."""
    return [{"layout": entry, "unit": unit} for entry in layouts or [] for unit in units_on(entry, host)]


def first_failure(results: list, step: str) -> dict:
    """A host's outcome of one step over its units: {} when every unit passed, else the first failed
    result (failure_class, msg, evidence) with the step and the unit it came from (the loop item,
    which the role's loops name __sglang_service_unit)."""
    for result in results or []:
        if isinstance(result, dict) and result.get("failure_class"):
            out = {k: result[k] for k in ("failure_class", "msg", "evidence") if k in result}
            out["step"] = step
            unit = result.get("__sglang_service_unit") or {}
            if isinstance(unit, dict) and unit.get("name"):
                out["unit"] = unit["name"]
            return out
    return {}


def router_registered(workers_json) -> dict:
    """What a router's `GET /workers` answer says: {healthy: how many workers it counts healthy,
    urls: every registered worker's URL, as the router reaches it}. Anything else (no answer, an
    error page) counts none."""
    workers = (workers_json or {}).get("workers") if isinstance(workers_json, dict) else None
    workers = [w for w in workers or [] if isinstance(w, dict)]
    return {
        "healthy": sum(1 for w in workers if w.get("is_healthy")),
        "urls": [w["url"] for w in workers if w.get("url")],
    }


def router_outcome(results: dict, expected: int, url: str, timeout_s) -> dict:
    """The router host's outcome of a layout's start, from the router role's registered results
    (`alive`, `workers`, `readiness`, `e2e`, `e2e_alive`: lists of loop results, skipped ones
    ignored): {} once the router runs, counts its `expected` servers healthy (GET /workers), says
    ready (GET /readiness) and, for pd, served one request end to end with no server logging a fatal
    line; else the first failure (failure_class, step, msg, evidence). No readiness result: no router."""

    def done(name):
        return [r for r in results.get(name) or [] if isinstance(r, dict) and not r.get("skipped")]

    failure = first_failure(done("alive"), "router")
    if failure:
        return failure
    readiness = done("readiness")
    if not readiness:
        return {}
    status = readiness[0].get("status")
    workers_json = (done("workers") or [{}])[0].get("json")
    healthy = router_registered(workers_json)["healthy"]
    if status != 200 or healthy != int(expected):
        return {
            "failure_class": "ready_timeout",
            "step": "router",
            "msg": f"the router {url} counts {healthy} healthy workers of {int(expected)} after {timeout_s} s "
            f"(/readiness {status or '?'})",
            "evidence": {"line": None, "log_tail": [], "exit_status": None, "workers": workers_json},
        }
    failure = first_failure(done("e2e_alive"), "router end to end")
    if failure:
        return failure
    e2e = done("e2e")
    if e2e and e2e[0].get("status") != 200:
        answer = e2e[0].get("content", e2e[0].get("msg", ""))
        return {
            "failure_class": "ready_timeout",
            "step": "router end to end",
            "msg": f"the router {url} did not serve one request end to end (prefill, KV transfer, decode): "
            f"HTTP {e2e[0].get('status', '?')} {str(answer)[:300]}",
            "evidence": {"line": None, "log_tail": [], "exit_status": None},
        }
    return {}


def layout_readiness(results: list, router_s: float | None = None) -> dict:
    """A layout's start from its gate results (the loop over its ready units, skipped ones left out):
    {ready_after_s, already_ready, figures}. Servers of one wave start together, so a wave takes its
    slowest server's time; waves start one after the other (a pd decode server that shares the
    prefill server's GPUs waits for it), so the layout's start is the sum of its waves'. A router
    (replicas, pd) starts last, and the layout is ready once it counts every server healthy (and, pd,
    served one request): its `router_s` is the last wave, returned as given (rounded; None without a
    router). `figures` is the index of the result whose KV pool stands for the layout, as the
    planner's kv_tokens does: a pd layout's first decode server (it holds the conversations), else the
    first server."""
    results = [r for r in results or [] if isinstance(r, dict)]
    waves: dict[int, float] = {}
    for r in results:
        seconds = r.get("ready_after_s")
        if isinstance(seconds, (int, float)) and not isinstance(seconds, bool):
            wave = int((r.get("__sglang_service_unit") or {}).get("start_wave") or 0)
            waves[wave] = max(waves.get(wave, 0.0), float(seconds))
    roles = [(r.get("__sglang_service_unit") or {}).get("role") for r in results]
    router = (
        float(router_s) if isinstance(router_s, (int, float)) and not isinstance(router_s, bool) else None
    )
    return {
        "ready_after_s": round(sum(waves.values()) + (router or 0.0), 3) if waves else None,
        "router_s": None if router is None else round(router, 3),
        "already_ready": bool(results) and all(bool(r.get("already_ready")) for r in results),
        "figures": roles.index("decode") if "decode" in roles else 0,
    }


def nodes_outcome(
    records, hosts, play_hosts, layout: str = "", step: str = "", multinode: bool = True
) -> dict:
    """One outcome for a layout that spans hosts, from every node's own record.

    Each node records what its step gave it: `{}` when fine, else its failure (failure_class, msg,
    evidence, step). The result is `{"failed": false}` or the layout's failure:
    - a node that left the play (unreachable, or failed outside the role's checks) is `rank_died`;
    - the deciding node is the first failed node of rank >= 1 when there is one: rank 0's
      nccl_timeout or ready_timeout is then the consequence (its collectives or its rendezvous
      waited for the lost node), else the first failed node;
    - a node rank >= 1 that exited without a fatal line (class `crashed`) is `rank_died`: it left
      the collective (stopped, killed), and that is what rank 0 sees.
    """
    records, hosts, play_hosts = list(records), list(hosts), list(play_hosts)
    nodes = []
    for rank, host in enumerate(hosts):
        rec = records[rank] if rank < len(records) and isinstance(records[rank], dict) else {}
        role = f"node rank {rank}" if multinode else ("router host" if rank == 0 else "replica host")
        if host not in play_hosts:
            nodes.append(
                {
                    "host": host,
                    "node_rank": rank,
                    "failure_class": "rank_died",
                    "step": step,
                    "msg": f"{host} ({role}) left the play (unreachable, or a task failed there)",
                    "evidence": {"line": None, "log_tail": [], "exit_status": None},
                }
            )
            continue
        if not rec.get("failure_class"):
            continue
        cls = rec["failure_class"]
        if multinode and rank > 0 and cls == "crashed":
            cls = "rank_died"
        nodes.append(
            {
                "host": host,
                "node_rank": rank,
                "failure_class": cls,
                "node_class": rec["failure_class"],
                "step": rec.get("step") or step,
                "msg": str(rec.get("msg") or ""),
                "evidence": rec.get("evidence") or {},
            }
        )
    if not nodes:
        return {"failed": False, "nodes": []}
    ranked = [n for n in nodes if n["node_rank"] > 0] if multinode else []
    first = ranked[0] if ranked else nodes[0]

    def where(n: dict) -> str:
        return f"{n['host']} (node rank {n['node_rank']})" if multinode else n["host"]

    summary = "; ".join(f"{where(n)}: {n['failure_class']} at {n['step']}: {n['msg'][:200]}" for n in nodes)
    return {
        "failed": True,
        "layout": layout,
        "failure_class": first["failure_class"],
        "host": first["host"],
        "node_rank": first["node_rank"],
        "step": first["step"],
        "evidence": dict(first["evidence"], host=first["host"], node_rank=first["node_rank"]),
        "msg": f"{layout}: {first['failure_class']} on {first['host']} - {summary}",
        "nodes": [{k: v for k, v in n.items() if k != "evidence"} for n in nodes],
        "evidence_per_node": {n["host"]: n["evidence"] for n in nodes},
    }


def stop_order(plan: dict, host: str | None, layout: str = "all", installed=None) -> dict:
    """The units to stop on `host`, in two phases (each one task on every host before the next).

    1. node rank 0 of multi-node layouts, single-node servers and routers: rank 0's SIGTERM
       broadcasts SGLang's ShutdownReq, so the other nodes' schedulers leave by themselves
       (stopping a rank >= 1 first would leave rank 0 to its NCCL watchdog, a failed unit after
       the collective timeout); a router stops taking requests before its replicas go;
    2. node ranks >= 1 and replicas.
    With layout "all", `installed` units named like ours (an engine's unit prefix) that no layout
    of the plan names any more (a renamed or removed layout) are stopped in phase 1 too.
    """
    prefixes = tuple(sorted({f"{eng.unit_prefix}-" for eng in ENGINES.values()}))
    layouts = (
        plan["layouts"]
        if layout == "all"
        else [entry for entry in plan["layouts"] if entry["name"] == layout]
    )
    if not layouts and layout != "all":
        # the name rule is the planner's (names.py): `all` is never a layout's name
        known = ", ".join(entry["name"] for entry in plan["layouts"])
        raise PlanError(
            f"-e layout={layout}: no layout of the plan has this name (known: {known}); "
            "-e layout=all stops every layout, renamed ones included"
        )
    first: list[str] = []
    then: list[str] = []
    for entry in layouts:
        for unit in units_on(entry, host):
            late = unit["role"] in BEHIND_ROUTER or (
                unit["role"] == "server" and (unit["node_rank"] or 0) > 0
            )
            target = then if late else first
            if unit["name"] not in target:
                target.append(unit["name"])
    if layout == "all":
        known = set(first) | set(then)
        for name in sorted(installed or ()):
            if name.endswith(".service") and name.startswith(prefixes) and name not in known:
                first.append(name)
    return {"first": first, "then": then, "all": first + then}
