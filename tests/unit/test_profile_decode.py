"""benchmarks/profile_decode.py reduces torch-profiler traces to decode steps, and
benchmarks/pin_constants.py --profile turns that summary into speed.py's constants.

The traces here are kineto's chrome-trace shape (kernel events of category `kernel`, the
`cudaGraphLaunch` runtime event whose correlation id every kernel of the replay carries), built by
hand so that each figure is known; a real trace's reduction is committed with its lease."""

from __future__ import annotations

import gzip
import json
import sys

import pytest

from tests.helpers.playbook import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

import pin_constants
import profile_decode


def _kernel(name, ts, dur, corr):
    return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "args": {"correlation": corr}}


def _launch(ts, corr):
    return {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": "cudaGraphLaunch",
        "ts": ts,
        "dur": 4,
        "args": {"correlation": corr},
    }


def _replays(steps=3, period=1000.0):
    """Each replay: a GEMM (10 us), decode attention (5 us), a fused MoE (20 us), an RMSNorm (2 us),
    2 us apart; one eager sampling kernel after each replay (another correlation id)."""
    ev = []
    for s in range(steps):
        t = s * period
        ev.append(_launch(t, 100 + s))
        cur = t + 50
        for name, dur in (
            ("nvjet_tst_64x8_64x16_4x1_v_bz_TNT", 10),
            ("_fwd_grouped_kernel_stage1", 5),
            ("fused_moe_kernel", 20),
            ("rms_norm_kernel", 2),
        ):
            ev.append(_kernel(name, cur, dur, 100 + s))
            cur += dur + 2
        ev.append(_kernel("argmax_kernel", cur + 30, 3, 900 + s))
    return ev


def test_a_step_is_one_graph_replay_and_its_span_splits_into_kernels_and_gaps(tmp_path):
    (tmp_path / "traces").mkdir()
    with gzip.open(tmp_path / "traces" / "b1-p256-1-TP-0.trace.json.gz", "wt") as f:
        json.dump({"traceEvents": _replays()}, f)
    (tmp_path / "run.json").write_text(
        json.dumps(
            {
                "points": [
                    {
                        "point": "b1-p256",
                        "batch": 1,
                        "prompt_tokens": 256,
                        "trace": "b1-p256-1-TP-0.trace.json.gz",
                    }
                ]
            }
        )
    )
    assert profile_decode.main(["analyze", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "profile-summary.json").read_text())
    (point,) = doc["points"]
    assert point["point"] == "b1-p256" and point["batch"] == 1
    pr = point["profile"]
    assert pr["segmented_by"] == "cuda_graph" and pr["steps"] == 3
    # the eager argmax is not part of the replay
    assert pr["kernels_per_step"] == [4, 4, 4]
    assert pr["span_us_median"] == 43.0 and pr["busy_us_median"] == 37.0 and pr["idle_us_median"] == 6.0
    assert pr["idle_us_per_kernel_boundary"] == 2.0
    assert pr["period_us_median"] == 1000.0 and pr["outside_replay_us_median"] == 957.0
    assert {c: v["us"] for c, v in pr["by_class"].items()} == {
        "moe": 20.0,
        "gemm": 10.0,
        "attention_decode": 5.0,
        "norm": 2.0,
    }


def test_without_graph_launches_steps_are_cut_at_idle_gaps():
    ev = [e for e in _replays() if e["cat"] == "kernel"]
    steps, how = profile_decode.steps_of(ev, step_gap_us=200)
    assert how == "idle_gaps"
    # eager: the sampling kernel belongs to the step it follows
    assert [len(s) for s in steps] == [5, 5, 5]


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("_fwd_kernel_stage2", "attention_decode"),
        ("fused_moe_kernel", "moe"),
        ("moe_align_block_size_kernel", "moe"),
        ("nvjet_tst_128x8_64x12_2x1_v_bz_TNN", "gemm"),
        ("void at::native::vectorized_elementwise_kernel<4, ...>", "elementwise"),
        ("FusedAddRMSNormKernel", "norm"),
    ],
)
def test_kernel_classes(name, cls):
    assert profile_decode.kernel_class(name) == cls


