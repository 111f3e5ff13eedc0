"""One host, layouts of two engines: every row names its engine, simulated rows stay marked,
and the record's engine is the layout's (the plan's), not the host-wide sglang_engine; what the
roles read of an engine comes from engines.py."""

from __future__ import annotations

import csv
import io
import json

import pytest
from sglang_layouts import engines
from sglang_layouts.estimate.model import PlanError
from sglang_layouts.report import compare, results

from tests.helpers.records import level as _level
from tests.helpers.records import store


def _store(rd, layout, plan_engine, levels, host_engine="sglang", status="ok", **kw):
    plan = {"verdict": "fits", "gpus_used": 8, "kv_tokens": 1000, "reasons": [], "engine": plan_engine}
    # engine: what the sweep passes, sglang_engine
    return store(rd, "mixed", "gpu-box", layout, levels, plan, status, host_engine, ready_after_s=40.0, **kw)


def test_the_plan_engine_wins_over_the_host_engine(tmp_path):
    rec = _store(str(tmp_path), "tp8-vllm", "vllm", [_level(1, 30.0, 30.0, 40.0)])
    assert rec["engine"] == "vllm" and rec["simulated"] is False
    rec = _store(str(tmp_path), "tp8-sim", "sim", [_level(1, 30.0, 30.0, 40.0)])
    assert rec["engine"] == "sim" and rec["simulated"] is True
    # no plan engine (older plans): the caller's
    rec = results.build_record("r", "h", "l", "skipped", engine="sglang", plan={"verdict": "oom"})
    assert rec["engine"] == "sglang"


def test_a_sweep_of_two_engines_on_one_host(tmp_path):
    rd = str(tmp_path)
    _store(
        rd, "tp8", "sglang", [_level(1, 26.0, 26.0, 50.0), _level(64, 808.0, 12.6, 300.0)], extra={"order": 0}
    )
    _store(
        rd,
        "tp8-vllm",
        "vllm",
        [_level(1, 31.0, 31.0, 45.0), _level(64, 700.0, 11.0, 280.0)],
        extra={"order": 1},
    )
    _store(
        rd,
        "tp4-vllm",
        "vllm",
        [],
        status="failed",
        failure_class="kv_cache_no_memory",
        msg="No available memory for the cache blocks",
        extra={"order": 2},
    )
    out = compare.build_report(rd, "mixed", plots=True)
    md = out["markdown"]
    header = next(line for line in md.splitlines() if line.startswith("| layout"))
    assert header.startswith("| layout | engine | GPUs |")
    assert "| tp8 (sglang) | sglang | 8 |" in md
    assert "| tp8-vllm (vllm) | vllm | 8 |" in md
    assert "| tp4-vllm (vllm) | vllm | 8 | failed: kv_cache_no_memory |" in md
    assert "SIMULATED" not in md
    assert "**Winner for single-request speed: tp8-vllm** (vllm): 31.0" in md
    assert "**Winner for peak throughput: tp8** (sglang): 808.0" in md
    assert "- tp4-vllm [vllm]: failed: kv_cache_no_memory" in md
    rows = list(csv.DictReader(io.StringIO((tmp_path / "mixed" / "summary.csv").read_text())))
    assert [(r["layout"], r["engine"]) for r in rows] == [
        ("tp8", "sglang"),
        ("tp8-vllm", "vllm"),
        ("tp4-vllm", "vllm"),
    ]
    doc = json.loads((tmp_path / "mixed" / "summary.json").read_text())
    assert doc["engines"] == ["sglang", "vllm"]
    assert doc["winners"]["single_request"]["engine"] == "vllm"


def test_simulated_rows_stay_marked_beside_a_real_engine(tmp_path):
    rd = str(tmp_path)
    _store(rd, "ep8", "sim", [_level(1, 65.0, 65.0, 40.0)], extra={"order": 0})
    _store(rd, "cpu-tp1", "vllm", [_level(1, 20.0, 20.0, 60.0)], extra={"order": 1})
    md = compare.build_report(rd, "mixed", plots=False)["markdown"]
    assert "SIMULATED" in md
    assert "| ep8 (simulated) | sim |" in md and "| cpu-tp1 (vllm) | vllm |" in md
    # a measured row beats a faster simulated one: the simulator's speed is a cost model
    assert "**Winner for single-request speed: cpu-tp1** (vllm): 20.0" in md


def test_single_engine_run_shows_the_engine_column_without_tags(tmp_path):
    rd = str(tmp_path)
    _store(rd, "cpu-tp1", "vllm", [_level(1, 20.0, 20.0, 60.0), _level(4, 60.0, 15.0, 90.0)])
    md = compare.build_report(rd, "mixed", plots=False)["markdown"]
    assert "| cpu-tp1 | vllm |" in md
    assert "**Winner for single-request speed: cpu-tp1**: 20.0" in md


def test_old_records_without_an_engine_field(tmp_path):
    assert compare.engine_of({"simulated": True}) == "sim"
    assert compare.engine_of({"prediction": {"engine": "vllm"}}) == "vllm"
    assert compare.engine_of({}) == "sglang"


def test_the_roles_read_each_engines_label_venv_whether_it_is_simulated_and_its_jit_tools():
    assert engines.role_facts("vllm") == {
        "label": "vLLM",
        "venv_var": "vllm_venv_path",
        "simulated": False,
        "jit_tools": [],
    }
    assert engines.role_facts("sim") == {
        "label": "SGLang",
        "venv_var": "sglang_venv_path",
        "simulated": True,
        "jit_tools": [],
    }
    assert (
        engines.role_facts(None)
        == engines.role_facts("sglang")
        == {
            "label": "SGLang",
            "venv_var": "sglang_venv_path",
            "simulated": False,
            "jit_tools": ["nvcc", "ninja", "c++", "flashinfer data"],
        }
    )
    with pytest.raises(PlanError, match="engine 'tgi' is not known"):
        engines.role_facts("tgi")
