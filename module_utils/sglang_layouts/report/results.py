"""Result records: one versioned JSON file per (run, host, layout, attempt), never overwritten.

Layout on the controller::

    results/<run id>/<host>/<layout>.json            first attempt
    results/<run id>/<host>/<layout>.attempt2.json   a forced re-run in the same run id (then 3, 4, ...)
    results/latest -> <run id>                       the newest run (symlink, replaced atomically)

A record is written by fileio.write_atomic with overwrite=False: a temporary file in the
same folder, fsynced, then hard-linked to its final name (``os.link`` fails when the name
exists, so an existing record is never replaced, even by two writers racing). A re-run never
edits a record: it adds the next attempt, and readers take the highest attempt of each
(host, layout).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re

from ..bench.formulas import FORMULAS as BENCH_FORMULAS
from ..engines import is_simulated
from ..fileio import fsync_dir, write_atomic
from ..names import NAME as _NAME
from ..names import layout_name_problem

SCHEMA = "sglang-layouts/result/v1"
STATUSES = ("ok", "degraded", "failed", "skipped")
_FILE = re.compile(r"^(?P<layout>.+?)(?:\.attempt(?P<n>[0-9]+))?\.json$")

FORMULAS = dict(
    BENCH_FORMULAS,
    tok_s_per_gpu="output_tok_s / gpus_used (gpus_used from the plan: tp x pp, x dp without dp-attention)",
    kv_tokens_error_pct="100 x (predicted kv_tokens - measured max_total_num_tokens) / measured",
    ready_after_s="seconds from the service start to GET /health = 200 (sglang_health)",
    cost_per_mtok="$ per 1M output tokens = gpu_hour_cost x gpus_used / 3600 / tok_s x 1e6 (gpu_hour_cost = "
    "sglang_gpu_hour_cost, $ per GPU-hour); peak: tok_s = summary.peak_output_tok_s; slo: tok_s = "
    "summary.slo_goodput_tok_s (the best goodput of a level meeting the SLO); null without a cost, without GPUs "
    "used or without the throughput",
    timing="seconds of one layout in a sweep, from the controller's clock marks (start: the layout's first "
    "task; ready: the readiness gate's verdict, ready or failed; end: after the stop, as the record is stored): "
    "deploy_s = ready - start (preflight, files, start and gate, Ansible included); ready_s = the engine's start "
    "as the gate measured it (health.ready_after_s: the slowest server of each wave, the waves added up, then "
    "a router's wait until it counted every server healthy; else the seconds until the gate's failure verdict, "
    "else 0); "
    "bench_s = the sum of the measured levels' duration_s (a level measured again after a stall: both "
    "measurements); warmup_s = the sum of the levels' unmeasured warm-ups (warmup.seconds: requests at the "
    "level's own concurrency, the engine's work, kept apart from bench_s); stop_s = the engine's stop (the "
    "supervisor's waited_s summed over the units, under systemd the stop tasks' wall time); wall_s = end - start; "
    "tool_s = wall_s - ready_s - bench_s - warmup_s - stop_s (what the tool itself adds: Ansible's tasks, "
    "preflight, the gate's polling, the benchmark's setup and collection between its levels, storing the record)",
)


def layout_timing(marks, health=None, levels=None, stop_s=None, gate_waited_s=None):
    """{deploy_s, ready_s, bench_s, warmup_s, stop_s, tool_s, wall_s} of one layout (FORMULAS["timing"]).
    marks = {"start", "ready", "end"} in epoch seconds (ready may be missing: the layout never reached
    the gate); health = sglang_health's facts; levels = the measured levels; stop_s = the engine's stop;
    gate_waited_s = the seconds until the gate's failure verdict when the engine did not become ready."""

    def num(v):
        try:
            return float(v)
        except (TypeError, ValueError):
            return None

    def seconds(d, key):
        return (num(d.get(key)) or 0.0) if isinstance(d, dict) else 0.0

    start, ready, end = (num((marks or {}).get(k)) for k in ("start", "ready", "end"))
    ready_s = num((health or {}).get("ready_after_s"))
    if ready_s is None:
        ready_s = num(gate_waited_s) or 0.0
    levels = [lv for lv in (levels or []) if isinstance(lv, dict)]
    # a level measured again after a stall (loadgen.measure_level) keeps its first measurement under stall.first
    firsts = [(lv.get("stall") or {}).get("first") for lv in levels]
    bench_s = sum(seconds(lv, "duration_s") for lv in levels) + sum(seconds(f, "duration_s") for f in firsts)
    warmup_s = sum(seconds(lv.get("warmup"), "seconds") for lv in levels)
    stop_s = num(stop_s) or 0.0
    wall_s = end - start if start is not None and end is not None else None
    return {
        "deploy_s": round(ready - start, 3) if start is not None and ready is not None else None,
        "ready_s": round(ready_s, 3),
        "bench_s": round(bench_s, 3),
        "warmup_s": round(warmup_s, 3),
        "stop_s": round(stop_s, 3),
        "tool_s": round(wall_s - ready_s - bench_s - warmup_s - stop_s, 3) if wall_s is not None else None,
        "wall_s": round(wall_s, 3) if wall_s is not None else None,
    }


