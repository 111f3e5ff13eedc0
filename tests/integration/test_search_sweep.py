"""sweep.yml with sglang_layout_search on the simulator, end to end: the inventory's layout first,
then the search's candidates one by one with a refit after each, records with their search block,
the step written with the run, and the report's search section."""

from __future__ import annotations

import json
import uuid

import yaml

from tests.helpers.playbook import SHORT_BENCH, failed_messages


def test_a_search_sweep_measures_calibrates_and_reports(run_playbook, tmp_path, run_dir, engine_port):
    results = tmp_path / "results"
    run_id = f"search-{uuid.uuid4().hex[:8]}"
    extra = {
        **SHORT_BENCH,
        "run_id": run_id,
        "sglang_layouts": [{"name": "pp8", "pp": 8}],
        # two candidates (tp8 with and without ep8), a knob with a value in the name
        "sglang_layout_search": {
            "objective": "single",
            "vary": {"tp": [8], "pp": [1], "dp": [1], "ep": [1, 8], "nnodes": [1]},
            "knobs": {"chunked_prefill_size": [4096]},
            "top_k": 2,
            "budget": 2,
        },
        "sglang_results_dir": str(results),
        "sglang_run_dir": str(run_dir),
        "sglang_base_port": engine_port,
    }
    r = run_playbook("sweep.yml", extravars=extra)
    assert r.status == "successful", failed_messages(r)
    host = results / run_id / "seed-box"
    recs = {p.stem: json.loads(p.read_text()) for p in host.glob("*.json")}
    searched = {n: rec for n, rec in recs.items() if rec.get("search")}
    assert "pp8" in recs and recs["pp8"]["search"] is None
    # pp8 is slow: the best predicted candidate beats it by more than any error, so it is measured
    assert "auto-8x1x1-chunked_prefill_size=4096" in searched
    for rec in searched.values():
        assert rec["status"] == "ok" and {"rank_predicted", "rank_after_calibration"} <= set(rec["search"])
        assert rec["search"]["calibration"]["layouts"]  # refit on what was measured before it
        assert "--chunked-prefill-size" in rec["argv"]
    assert len(searched) <= 2
    step = json.loads((results / run_id / "search-seed-box.json").read_text())
    assert step["stop"] is True and step["why"]
    summary = json.loads((results / run_id / "summary.json").read_text())
    sec = summary["search"]
    assert {"kendall_tau", "predicted_best_was_best"} <= set(sec)
    assert {row["layout"] for row in sec["rows"]} == set(recs)
    assert all(
        row["predicted"] and row["predicted_after_calibration"] and row["measured"] for row in sec["rows"]
    )
    assert "## Layout search" in (results / run_id / "REPORT.md").read_text()


def test_the_gpu_sweep_searches_the_model_named_in_sglang_gpu_searches(run_playbook, tmp_path, repo):
    """inventory/gpu with benchmarks/extra-vars/search-h200.yml (what `make gpu-sweep` passes): the
    model's ladder gives way to its search, built from sglang_gpu_searches[model] (plan.yml reads the
    same variables as gpu_sweep.yml's sweep; the hardware as gpu_facts would give it)."""
    extra = yaml.safe_load((repo / "benchmarks/extra-vars/search-h200.yml").read_text())
    spec = extra["sglang_gpu_searches"]["qwen3-30b-a3b"]
    out = tmp_path / "plan"
    hardware = {"gpu_count": 1, "gpu_memory_gib": 139.8, "gpu_interconnect": "nvlink", "gpu_name": "NVIDIA H200"}
    r = run_playbook(
        "plan.yml", inventory="inventory/gpu", extravars={**extra, **hardware, "sglang_plan_dir": str(out)}
    )
    assert r.status == "successful", failed_messages(r)
    doc = json.loads((out / "gpu-host.json").read_text())
    sec = doc["search"]
    knob_sets = 1
    for values in spec["knobs"].values():
        knob_sets *= len(values)
    assert sec["objective"] == spec["objective"] and sec["candidates"] == knob_sets
    assert sec["top_k"] == spec["top_k"] and sec["budget"] == spec["budget"]
    # no ladder layout: the plan's layouts are the search's shortlist, with the knobs on their command lines
    ladder = yaml.safe_load((repo / "inventory/gpu/group_vars/sglang_hosts.yml").read_text())["sglang_gpu_ladders"]
    names = [e["name"] for e in doc["layouts"]]
    assert names == sec["shortlist"] and len(names) == spec["top_k"]
    assert not set(names) & {lay["name"] for lay in ladder["qwen3-30b-a3b"]}
    for entry in doc["layouts"]:
        assert entry["search"]["objective"] == "goodput"
        for flag in ("--kv-cache-dtype", "--max-running-requests", "--chunked-prefill-size", "--cuda-graph-max-bs"):
            assert flag in entry["argv"]
    assert len(list((out / "gpu-host").glob("*.service"))) == spec["top_k"]
