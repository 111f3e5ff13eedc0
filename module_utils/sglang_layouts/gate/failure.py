"""The failure of one layout in a sweep: its class, message and evidence, decided once.

A sweep's rescue knows a failure from up to five sources; the record it stores and the line it
prints both read this one result (filter sglang_layout_failure), so they cannot disagree.
"""

from __future__ import annotations


def layout_failure(
    failed: dict | None,
    failed_task: str = "",
    host: str = "",
    service_failure: dict | None = None,
    check_failed: dict | None = None,
    bench_partial: dict | None = None,
) -> dict:
    """{failure_class, msg, evidence, bench} of a layout whose deploy, benchmark or check failed.

    The most specific source wins:
      1. service_failure (the service role's fact sglang_service_failure) when it says failed: the
         nodes' verdict of a layout over several hosts, with the node that decided it;
      2. check_failed: what the layout check found when the sweep checked every node;
      3. the first item of the failed task's loop that carries a failure_class (a unit's gate or check);
      4. bench_unreachable when the benchmark stopped on a server that died (bench_partial, the
         levels it measured), the failed task's message with it;
      5. the failed task's own result (ansible_failed_result).
    No class anywhere is `error`. The evidence is the source's, with the failed task, the host that
    failed (the source's, else this one), the nodes' outcomes and the benchmark's server_died."""
    failed = failed or {}
    service_failure = service_failure or {}
    bench_partial = bench_partial or {}
    loop_failed = next(
        (r for r in failed.get("results") or [] if isinstance(r, dict) and "failure_class" in r), None
    )
    if service_failure.get("failed"):
        source = service_failure
    elif check_failed:
        source = check_failed
    elif loop_failed is not None:
        source = loop_failed
    elif bench_partial:
        source = {"failure_class": "bench_unreachable", "msg": failed.get("msg", "")}
    else:
        source = failed
    evidence = {**(source.get("evidence") or {}), "task": failed_task, "host": source.get("host") or host}
    if "nodes" in source:
        evidence["nodes"] = source["nodes"]
    died = (bench_partial.get("summary") or {}).get("server_died") if bench_partial else None
    if bench_partial:
        evidence["server_died"] = died
    msg = str(source.get("msg", ""))
    if bench_partial:
        msg = f"{(died or {}).get('detail')}: {msg}"
    return {
        "failure_class": source.get("failure_class") or "error",
        "msg": msg,
        "evidence": evidence,
        "bench": bench_partial,
    }