def cost_per_mtok(gpu_hour_cost, gpus_used, summary):
    """{"peak", "slo", "gpu_hour_cost", "gpus_used"} in $ per 1M output tokens (FORMULAS["cost_per_mtok"])."""

    def cost(tok_s):
        if not gpu_hour_cost or not gpus_used or not tok_s:
            return None
        return float(gpu_hour_cost) * gpus_used / 3600.0 / tok_s * 1e6

    return {
        "peak": cost(summary.get("peak_output_tok_s")),
        "slo": cost(summary.get("slo_goodput_tok_s")),
        "gpu_hour_cost": gpu_hour_cost,
        "gpus_used": gpus_used,
    }


class ResultError(ValueError):
    """Bad run id, host or layout name, or a malformed record."""


def new_run_id(now=None):
    """A UTC timestamp, sortable: 20261129T152300Z."""
    now = now or _dt.datetime.now(_dt.timezone.utc)
    return now.strftime("%Y%m%dT%H%M%SZ")


def check_name(kind, value):
    # a layout's name follows the one rule of names.py (the planner refuses the same names)
    problem = layout_name_problem(value) if kind == "layout" else None
    if problem:
        raise ResultError(f"layout {value!r} cannot name a results file: its name {problem}")
    if not isinstance(value, str) or not _NAME.match(value) or value in ("latest", ".", ".."):
        raise ResultError(
            f"{kind} {value!r} cannot name a results folder: use letters, digits, '_', '-', '.', '@', '+' "
            "(not 'latest'), at most 128 characters"
        )
    return value


def run_dir(results_dir, run_id):
    return os.path.join(results_dir, check_name("run id", run_id))


def record_path(results_dir, run_id, host, layout, attempt=1):
    check_name("host", host)
    check_name("layout", layout)
    name = f"{layout}.json" if attempt == 1 else f"{layout}.attempt{attempt}.json"
    return os.path.join(run_dir(results_dir, run_id), host, name)


def attempts(results_dir, run_id, host, layout):
    """Attempt numbers stored for one (host, layout), ascending."""
    folder = os.path.join(run_dir(results_dir, run_id), check_name("host", host))
    found = []
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    for name in names:
        m = _FILE.match(name)
        if m and m.group("layout") == layout:
            found.append(int(m.group("n") or 1))
    return sorted(found)


