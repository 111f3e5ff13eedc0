"""What the sglang_result task does, one function for its two faces.

The module (library/sglang_result.py) runs it where Ansible sends modules; the action plugin of the
same name runs it in the controller's worker itself when the task runs on the controller, which is
where a result always goes (the task is delegated to localhost): a layout's records then cost no
module process, the ~0.5-1 s a module takes on a GPU host, twice per layout.
"""

from __future__ import annotations

import os
import time

from . import results

# The record's own fields: options of the task, passed to results.build_record as they are.
RECORD_OPTIONS = {
    "engine": {"type": "str"},
    "plan": {"type": "dict"},
    "health": {"type": "dict"},
    "bench": {"type": "dict"},
    "failure_class": {"type": "str"},
    "evidence": {"type": "raw"},
    "msg": {"type": "str"},
    "reasons": {"type": "list", "elements": "str"},
    "argv": {"type": "list", "elements": "str"},
    "versions": {"type": "dict"},
    "gpu": {"type": "dict"},
    "extra": {"type": "dict"},
    "gpu_hour_cost": {"type": "float"},
}

ARGUMENT_SPEC = {
    "results_dir": {"type": "path", "required": True},
    "run_id": {"type": "str", "required": True},
    "state": {"type": "str", "default": "present", "choices": ["present", "query", "latest"]},
    "host": {"type": "str"},
    "layout": {"type": "str"},
    "status": {"type": "str", "default": "ok", "choices": list(results.STATUSES)},
    **RECORD_OPTIONS,
    "timing": {"type": "dict"},
}
REQUIRED_IF = [("state", "present", ["host", "layout"]), ("state", "query", ["host", "layout"])]


def run(params, check_mode=False):
    """The task's result for validated `params` (ARGUMENT_SPEC); raises results.ResultError or OSError."""
    p = params
    rd = p["results_dir"]
    if p["state"] == "latest":
        results.run_dir(rd, p["run_id"])
        link = os.path.join(rd, "latest")
        current = os.readlink(link) if os.path.islink(link) else None
        changed = current != p["run_id"]
        if changed and not check_mode:
            os.makedirs(rd, exist_ok=True)
            results.update_latest(rd, p["run_id"])
        return {"changed": changed, "latest": link}

    if p["state"] == "query":
        found = results.attempts(rd, p["run_id"], p["host"], p["layout"])
        out = {"changed": False, "exists": bool(found), "attempts": found}
        if found:
            path = results.record_path(rd, p["run_id"], p["host"], p["layout"], found[-1])
            out["path"] = path
            out["status"] = results.load_record(path).get("status")
        return out

    timing = None
    if p["timing"]:
        marks = {"end": time.time(), **{k: p["timing"].get(k) for k in ("start", "ready")}}
        timing = results.layout_timing(
            marks,
            p["health"],
            (p["bench"] or {}).get("levels"),
            p["timing"].get("stop_s"),
            p["timing"].get("gate_waited_s"),
        )
    record = results.build_record(
        p["run_id"],
        p["host"],
        p["layout"],
        p["status"],
        timing=timing,
        **{k: p[k] for k in RECORD_OPTIONS},
    )
    short = {k: v for k, v in record.items() if k not in ("levels", "formulas", "health", "evidence")}
    if check_mode:
        found = results.attempts(rd, p["run_id"], p["host"], p["layout"])
        attempt = (found[-1] + 1) if found else 1
        path = results.record_path(rd, p["run_id"], p["host"], p["layout"], attempt)
        return {"changed": True, "path": path, "attempt": attempt, "record": short}
    path, attempt = results.write_record(rd, record)
    short["attempt"] = attempt
    return {"changed": True, "path": path, "attempt": attempt, "record": short}


def task(params, check_mode=False, diff=False):
    """The task's answer for validated `params`, as both faces give it: run()'s, or its error as
    {failed, msg} (diff: the task asked for one; a record has none to show)."""
    try:
        return run(params, check_mode)
    except (results.ResultError, OSError) as exc:
        return {"failed": True, "msg": f"result store: {exc}"}