def test_pins_come_from_the_profile_with_the_models_own_bytes(tmp_path):
    """eta_weights is the inverse slope of the streaming kernels' time against the model's weight bytes
    by batch (their floors the intercept); tau_kernel_us what the batch-1 span spends beyond weights and
    KV, per node; eta_kv the inverse slope of attention time against KV bytes."""
    folder = tmp_path / "prof"
    folder.mkdir()
    hw = pin_constants.H200
    m = pin_constants._model({"layout": "tp1", "argv": []}, hw)
    st = m.stages[0]
    layers = int(st["layers"])
    eta_w, floors_us, eta_kv, kernels = 0.8, 1000.0, 0.5, 900

    def weights_us(batch):
        return 1e6 * (st["dense_bytes"] + st["expert_bytes"] * m.expert_share(batch)) / (eta_w * m.bw)

    def kv_us(batch, prompt):
        return 1e6 * m.kv_read_bytes(layers, batch, batch * (prompt + 10 + 6 / 2)) / (eta_kv * m.bw)

    def point(name, batch, prompt, span, period=None):
        stream = floors_us + weights_us(batch)
        prof = {
            "steps": 6,
            "kernels_per_step": [kernels] * 6,
            "span_us_median": span,
            "by_class": {
                "gemm": {"us": 0.3 * stream},
                "moe": {"us": 0.7 * stream},
                "attention_decode": {"us": 40.0 + kv_us(batch, prompt)},
            },
        }
        if period:
            prof["period_us_median"] = period
            prof["outside_replay_us_median"] = period - span
        # 10 tokens decoded when the profile was asked for, 6 steps profiled
        return {
            "point": name,
            "batch": batch,
            "prompt_tokens": prompt,
            "decoded_at_profile": 10,
            "profile": prof,
        }

    span1 = 4000.0
    pts = [point("b1-p256", 1, 256, span1, period=4200.0)]
    pts += [point(n, b, p, 20000.0) for n, b, p in (("b64-p256", 64, 256), ("b32-p2048", 32, 2048))]
    (folder / "profile-summary.json").write_text(json.dumps({"argv": [], "points": pts}))
    before = dict(pin_constants.speed.CONSTANTS)
    pins = pin_constants.pin_profile(str(folder), hw)
    assert before == pin_constants.speed.CONSTANTS  # returned, not set behind the caller's back
    assert pins["eta_weights"]["value"] == pytest.approx(eta_w, abs=1e-3)
    assert pins["eta_kv"]["value"] == pytest.approx(eta_kv, abs=1e-3)
    tau = (span1 - weights_us(1) - kv_us(1, 256)) / kernels
    assert pins["tau_kernel_us"]["value"] == pytest.approx(tau, abs=5e-3)
    assert pins["t_fixed_ms"]["value"] == 0.2


def test_eta_elementwise_is_the_slope_of_an_elementwise_nodes_time_against_the_bytes_it_moves(tmp_path):
    folder = tmp_path / "prof"
    folder.mkdir()
    hw = {**pin_constants.H200, "gpu_name": "NVIDIA H100 80GB HBM3"}
    eta, floor_us, count = 0.3, 1.5, 4000
    bw = 3350e9  # the H100's row (gpu_specs)
    hidden = 5376  # Gemma 3 27B

    def point(batch):
        per_node = floor_us + 1e6 * batch * hidden * 8 / (eta * bw)
        prof = {
            "steps": 6,
            "kernels_per_step": [4558] * 6,
            "by_class": {"elementwise": {"count": count, "us": count * per_node}},
        }
        return {
            "point": f"b{batch}-p256",
            "batch": batch,
            "prompt_tokens": 256,
            "decoded_at_profile": 10,
            "profile": prof,
        }

    argv = [
        "python3",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "/var/lib/sglang-models/gemma-3-27b-text",
    ]
    doc = {"argv": argv, "points": [point(1), point(8), point(16)]}
    (folder / "profile-summary.json").write_text(json.dumps(doc))
    pin = pin_constants.pin_elementwise(str(folder), hw)["eta_elementwise"]
    assert pin["value"] == pytest.approx(eta, abs=1e-3)
    assert "gemma-3-27b-text, hidden 5376" in pin["derivation"]


def test_a_paths_per_layer_extra_is_the_batch_1_span_beyond_the_model(tmp_path):
    # gpt-oss-120b on an H100 takes the triton_kernels MXFP4 path; a span 10 us a layer over the
    # model's replay (every other constant as it stands) pins q_extra_mxfp4_us at 10
    folder = tmp_path / "prof"
    folder.mkdir()
    hw = {**pin_constants.H200, "gpu_name": "NVIDIA H100 80GB HBM3"}
    _, plan = pin_constants.bench_predict.model(
        "gpt-oss-120b", {"name": "tp1", "tp": 1, "args": {"load_format": "dummy"}}, hw, {}
    )
    plan["argv"] = []
    m, _ = pin_constants.speed.model_for(plan, hw)
    with pin_constants.speed.overrides({"q_extra_mxfp4_us": 0.0}):
        t = m.decode_terms(1, 256 + 10 + 3)
    layers = int(m.stages[0]["layers"])
    span = (t["step_s"] - t["cpu"] - t["fixed"]) * 1e6 + 10.0 * layers
    prof = {"steps": 6, "kernels_per_step": [868] * 6, "span_us_median": span, "by_class": {}}
    point = {"point": "b1-p256", "batch": 1, "prompt_tokens": 256, "decoded_at_profile": 10, "profile": prof}
    (folder / "profile-summary.json").write_text(json.dumps({"argv": [], "points": [point]}))
    pin = pin_constants.pin_layer_extra(str(folder), hw, "q_extra_mxfp4_us")["q_extra_mxfp4_us"]
    assert pin["value"] == pytest.approx(10.0, abs=0.01)
    # a GPU where SGLang does not take that path is refused, not pinned
    with pytest.raises(SystemExit, match="does not take the triton_kernels MXFP4 MoE"):
        pin_constants.pin_layer_extra(str(folder), {**hw, "gpu_name": "NVIDIA B200"}, "q_extra_mxfp4_us")