def build_record(
    run_id,
    host,
    layout,
    status,
    *,
    engine=None,
    plan=None,
    health=None,
    bench=None,
    failure_class=None,
    evidence=None,
    msg=None,
    reasons=None,
    argv=None,
    versions=None,
    gpu=None,
    extra=None,
    gpu_hour_cost=None,
    timing=None,
):
    """Assemble a record (no I/O). plan = the planner's entry for the layout; health = sglang_health facts;
    bench = the sglang_bench facts; gpu_hour_cost = $ per GPU-hour (sglang_gpu_hour_cost) for cost_per_mtok;
    timing = layout_timing's result (a sweep's layout), else null."""
    check_name("host", host)
    check_name("layout", layout)
    check_name("run id", run_id)
    if status not in STATUSES:
        raise ResultError(f"status must be one of {', '.join(STATUSES)}, not {status!r}")
    plan = plan or {}
    health = health or {}
    # The layout's own engine (the planner resolved its engine: key against sglang_engine) wins over
    # the host-wide one the caller passes: one sweep may hold layouts of several engines.
    engine = plan.get("engine") or health.get("engine") or engine
    predicted_kv = plan.get("kv_tokens")
    measured_kv = health.get("max_total_num_tokens")
    kv_err = None
    if isinstance(predicted_kv, (int, float)) and isinstance(measured_kv, (int, float)) and measured_kv:
        kv_err = 100.0 * (predicted_kv - measured_kv) / measured_kv
    gpus_used = plan.get("gpus_used")
    summary = dict((bench or {}).get("summary") or {})
    if summary.get("peak_output_tok_s") is not None and gpus_used:
        summary["peak_tok_s_per_gpu"] = summary["peak_output_tok_s"] / gpus_used
    return {
        "schema": SCHEMA,
        "run_id": run_id,
        "host": host,
        "layout": layout,
        "status": status,
        "simulated": is_simulated(engine),
        # served with --load-format dummy: real memory, KV and speed on real GPUs, not real outputs
        "dummy_weights": bool(plan.get("dummy_weights")),
        "engine": engine,
        "created_at": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "failure_class": failure_class,
        "msg": msg,
        "evidence": evidence,
        "reasons": list(reasons or plan.get("reasons") or []),
        "prediction": {
            k: plan.get(k)
            for k in (
                "verdict",
                "failure",
                "load_format",
                "gpus_used",
                "gpu_ids",
                "parallel",
                "weights_gib_per_gpu",
                "budget_gib",
                "kv_tokens",
                "kv_tokens_total",
                "kv_pool",
                "notes",
                "unit_name",
                "port",
                "nodes",
                "replicas",
                "router",
                "speed",
                "cost",
            )
            if k in plan
        },
        "gpus_used": gpus_used,
        "argv": argv if argv is not None else plan.get("argv"),
        "env": plan.get("env"),
        "versions": versions or {},
        "gpu": gpu or {},
        "health": health,
        "kv_tokens": {"predicted": predicted_kv, "measured": measured_kv, "error_pct": kv_err},
        "summary": summary,
        "slo_max_rate": summary.get("slo_max_rate"),
        "cost_per_mtok": cost_per_mtok(gpu_hour_cost, gpus_used, summary),
        "levels": with_predicted_speed((bench or {}).get("levels"), plan.get("speed")),
        "bench_config": (bench or {}).get("config"),
        "server": (bench or {}).get("server"),
        "timing": timing or None,
        "formulas": FORMULAS,
        "extra": extra or {},
        # a layout the search chose: its predicted rank before and after calibration (plan/calibrate.py)
        "search": plan.get("search"),
    }


def with_predicted_speed(levels, speed):
    """The bench levels, each with the output tok/s the plan predicted at its concurrency (speed.py)."""
    by = (speed or {}).get("by_concurrency") or {}
    out = []
    for level in levels or []:
        level = dict(level)
        if level.get("concurrency") is not None:
            level["predicted_output_tok_s"] = (by.get(str(level["concurrency"])) or {}).get("output_tok_s")
        out.append(level)
    return out


def write_record(results_dir, record):
    """Store a record as the next attempt of its (run, host, layout); returns (path, attempt).

    Never replaces a file: the final name is created with os.link, which fails if it exists,
    in which case the next attempt number is tried."""
    if record.get("schema") != SCHEMA:
        raise ResultError(f"not a {SCHEMA} record")
    run_id, host, layout = record["run_id"], record["host"], record["layout"]
    folder = os.path.dirname(record_path(results_dir, run_id, host, layout))
    try:
        return _write_record(results_dir, record, folder, run_id, host, layout)
    except OSError as exc:
        # a full disk or a folder that cannot be written: nothing is stored (the temporary file is
        # gone), so the same run id re-measures this layout once the cause is fixed
        raise ResultError(
            f"cannot store the record of {host}/{layout} in {folder}: {exc.strerror or exc}. Nothing was "
            f"stored. Free space or fix the folder, then run again with -e run_id={run_id} (the sweep resumes)."
        ) from exc


