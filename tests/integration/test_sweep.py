"""sweep.yml, report.yml and bench.yml through ansible-runner on the demo inventory (simulated engine,
process supervisor, real HTTP): records, resume, forced re-run, facts read back from the artifacts."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
import uuid
from pathlib import Path

import pytest

from tests.helpers.playbook import (
    REPO,
    SHORT_BENCH,
    ansible_env,
    cached_facts,
    fact_cache_dir,
    failed_messages,
    playbook_command,
)
from tests.helpers.records import assert_timing_adds_up

# Small but real: three layouts (one fits, one oom, one invalid), two concurrency levels.
LAYOUTS = [
    {"name": "tp8", "tp": 8},
    {"name": "tp4ep2", "tp": 4, "ep": 2},
    {"name": "tp2ep4", "tp": 2, "ep": 4},
]


def _records(folder):
    return {p.name: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}


def _stdout(runner):
    return "".join(ev.get("stdout", "") for ev in runner.events)


def test_sweep_records_resume_force_and_report(run_playbook, tmp_path, engine_vars):
    results = tmp_path / "results"
    run_id = f"it-{uuid.uuid4().hex[:8]}"
    base = {
        **SHORT_BENCH,
        "run_id": run_id,
        "sglang_layouts": LAYOUTS,
        **engine_vars,
    }

    r1 = run_playbook("sweep.yml", extravars=base)
    assert r1.status == "successful", failed_messages(r1)
    host = results / run_id / "seed-box"
    recs = _records(host)
    assert sorted(recs) == ["tp2ep4.json", "tp4ep2.json", "tp8.json"]
    tp8 = recs["tp8.json"]
    assert tp8["schema"] == "sglang-layouts/result/v1" and tp8["status"] == "ok" and tp8["simulated"] is True
    assert tp8["run_id"] == run_id and tp8["attempt"] == 1
    assert [lv["concurrency"] for lv in tp8["levels"]] == [1, 4]
    assert tp8["levels"][1]["completed"] == 8 and tp8["levels"][1]["failed"] == 0
    assert tp8["summary"]["single_request_tok_s"] > 0 and tp8["summary"]["peak_concurrency"] in (1, 4)
    # the record carries the prediction, argv, versions, GPU and health facts, and the formulas
    assert tp8["prediction"]["verdict"] == "fits" and tp8["prediction"]["gpus_used"] == 8
    assert "--tp-size" in " ".join(tp8["argv"]) and tp8["versions"]["engine_version"]
    assert tp8["gpu"]["gpu_count"] == 8 and tp8["health"]["ready_after_s"] > 0
    assert tp8["kv_tokens"]["measured"] == tp8["health"]["max_total_num_tokens"] > 0
    assert "ttft_ms" in tp8["formulas"] and tp8["bench_config"]["output_len"] == 8
    # the speed it was measured against: the simulated engine runs on that same model (speed.py)
    assert set(tp8["prediction"]["speed"]["by_concurrency"]) == {"1", "4"}
    assert all(lv["predicted_output_tok_s"] > 0 for lv in tp8["levels"])
    # where the layout's time went: the engine's start, the levels, the stop, and the tool's own rest
    t = tp8["timing"]
    assert t["ready_s"] == tp8["health"]["ready_after_s"]
    assert t["bench_s"] == round(sum(lv["duration_s"] for lv in tp8["levels"]), 3) > 0
    # each level's warm-up is the engine's work, kept out of the tool's time
    assert t["warmup_s"] == round(sum(lv["warmup"]["seconds"] for lv in tp8["levels"]), 3) > 0
    assert t["stop_s"] > 0 and t["deploy_s"] >= t["ready_s"]
    assert_timing_adds_up(t)
    assert "timing" in tp8["formulas"]
    # planner refusals are results, with the verdict and the reasons
    oom, inv = recs["tp4ep2.json"], recs["tp2ep4.json"]
    assert (oom["status"], oom["prediction"]["verdict"]) == ("skipped", "oom") and oom["reasons"]
    assert (inv["status"], inv["prediction"]["verdict"]) == ("skipped", "invalid") and inv["reasons"]
    # one record context (results.record_context): a skipped record names the ok one's gpu and versions
    for rec in (oom, inv):
        assert rec["gpu"] == tp8["gpu"] and "gpu_present" in rec["gpu"]
        assert rec["versions"] == {**tp8["versions"], "engine_version": None}
    # the report, and latest
    out_dir = results / run_id
    report = (out_dir / "REPORT.md").read_text()
    assert "Winner for single-request speed: tp8" in report and "tp8 (simulated)" in report
    # the seed's by-hand figures beside the prediction, its TP8 flagged with the named cause
    assert "| seed-box | tp8 (reference) | 26.3 |" in report and "slower_than_hardware" in report
    assert "| tool s |" in report
    for name in ("summary.csv", "summary.json", "throughput.png", "pareto.png"):
        assert (out_dir / name).stat().st_size > 0
    assert (results / "latest").resolve() == out_dir.resolve()
    # each level was shown while the benchmark ran; the facts are in the runner's fact cache
    out = _stdout(r1)
    assert "seed-box/tp8 level c=1 done:" in out and "seed-box/tp8 level c=4 done:" in out
    facts = cached_facts(r1, "seed-box")
    assert facts["sglang_bench"]["layout"] == "tp8" and facts["sglang_bench"]["run_id"] == run_id
    assert facts["sglang_bench_results"]["tp8"]["peak_output_tok_s"] == tp8["summary"]["peak_output_tok_s"]

    # the same run id resumes: nothing is measured again, no file changes
    before = {p.name: p.stat().st_mtime_ns for p in host.iterdir()}
    r2 = run_playbook("sweep.yml", extravars=base)
    assert r2.status == "successful", failed_messages(r2)
    assert {p.name: p.stat().st_mtime_ns for p in host.iterdir()} == before
    assert "result already stored" in _stdout(r2)

    # forced: the oom layout is started anyway, dies, and its failure is a new attempt; nothing overwritten
    r3 = run_playbook(
        "sweep.yml",
        extravars={**base, "sglang_layouts": [LAYOUTS[1]], "sglang_force": True, "sglang_force_rerun": True},
    )
    assert r3.status == "successful", failed_messages(r3)
    recs = _records(host)
    assert recs["tp4ep2.json"] == oom
    failed = recs["tp4ep2.attempt2.json"]
    assert failed["status"] == "failed" and failed["attempt"] == 2
    assert failed["failure_class"] not in (None, "", "error") and failed["evidence"]
    # a start that failed: its record is stored after the stop too, the gate's wait is the engine's start
    assert (
        failed["timing"]["ready_s"] > 0 and failed["timing"]["bench_s"] == failed["timing"]["warmup_s"] == 0
    )
    assert_timing_adds_up(failed["timing"])
    # a failed record carries the same context: the plan entry's engine, no server version (it never started)
    assert failed["gpu"] == tp8["gpu"] and failed["versions"] == {**tp8["versions"], "engine_version": None}
    # the report prefers the latest attempt and is re-runnable from the stored records alone
    r4 = run_playbook("report.yml", extravars={"sglang_results_dir": str(results), "run_id": run_id})
    assert r4.status == "successful", failed_messages(r4)
    summary = json.loads((out_dir / "summary.json").read_text())
    rows = {row["layout"]: row for row in summary["rows"]}
    assert rows["tp4ep2"]["status_code"] == "failed" and rows["tp4ep2"]["attempt"] == 2
    assert summary["winners"]["peak_throughput"]["layout"] == "tp8" and summary["simulated"] is True


def test_bench_playbook_measures_the_deployed_layout(run_playbook, tmp_path, run_dir, engine_port):
    results = tmp_path / "results"
    # with --enable-metrics, so that the telemetry reads the simulator's /metrics
    layouts = [{**LAYOUTS[0], "args": {"enable_metrics": True}}]
    common = {"sglang_layouts": layouts, "sglang_run_dir": str(run_dir), "sglang_base_port": engine_port}
    # one short rate level after the concurrency ladder, an SLO, a one-step SLO search and a cost
    rates = {
        "sglang_bench_request_rates": [20],
        "sglang_bench_duration_s": 0.3,
        "sglang_bench_slo": {"ttft_p99_ms": 60000, "search": True, "search_steps": 1},
        "sglang_gpu_hour_cost": 2.0,
    }
    try:
        r1 = run_playbook("deploy.yml", extravars={**common, "layout": "tp8"})
        assert r1.status == "successful", failed_messages(r1)
        # as with ansible.cfg's fact cache, the next playbook starts from the facts deploy.yml left
        cache = Path(tmp_path / "runner" / "artifacts" / "bench" / "fact_cache")
        shutil.copytree(fact_cache_dir(r1), cache)
        # a bad load: the job refuses it before any request, and the wait fails at once with its
        # message (not after sglang_bench_level_timeout), storing no record
        bad = run_playbook(
            "bench.yml",
            ident="bench",
            extravars={
                **common,
                **SHORT_BENCH,
                "sglang_bench_request_rates": [0],
                "sglang_bench_level_timeout": 3600,
                "sglang_results_dir": str(results),
                "run_id": "bench-bad",
            },
        )
        assert bad.status == "failed"
        assert any(
            "Each level as it ends" in m and "every rate must be a number of requests/s > 0" in m
            for m in failed_messages(bad)
        ), failed_messages(bad)
        assert not (results / "bench-bad" / "seed-box" / "tp8.json").exists()
        r2 = run_playbook(
            "bench.yml",
            ident="bench",
            extravars={
                **common,
                **SHORT_BENCH,
                **rates,
                "sglang_results_dir": str(results),
                "run_id": "bench-it",
            },
        )
        assert r2.status == "successful", failed_messages(r2)
    finally:
        run_playbook("stop.yml", extravars=common)
    rec = json.loads((results / "bench-it" / "seed-box" / "tp8.json").read_text())
    assert rec["status"] == "ok" and [lv["concurrency"] for lv in rec["levels"][:2]] == [1, 4]
    assert [(lv["mode"], lv["request_rate"], lv.get("phase")) for lv in rec["levels"]] == [
        ("concurrency", None, None),
        ("concurrency", None, None),
        ("rate", 20, None),
        ("rate", 40, "slo_search"),
    ]
    assert all(lv["slo_met"] is True and lv["goodput_tok_s"] > 0 for lv in rec["levels"])
    assert rec["slo_max_rate"] == 40 and rec["summary"]["slo_search"]["steps"] == [40]
    assert rec["cost_per_mtok"]["peak"] == pytest.approx(
        2.0 * 8 / 3600 / rec["summary"]["peak_output_tok_s"] * 1e6
    )
    tele = rec["levels"][2]["telemetry"]
    assert tele["server"]["available"] and tele["server"]["metrics"]["cache_hit_rate"]["mean"] is not None
    if shutil.which("nvidia-smi") is None:
        assert tele["gpu"] == "absent"
    assert "Winner under the SLO" in (results / "bench-it" / "REPORT.md").read_text()
    assert rec["health"]["layout"] == "tp8" and rec["prediction"]["kv_tokens"] > 0
    assert (results / "bench-it" / "REPORT.md").exists()
    assert cached_facts(r2, "seed-box")["sglang_bench"]["record"].endswith("bench-it/seed-box/tp8.json")


def test_engine_killed_mid_benchmark_is_one_record_with_the_levels_before(
    run_playbook, tmp_path, run_dir, engine_vars
):
    """issue 15's fault: the engine SIGKILLed during tp8's concurrency-16 level.

    The engine kills itself as the level's fifth request arrives (fault killed_at_in_flight:5;
    levels 1 and 4 never have five at once): the level decides the moment, not a watcher's
    timing against how fast the level runs."""
    results = tmp_path / "results"
    layouts = [{**LAYOUTS[0], "env": {"SGLANG_SIM_FAULT": "killed_at_in_flight:5"}}, *LAYOUTS[1:]]
    r = run_playbook(
        "sweep.yml",
        extravars={
            **SHORT_BENCH,
            "sglang_bench_concurrency": [1, 4, 16, 64],
            "run_id": "killed",
            "sglang_layouts": layouts,
            **engine_vars,
        },
    )
    # the oom and invalid layouts are skipped, tp8 failed: nothing measured, the sweep says so
    assert r.status == "failed" and any(
        "No layout of run killed could be measured" in m for m in failed_messages(r)
    )
    recs = _records(results / "killed" / "seed-box")
    assert sorted(recs) == ["tp2ep4.json", "tp4ep2.json", "tp8.json"]  # one record, no attempt 2
    rec = recs["tp8.json"]
    assert rec["status"] == "failed" and rec["failure_class"] == "crashed", rec["failure_class"]
    assert [lv["concurrency"] for lv in rec["levels"]] == [1, 4, 16]  # stopped where it died
    assert rec["levels"][1]["completed"] == 8 and rec["levels"][2]["failed"] > 0
    assert rec["evidence"]["server_died"]["concurrency"] == 16
    assert "signal 9" in str(rec["evidence"]["exit_status"]) and rec["evidence"]["log_tail"]
    assert rec["msg"].startswith("the server died during concurrency 16")
    row = {x["layout"]: x for x in json.loads((results / "killed" / "summary.json").read_text())["rows"]}[
        "tp8"
    ]
    assert (
        row["status_code"] == "failed" and row["failure_class"] == "crashed" and row["peak_tok_s"]
    )  # the measured levels are in the report
    # nothing left running
    assert not list(run_dir.glob("*.pid")) or all(
        not supervisor_running(run_dir, p.stem) for p in run_dir.glob("*.pid")
    )


def supervisor_running(run_dir: Path, name: str) -> bool:
    from sglang_layouts.serve import supervisor

    return supervisor.status(str(run_dir), name)["running"]


def test_bad_run_level_inputs_stop_before_any_host(run_playbook, tmp_path, run_dir, engine_port):
    """A run id with a slash, a results dir that cannot be written: refused on the controller, no host touched."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    base = {"sglang_layouts": LAYOUTS[:1], "sglang_run_dir": str(run_dir), "sglang_base_port": engine_port}
    r = run_playbook(
        "sweep.yml", extravars={**base, "run_id": "a/b", "sglang_results_dir": str(tmp_path / "res")}
    )
    assert r.status == "failed" and any(
        "run id 'a/b' cannot name a results folder" in m for m in failed_messages(r)
    )
    r = run_playbook(
        "sweep.yml", extravars={**base, "run_id": "ok1", "sglang_results_dir": str(blocker / "res")}
    )
    assert r.status == "failed" and any(str(blocker) in m for m in failed_messages(r)), failed_messages(r)
    assert list(run_dir.iterdir()) == []  # no engine file, no process, no log


