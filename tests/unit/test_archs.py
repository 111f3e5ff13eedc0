"""The architectures of issue 31 against figures worked out independently of the planner.

Parameter counts are the model cards' published totals; pool sizes are SGLang 0.5.16's own formulas
(model_executor/pool_configurator.py, mem_cache/kv_cache_configurator.py) written out here by hand.
"""

import json

import pytest
from sglang_layouts.estimate.memory import CUDA_CONTEXT_SINGLE_GPU_GIB
from sglang_layouts.estimate.model import GIB, PlanError, load_model
from sglang_layouts.gpu_specs import gpu_spec
from sglang_layouts.plan import planner
from sglang_layouts.speed import SpeedModel

H200_1 = {"gpu_count": 1, "gpu_memory_gib": 139.80, "gpu_interconnect": "nvlink", "gpu_name": "NVIDIA H200"}
SERVING = {"mem_fraction_static": 0.88, "context_length": 8192}


def config(repo, name, **changes):
    raw = json.loads((repo / "models" / name / "config.json").read_text())
    raw.update(changes)
    return raw


def plan_one(raw, layout=None, hardware=H200_1, serving=SERVING):
    inputs = {
        "host": "h",
        "model": {"name": "m", "path": "/x/m", "hf_config": raw, "load_format": "dummy"},
        "layouts": [layout or {"name": "tp1", "tp": 1}],
        "hardware": hardware,
        "serving": serving,
    }
    return planner.plan_host(inputs)["layouts"][0]


def params(raw) -> float:
    """Total parameters from the unquantized inventory (bf16: bytes / 2)."""
    raw = {k: v for k, v in raw.items() if k != "quantization_config"}
    spec = load_model({"name": "m", "hf_config": raw})
    return sum(t.nbytes for t in spec.tensors) / 2


# (model, published total parameters, where it is published)
PUBLISHED = [
    ("mixtral-8x7b", 46.7e9, "Mixtral of Experts paper: 46.7B total"),
    ("qwen1.5-moe-a2.7b", 14.3e9, "Qwen1.5-MoE-A2.7B model card: 14.3B"),
    ("glm-4.5-air-fp8", 106e9, "GLM-4.5 model card: Air 106B total"),
    ("glm-4.6", 355e9, "GLM-4.5/4.6 model cards: 355B total"),
    ("gpt-oss-120b", 116.8e9, "gpt-oss model card: 116.8B total"),
    ("gpt-oss-20b", 20.9e9, "gpt-oss model card: 20.9B total"),
    ("llama-4-scout-text", 108e9, "Llama 4 Scout: 109B total with the vision encoder"),
    ("gemma-3-27b-text", 27.0e9, "Gemma 3 27B (text decoder; the 0.4B SigLIP encoder aside)"),
    ("qwen3-next-80b-a3b", 80e9, "Qwen3-Next-80B-A3B model card: 80B total"),
    ("minimax-m2", 230e9, "MiniMax-M2 model card: 230B total"),
]


@pytest.mark.parametrize("name,total,source", PUBLISHED, ids=[p[0] for p in PUBLISHED])
def test_inventory_matches_the_published_parameter_count(repo, name, total, source):
    assert params(config(repo, name)) == pytest.approx(total, rel=0.02), source


def test_gpt_oss_mxfp4_quantizes_only_the_experts(repo):
    spec = load_model({"name": "m", "hf_config": config(repo, "gpt-oss-120b")})
    experts = sum(t.nbytes for t in spec.tensors if t.component == "routed_experts")
    rest = sum(t.nbytes for t in spec.tensors if t.component != "routed_experts")
    c = spec.config
    weights = 36 * 128 * 3 * 2880 * 2880
    biases = 36 * 128 * (2 * 2880 + 2880) * 2
    # 4 bits + one e8m0 scale per 32 weights; expert biases stay bf16 (mxfp4.py create_weights)
    assert experts == weights // 2 + weights // 32 + biases
    attention_q = 64 * 64 * c["hidden_size"]
    assert any(t.nbytes == attention_q * 2 for t in spec.tensors if t.name.endswith("self_attn.q_proj"))
    assert rest / GIB == pytest.approx(4.1, abs=0.2)  # embed + lm_head 2 x 201088 x 2880 x 2 B + attention