def _write_record(results_dir, record, folder, run_id, host, layout):
    os.makedirs(folder, exist_ok=True)
    existing = attempts(results_dir, run_id, host, layout)
    attempt = (existing[-1] + 1) if existing else 1
    for _try in range(1000):
        record = dict(record, attempt=attempt)
        data = json.dumps(record, indent=2, sort_keys=True, default=str) + "\n"
        path = record_path(results_dir, run_id, host, layout, attempt)
        try:
            write_atomic(path, data, mode=0o600, overwrite=False)
        except FileExistsError:
            attempt += 1
            continue
        return path, attempt
    raise ResultError(f"could not find a free attempt number for {host}/{layout} in run {run_id}")


def update_latest(results_dir, run_id):
    """Point results/latest at run_id (a relative symlink swapped in with os.replace)."""
    run_dir(results_dir, run_id)
    link = os.path.join(results_dir, "latest")
    tmp = os.path.join(results_dir, f".latest.{os.getpid()}.tmp")
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(run_id, tmp)
    os.replace(tmp, link)
    fsync_dir(results_dir)
    return link


def resolve_run_id(results_dir, run_id=None):
    """run_id as given, or the target of results/latest when it is None/'' / 'latest'."""
    if run_id and run_id != "latest":
        return check_name("run id", run_id)
    link = os.path.join(results_dir, "latest")
    if not os.path.islink(link):
        raise ResultError(f"no run id given and {link} does not exist: run a sweep first or pass run_id")
    return check_name("run id", os.readlink(link).rstrip("/").split("/")[-1])


def load_record(path):
    with open(path, encoding="utf-8") as fh:
        record = json.load(fh)
    if record.get("schema") != SCHEMA:
        raise ResultError(f"{path}: schema {record.get('schema')!r} is not {SCHEMA}")
    return record


def load_run(results_dir, run_id, all_attempts=False):
    """Records of a run, sorted by (host, layout); only the highest attempt of each unless all_attempts."""
    base = run_dir(results_dir, run_id)
    if not os.path.isdir(base):
        raise ResultError(f"no results for run {run_id!r} under {results_dir}")
    chosen = {}
    for host in sorted(os.listdir(base)):
        folder = os.path.join(base, host)
        if not os.path.isdir(folder) or host.startswith("."):
            continue
        for name in sorted(os.listdir(folder)):
            m = _FILE.match(name)
            if not m or name.startswith("."):
                continue
            record = load_record(os.path.join(folder, name))
            record.setdefault("attempt", int(m.group("n") or 1))
            key = (record["host"], record["layout"])
            if all_attempts:
                chosen[(*key, record["attempt"])] = record
            elif key not in chosen or record["attempt"] > chosen[key]["attempt"]:
                chosen[key] = record
    return [chosen[k] for k in sorted(chosen)]


# The host's facts a record carries: its GPUs (gpu_facts, else the inventory) and the pins.
RECORD_GPU_KEYS = (
    "gpu_count",
    "gpu_memory_gib",
    "gpu_interconnect",
    "gpu_present",
    "gpu_names",
    "gpu_driver_version",
    "gpu_memory_bandwidth_gbs",
)
RECORD_PIN_KEYS = ("sglang_version", "ansible_version", "host_python")
RECORD_HOST_KEYS = RECORD_GPU_KEYS + RECORD_PIN_KEYS


def record_context(host_facts, plan_entry, bench=None):
    """{"gpu", "versions"} of a layout's record: one context for every status (ok, degraded, failed,
    skipped), so that every record of a run names the same keys.

    host_facts = the host's RECORD_HOST_KEYS (gpu_* as gpu_facts or the inventory set them; the pins
    sglang_version, ansible_version and host_python); a key it lacks is null (gpu_names: []).
    plan_entry = the planner's entry for the layout: its engine (resolved against sglang_engine) is the
    record's, not the host-wide sglang_engine, since one sweep may hold layouts of several engines.
    bench = the benchmark's facts when one ran (a failed one too): its server's reported version is
    engine_version, else null."""
    facts = host_facts or {}
    server = (bench or {}).get("server") or {}
    return {
        "gpu": {k: facts.get(k, [] if k == "gpu_names" else None) for k in RECORD_GPU_KEYS},
        "versions": {
            "sglang_pin": facts.get("sglang_version"),
            "engine": (plan_entry or {}).get("engine") or "sglang",
            "engine_version": server.get("version") if isinstance(server, dict) else None,
            "ansible": facts.get("ansible_version"),
            "host_python": facts.get("host_python"),
        },
    }