def test_a_refused_sweep_leaves_results_latest_where_it_was(run_playbook, tmp_path, run_dir, engine_port):
    """The planner refuses the layouts: the sweep stops before results/latest moves or a run folder
    is made, and before any host is touched."""
    results = tmp_path / "res"
    (results / "earlier").mkdir(parents=True)
    os.symlink("earlier", results / "latest")
    r = run_playbook(
        "sweep.yml",
        extravars={
            "run_id": "refused",
            "sglang_results_dir": str(results),
            "sglang_run_dir": str(run_dir),
            "sglang_base_port": engine_port,
            "sglang_layouts": [{"name": "all", "tp": 8}],
        },
    )
    assert r.status == "failed"
    assert any("name is reserved" in m for m in failed_messages(r)), failed_messages(r)
    assert os.readlink(results / "latest") == "earlier" and not (results / "refused").exists()
    assert list(run_dir.iterdir()) == []


def test_ctrl_c_in_the_middle_of_a_layout_then_the_same_run_id_resumes(
    run_playbook, tmp_path, run_dir, engine_vars
):
    """Ctrl-C (SIGINT to ansible-playbook's process group, as a terminal sends it) during tp8's
    benchmark: no record is half-written; the next run with the same run id measures what is
    missing, keeps what is stored, and leaves nothing running."""
    import subprocess

    from sglang_layouts.serve import supervisor

    results = tmp_path / "results"
    extra = {
        **SHORT_BENCH,
        "run_id": "ctrl-c",
        "sglang_layouts": [LAYOUTS[0], {"name": "ep8", "tp": 8, "ep": 8}],
        **engine_vars,
    }
    # ansible-playbook itself, not ansible-runner: the test signals its process group as a terminal does
    env = {**os.environ, **ansible_env(), "ANSIBLE_CACHE_PLUGIN": "memory"}
    cmd = playbook_command("sweep.yml", extravars=extra)
    p = subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        deadline = time.time() + 300
        while time.time() < deadline and p.poll() is None:
            if any("level c=1 done" in f.read_text() for f in (run_dir / "bench").glob("*tp8*.progress")):
                break
            time.sleep(0.1)
        assert p.poll() is None, "the sweep ended before it could be interrupted"
        os.killpg(p.pid, signal.SIGINT)
        p.wait(timeout=120)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    host = results / "ctrl-c" / "seed-box"
    assert not list(host.glob("tp8*.json")) and not list(host.glob(".*.tmp"))  # nothing half-written
    r = run_playbook("sweep.yml", extravars=extra)
    assert r.status == "successful", failed_messages(r)
    recs = _records(host)
    assert sorted(recs) == ["ep8.json", "tp8.json"]
    assert all(rec["status"] == "ok" and rec["attempt"] == 1 for rec in recs.values())
    assert [lv["concurrency"] for lv in recs["tp8.json"]["levels"]] == [1, 4]
    for pidfile in run_dir.glob("*.pid"):
        assert not supervisor.status(str(run_dir), pidfile.name[: -len(".pid")])["running"], pidfile
