"""sglang_service_nodes: one outcome for a layout that spans hosts, from every node's own.

Each node of a multi-node (or multi-host replica) layout records what its step gave it:
`{}` when fine, else the failed module result (failure_class, msg, evidence) plus `step`. This filter
turns the list of the nodes' records into the layout's failure, or `{"failed": false}`:

- a node that left the play (unreachable, or failed outside the role's checks) is `rank_died`;
- the deciding node is the first failed node of rank >= 1 when there is one: rank 0's
  nccl_timeout or ready_timeout is then the consequence (its collectives or its rendezvous waited
  for the lost node), else the first failed node;
- a node rank >= 1 that exited without a fatal line (class `crashed`) is `rank_died`: it left the
  collective (stopped, killed), and that is what rank 0 sees.
"""

from __future__ import annotations


def _plain(value):
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, str):
        return str(value)
    return value


def sglang_service_nodes_outcome(records, hosts, play_hosts, layout="", step="", multinode=True):
    records, hosts, play_hosts = _plain(list(records)), _plain(list(hosts)), _plain(list(play_hosts))
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
    summary = "; ".join(
        f"{n['host']} (node rank {n['node_rank']}): {n['failure_class']} at {n['step']}: {n['msg'][:200]}"
        if multinode
        else f"{n['host']}: {n['failure_class']} at {n['step']}: {n['msg'][:200]}"
        for n in nodes
    )
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


class FilterModule:
    def filters(self):
        return {"sglang_service_nodes_outcome": sglang_service_nodes_outcome}