def test_gpt_oss_pool_is_hybrid_swa_sized_as_sglang_does(repo):
    lay = plan_one(config(repo, "gpt-oss-120b"))
    assert lay["verdict"] == "fits"
    pool = lay["kv_pool"]
    assert (pool["kind"], pool["full_layers"], pool["swa_layers"], pool["window"]) == (
        "hybrid_swa",
        18,
        18,
        128,
    )
    per_layer = 8 * 64 * 2 * 2  # kv heads x head_dim x (k, v) x bf16
    cell = per_layer * 18 + 0.8 * per_layer * 18
    # the plan's own budget arithmetic: mem_fraction_static x the one-GPU context outside it
    kv_gib = lay["budget_gib"] - lay["ranks"][0]["weights_gib"] - 0.88 * CUDA_CONTEXT_SINGLE_GPU_GIB
    assert lay["kv_tokens"] == pytest.approx(kv_gib * GIB / cell, rel=1e-4)
    assert pool["swa_tokens"] == int(lay["kv_tokens"] * 0.8)
    assert any("HybridSWAPoolConfigurator" in n for n in lay["notes"])


def test_qwen3_next_state_pool_takes_its_share_before_the_kv_pool(repo):
    lay = plan_one(config(repo, "qwen3-next-80b-a3b-cut24"))
    pool = lay["kv_pool"]
    # 18 Gated-DeltaNet layers: conv state (32x128 + 2x16x128) x 3 bf16, recurrent 32 x 128 x 128 fp32
    per_req = (8192 * 3 * 2 + 32 * 128 * 128 * 4) * 18
    assert pool["state_bytes_per_request"] == per_req
    budget = (lay["budget_gib"] - lay["ranks"][0]["weights_gib"] - 0.88 * CUDA_CONTEXT_SINGLE_GPU_GIB) * GIB
    slots = int(budget * 0.9 / 1.9 // per_req)
    assert pool["state_slots"] == pytest.approx(slots, abs=1)
    kv_per_token = 6 * 2 * 256 * 2 * 2  # 6 full-attention layers, 2 kv heads of 256, k and v, bf16
    assert pool["bytes_per_token"] == kv_per_token
    assert lay["kv_tokens"] == pytest.approx((budget - slots * per_req) / kv_per_token, rel=1e-3)


def test_gemma3_keeps_every_layer_and_says_why(repo):
    lay = plan_one(config(repo, "gemma-3-27b-text"))
    assert lay["kv_pool"]["bytes_per_token"] == 62 * 16 * 128 * 2 * 2
    assert any("_gemma2_gemma3_overrides" in n for n in lay["notes"])
    spec = load_model({"name": "m", "hf_config": config(repo, "gemma-3-27b-text")})
    assert not any(t.component == "lm_head" for t in spec.tensors)  # tied to the embedding


def test_llama4_wrapper_is_hybrid_swa_with_chunked_layers_sliding(repo):
    spec = load_model({"name": "m", "hf_config": config(repo, "llama-4-scout")})
    assert spec.architecture == "Llama4ForCausalLM" and spec.kv_pool == "hybrid_swa"
    assert spec.swa_layers == tuple(i for i in range(48) if (i + 1) % 4)
    assert spec.window == 8192
    text = load_model({"name": "m", "hf_config": config(repo, "llama-4-scout-text")})
    assert text.kv_pool == "full"


@pytest.mark.parametrize(
    "qc,method,per_weight",
    [
        ({"quant_method": "fp8"}, "fp8_tensor", 1.0),
        ({"quant_method": "modelopt", "quant_algo": "FP8"}, "fp8_tensor", 1.0),
        ({"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16}, "nvfp4", 0.5 + 1 / 16),
        ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}, "awq", 0.5 + 2.5 / 128),
        ({"quant_method": "gptq", "bits": 4, "group_size": 128}, "gptq", 0.5 + 2.5 / 128),
    ],
)
def test_quantized_mlp_bytes_per_weight(repo, qc, method, per_weight):
    raw = config(repo, "mixtral-8x7b", quantization_config=qc)
    spec = load_model({"name": "m", "hf_config": raw})
    assert spec.quant.method == method
    experts = sum(t.nbytes for t in spec.tensors if t.component == "routed_experts")
    n = 32 * 8 * 3 * 4096 * 14336
    extra = 32 * 4 * 14336 if method == "gptq" else 0  # int32 g_idx of the 14336-input down_proj
    assert experts == pytest.approx(n * per_weight + extra * 8, rel=0.002)


def test_compressed_tensors_fp8_channel_adds_one_scale_per_output(repo):
    spec = load_model({"name": "m", "hf_config": config(repo, "glm-4.5-air-fp8")})
    assert spec.quant.method == "fp8_channel"
    t = next(t for t in spec.tensors if t.name == "model.layers.5.self_attn.o_proj")
    assert t.nbytes == 96 * 128 * 4096 + 4096 * 4


def test_unknown_quantization_names_what_is_supported(repo):
    raw = config(repo, "mixtral-8x7b", quantization_config={"quant_method": "hqq"})
    with pytest.raises(
        PlanError, match=r"'hqq' is not supported yet\. Supported quantization: .*NVFP4.*mxfp4.*awq"
    ):
        load_model({"name": "m", "hf_config": raw})


def test_linear_attention_heads_must_split_over_attention_tp(repo):
    raw = config(repo, "qwen3-next-80b-a3b-cut24", linear_num_key_heads=12)
    lay = plan_one(raw, {"name": "tp8", "tp": 8}, {**H200_1, "gpu_count": 8})
    assert lay["verdict"] == "invalid"
    assert any("linear-attention heads (linear_num_key_heads)" in r for r in lay["reasons"])


def test_group_scaled_row_splits_keep_whole_groups_but_mxfp4_pads(repo):
    hw8 = {**H200_1, "gpu_count": 8}
    # gpt-oss at TP8: 2880 / 8 = 360 inputs per rank; SGLang's mxfp4 pads the slice, so it serves
    assert plan_one(config(repo, "gpt-oss-120b"), {"name": "tp8", "tp": 8}, hw8)["verdict"] == "fits"
    # the same split of an awq checkpoint (group 128) is refused, naming the format
    awq = config(
        repo, "gpt-oss-120b", quantization_config={"quant_method": "awq", "bits": 4, "group_size": 128}
    )
    lay = plan_one(awq, {"name": "tp8", "tp": 8}, hw8)
    assert lay["verdict"] == "invalid"
    assert any("not whole awq groups of 128" in r for r in lay["reasons"])


def test_speed_reads_a_window_on_sliding_layers_and_says_unchecked(repo):
    lay = plan_one(config(repo, "gpt-oss-120b"))
    assert any("unchecked" in a for a in lay["speed"]["assumptions"])
    model = SpeedModel(lay, H200_1, gpu_spec("NVIDIA H200"))
    swa_read = model.kv_read_bytes(36, 8, 8 * 4096)
    full_read = model.kv_bytes * 36 * 8 * 4096
    assert swa_read == pytest.approx(model.kv_bytes * (18 * 8 * 4096 + 18 * 8 * 128))
    assert swa_read < full_read


def test_moe_dense_tp_size_1_replicates_glm_dense_layers_only(repo):
    hw8 = {**H200_1, "gpu_count": 8}
    glm = config(repo, "glm-4.6")
    base = plan_one(glm, {"name": "tp8", "tp": 8}, hw8)
    rep = plan_one(glm, {"name": "tp8", "tp": 8, "args": {"moe_dense_tp_size": 1}}, hw8)
    dense = 3 * 3 * 5120 * 12288 * 2 / GIB  # first_k_dense_replace 3 layers of gate, up, down in bf16
    assert rep["ranks"][0]["components"]["dense_mlp"] == pytest.approx(dense, abs=1e-3)
    assert base["ranks"][0]["components"]["dense_mlp"] == pytest.approx(dense / 8, abs=1e-3)
    assert any("replicated on every rank" in n for n in rep["notes"])
    mixtral = plan_one(
        config(repo, "mixtral-8x7b"), {"name": "tp8", "tp": 8, "args": {"moe_dense_tp_size": 1}}, hw8
    )
    assert any("changes no weights of MixtralForCausalLM" in n for n in mixtral["notes"])


def test_gemma3_decode_reads_a_window_on_its_sliding_layers(repo):
    lay = plan_one(config(repo, "gemma-3-27b-text"))
    model = SpeedModel(lay, H200_1, gpu_spec("NVIDIA H200"))
    # 62 layers, every 6th global: 10 full, 52 sliding with a 1024-token window
    assert model.kv_read_bytes(62, 4, 4 * 8192) == pytest.approx(
        model.kv_bytes * (10 * 4 * 8192 + 52 * 4 * 1024)
    )
