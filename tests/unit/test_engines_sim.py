"""engines.py is the one place that knows an engine: the simulator is an entry of its own (SIM, asked
`.simulated`, never compared by name), and serve/render.py's serving flags come from each Engine's
serving_flags, not from a second table."""

from __future__ import annotations

import dataclasses

from sglang_layouts import engines
from sglang_layouts.plan import pd
from sglang_layouts.report import compare, results
from sglang_layouts.serve import render

SPEC = type("Spec", (), {"path": "/models/m", "name": "m"})
LAY = {"enable_dp_attention": False}
PAR = {"tp": 8, "pp": 1, "ep": 1, "dp": 1, "nnodes": 1}


def test_the_simulator_is_an_engine_entry():
    assert engines.engine("sim") is engines.SIM is engines.ENGINES["sim"]
    assert engines.engine("sim").simulated is True and engines.engine("SIM").simulated is True
    assert engines.engine("sglang").simulated is False and engines.engine(None).simulated is False
    assert engines.engine("vllm").simulated is False
    # SGLang in all the planner and the records read: name (unit names, flag table), launcher, flags
    sim, sgl = engines.SIM, engines.SGLANG
    assert sim.name == sgl.name == "sglang" and sim.unit_prefix == "sglang"
    assert sim.launcher == sgl.launcher and sim.serving_flags == sgl.serving_flags
    assert engines.flags_path(sim) == engines.flags_path(sgl)
    # what differs: the module its unit runs, and no JIT builds
    assert (sim.unit_module, sim.jit_tools) == ("sglang_sim", ())
    assert sgl.unit_module == engines.VLLM.unit_module == ""


def test_every_site_asks_the_engine_whether_it_is_the_simulator():
    assert [engines.is_simulated(n) for n in ("sim", "Sim", "sglang", "vllm", None, "tgi")] == [
        True,
        True,
        False,
        False,
        False,
        False,
    ]
    assert pd.pd_engine({"engine": "SIM"}) == "sim"
    assert pd.pd_engine({"engine": "vllm"}) == pd.pd_engine({}) == "sglang"
    assert pd.pd_engine({"engine": "tgi"}) == "sglang"  # pd_engine never refuses a name
    assert compare.engine_of({"simulated": True}) == "sim"
    assert compare.engine_of({"simulated": False}) == "sglang"
    for engine, simulated in (("sim", True), ("sglang", False), ("vllm", False), (None, False)):
        rec = results.build_record("20260101-000000", "h", "l", "ok", engine=engine)
        assert rec["simulated"] is simulated


def _argv(eng, serving, args=None):
    serving = {"host": "127.0.0.1", **serving}
    return render.render_argv(SPEC, LAY, PAR, serving, args or {}, 30000, eng)


def test_render_reads_each_engines_serving_flags():
    sgl = render.serving_flag_keys(engines.SGLANG)
    assert sgl == {
        "--mem-fraction-static": "mem_fraction_static",
        "--context-length": "context_length",
        "--max-running-requests": "max_running_requests",
        "--attention-backend": "attention_backend",
    }
    assert render.serving_flag_keys(engines.VLLM) == {
        "--gpu-memory-utilization": "gpu_memory_utilization",
        "--max-model-len": "context_length",
        "--max-num-seqs": "max_running_requests",
    }
    assert render.serving_flag_keys(engines.SIM) == sgl


def test_a_flag_added_to_an_engine_shows_up_in_its_argv():
    serving = {"mem_fraction_static": 0.8, "chunked_prefill_size": 4096, "grammar_backend": "none"}
    assert "--chunked-prefill-size" not in _argv(engines.SGLANG, serving)
    for base in (engines.SGLANG, engines.VLLM):
        eng = dataclasses.replace(
            base, serving_flags={**base.serving_flags, "chunked_prefill_size": "--chunked-prefill-size"}
        )
        argv = _argv(eng, serving)
        assert argv[argv.index("--chunked-prefill-size") + 1] == "4096"
        # a layout's args: still win over the serving value
        argv = _argv(eng, serving, {"--chunked-prefill-size": 8192})
        assert argv.count("--chunked-prefill-size") == 1
        assert argv[argv.index("--chunked-prefill-size") + 1] == "8192"
    # a flag renamed in the engine's table is the one rendered
    eng = dataclasses.replace(
        engines.VLLM, serving_flags={**engines.VLLM.serving_flags, "context_length": "--max-len"}
    )
    argv = _argv(eng, {"context_length": 4096})
    assert "--max-model-len" not in argv and argv[argv.index("--max-len") + 1] == "4096"


def test_sglang_argv_keeps_its_order():
    serving = {
        "mem_fraction_static": 0.8,
        "context_length": 4096,
        "max_running_requests": 16,
        "attention_backend": "triton",
        "grammar_backend": "none",
        "trust_remote_code": True,
        "kv_cache_dtype": "fp8_e4m3",  # reaches the command line only through args:
    }
    tail = _argv(engines.SGLANG, serving)[8:]
    assert tail == [
        "--mem-fraction-static",
        "0.8",
        "--context-length",
        "4096",
        "--max-running-requests",
        "16",
        "--attention-backend",
        "triton",
        "--trust-remote-code",
        "--grammar-backend",
        "none",
    ]
    assert _argv(engines.SIM, serving) == _argv(engines.SGLANG, serving)
