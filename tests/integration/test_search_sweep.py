"""sweep.yml with sglang_layout_search on the simulator, end to end: the inventory's layout first,
then the search's candidates one by one with a refit after each, records with their search block,
the step written with the run, and the report's search section."""

from __future__ import annotations

import json
import shutil
import uuid

import yaml

from tests.helpers.net import free_port
from tests.helpers.playbook import REPO, SHORT_BENCH, failed_messages, local_nodes
from tests.helpers.playbook import run_playbook as run_in


def test_a_search_sweep_measures_calibrates_and_reports(run_playbook, tmp_path, engine_vars):
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
        **engine_vars,
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
    hardware = {
        "gpu_count": 1,
        "gpu_memory_gib": 139.8,
        "gpu_interconnect": "nvlink",
        "gpu_name": "NVIDIA H200",
    }
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
    ladder = yaml.safe_load((repo / "inventory/gpu/group_vars/sglang_hosts.yml").read_text())[
        "sglang_gpu_ladders"
    ]
    names = [e["name"] for e in doc["layouts"]]
    assert names == sec["shortlist"] and len(names) == spec["top_k"]
    assert not set(names) & {lay["name"] for lay in ladder["qwen3-30b-a3b"]}
    for entry in doc["layouts"]:
        assert entry["search"]["objective"] == "goodput"
        for flag in (
            "--kv-cache-dtype",
            "--max-running-requests",
            "--chunked-prefill-size",
            "--cuda-graph-max-bs-decode",  # 0.5.16 spells the deprecated alias so
        ):
            assert flag in entry["argv"]
    assert len(list((out / "gpu-host").glob("*.service"))) == spec["top_k"]


def test_a_search_measures_its_candidate_over_two_hosts_on_both_at_once(tmp_path):
    """Two inventory hosts (both local, process supervisor, simulator) stand for two nodes; the search
    varies only nnodes 2 with tp 16: its one candidate runs on both hosts at once, is measured on
    node rank 0, and its record carries the search block of the step that chose it."""
    dist_port = free_port()  # one rendezvous port, the same in every node's plan
    common = {
        "sglang_engine": "sim",
        "sglang_service_manager": "process",
        "sglang_model": {"name": "kimi-k2.6", "path": str(REPO / "models" / "kimi-k2.6")},
        "sglang_dist_init_port": dist_port,
        "sglang_layouts": [],
        "sglang_layout_search": {
            "objective": "peak",
            "vary": {"tp": [16], "pp": [1], "dp": [1], "ep": [1], "nnodes": [2]},
            "top_k": 1,
            "budget": 1,
        },
        "sglang_service_health_timeout": 120,
        # the nodes start as ansible reaches them: the rendezvous waits as long as torch's default
        "sglang_service_extra_env": {
            "SGLANG_SIM_DIST_TIMEOUT": "600",
            "SGLANG_SIM_NCCL_TIMEOUT_SECONDS": "5",
        },
        **SHORT_BENCH,
    }
    root, inventory, _ = local_nodes("sglang-search-mn-it-", common)
    results = root / "results"
    extra = {"sglang_results_dir": str(results), "run_id": "search-mn"}
    try:
        r = run_in("sweep.yml", root / "runner", inventory=str(inventory), extravars=extra)
        assert r.rc == 0, failed_messages(r)
        run = results / "search-mn"
        records = sorted(str(p.relative_to(run)) for p in run.glob("node-*/*.json"))
        assert records == ["node-a/auto-16x1x1-n2.json"], records
        rec = json.loads((run / records[0]).read_text())
        assert rec["status"] == "ok", rec.get("msg")
        assert rec["search"]["rank_predicted"] == 1 and rec["search"]["objective"] == "peak"
        assert "calibration" in rec["search"]
        # the loop over hosts recorded its last step: the budget of one is spent
        last = json.loads((run / "search-node-a.json").read_text())
        assert last["stop"] and "budget is spent (1 of 1" in last["why"]
        assert not list(root.glob("node-*/*.pid")), "the sweep stops both nodes"
    finally:
        run_in("stop.yml", root / "runner", inventory=str(inventory), extravars=extra)
        shutil.rmtree(root, ignore_errors=True)
