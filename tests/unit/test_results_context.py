"""One record context (gpu and versions blocks) for every record of a layout: ok, failed and skipped
records name the same keys, and the engine is the layout's plan entry's (results.record_context)."""

from __future__ import annotations

import importlib.util

import yaml
from sglang_layouts.report import results

HOST = {
    "gpu_count": 8,
    "gpu_memory_gib": 80.0,
    "gpu_interconnect": "nvlink",
    "gpu_present": True,
    "gpu_names": ["NVIDIA H100 80GB HBM3"] * 8,
    "gpu_driver_version": "550.54.15",
    "gpu_memory_bandwidth_gbs": 3350,
    "sglang_version": "0.5.16",
    "ansible_version": "2.19.14",
    "host_python": "3.12.3",
}
PLAN = {"name": "tp8", "engine": "vllm", "verdict": "fits", "gpus_used": 8}
BENCH = {"summary": {"peak_output_tok_s": 10.0}, "levels": [], "server": {"version": "0.9.1"}}


def _record(status, ctx, **kw):
    return results.build_record("r1", "box", "tp8", status, engine="sglang", plan=PLAN, **ctx, **kw)


def test_context_names_every_key_and_the_plan_entrys_engine():
    ctx = results.record_context(HOST, PLAN, BENCH)
    assert ctx["gpu"] == {k: HOST[k] for k in results.RECORD_GPU_KEYS}
    assert ctx["versions"] == {
        "sglang_pin": "0.5.16",
        # the layout's own engine, not the host-wide sglang_engine (not an input at all)
        "engine": "vllm",
        "engine_version": "0.9.1",
        "ansible": "2.19.14",
        "host_python": "3.12.3",
    }


def test_ok_failed_and_skipped_records_carry_the_same_context():
    ok = _record("ok", results.record_context(HOST, PLAN, BENCH), bench=BENCH)
    failed = _record("failed", results.record_context(HOST, PLAN, BENCH), bench=BENCH, failure_class="x")
    skipped = _record("skipped", results.record_context(HOST, PLAN), failure_class="oom")
    assert ok["gpu"] == failed["gpu"] == skipped["gpu"]
    assert ok["versions"] == failed["versions"]
    # a layout that never started has no server to report a version; every other value is the same
    assert skipped["versions"] == {**ok["versions"], "engine_version": None}
    for rec in (ok, failed, skipped):
        assert set(rec["gpu"]) == set(results.RECORD_GPU_KEYS)
        assert set(rec["versions"]) == {"sglang_pin", "engine", "engine_version", "ansible", "host_python"}
        assert rec["versions"]["engine"] == rec["engine"] == "vllm"


def test_missing_facts_are_null_and_a_plan_without_engine_is_sglang():
    ctx = results.record_context({}, {}, {"server": None})
    assert ctx["gpu"] == {k: ([] if k == "gpu_names" else None) for k in results.RECORD_GPU_KEYS}
    assert ctx["versions"]["engine"] == "sglang" and ctx["versions"]["engine_version"] is None
    # a fact the host set to null stays null (as the YAML's default() left it)
    assert results.record_context({"gpu_names": None}, PLAN)["gpu"]["gpu_names"] is None


def test_the_filter_is_the_function(repo):
    spec = importlib.util.spec_from_file_location(
        "_ctx_filters", repo / "filter_plugins" / "sglang_layouts.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    face = mod.FilterModule().filters()["sglang_record_context"]
    assert face(HOST, PLAN, BENCH) == results.record_context(HOST, PLAN, BENCH)


def _tasks(tasks):
    for task in tasks or []:
        yield task
        for part in ("block", "rescue", "always"):
            yield from _tasks(task.get(part))


def test_the_sweep_and_the_bench_role_feed_the_same_host_facts(repo):
    sweep = yaml.safe_load((repo / "playbooks" / "tasks" / "sweep_layout.yml").read_text())
    measure = next(t for t in sweep if t.get("name") == "Layout | Measure")
    bench_vars = yaml.safe_load((repo / "roles" / "sglang_bench" / "vars" / "main.yml").read_text())
    sweep_facts = measure["vars"]["__sglang_sweep_host_facts"]
    assert sweep_facts == bench_vars["__sglang_bench_host_facts"]
    assert tuple(sweep_facts) == results.RECORD_HOST_KEYS
    # every record the sweep stores itself (skipped, failed) reads the one context, as the bench's store does
    stored = [t["sglang_result"] for t in _tasks(sweep) if "status" in (t.get("sglang_result") or {})]
    assert sorted(r["status"] for r in stored) == ["failed", "skipped"]
    for r in stored:
        assert (r["gpu"], r["versions"]) == (
            "{{ __sglang_sweep_context.gpu }}",
            "{{ __sglang_sweep_context.versions }}",
        )
    store = yaml.safe_load((repo / "roles" / "sglang_bench" / "tasks" / "store.yml").read_text())
    args = store[0]["sglang_result"]
    assert (args["gpu"], args["versions"]) == (
        "{{ __sglang_bench_context.gpu }}",
        "{{ __sglang_bench_context.versions }}",
    )
