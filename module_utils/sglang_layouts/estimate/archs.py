"""Per-architecture facts the memory model needs: which layers are MoE, what an attention layer
holds, how SGLang sizes the KV cache (and a linear-attention state pool) of each architecture.

One entry per text architecture of SGLang 0.5.16, each naming the model file its shapes come
from (``sglang/srt/models/<file>``). estimate/model.py builds the weight inventory from these traits;
estimate/memory.py sizes the pools (``KV_POOLS``). docs/planner.md has the table for users.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

# How SGLang 0.5.16 sizes the token pool (model_executor/pool_configurator.py):
#   full       DefaultPoolConfigurator: every attention layer of the stage holds every token
#   hybrid_swa HybridSWAPoolConfigurator: full layers hold T tokens, sliding-window layers
#              swa_full_tokens_ratio x T (server_args default 0.8), one cell = both
#   linear     mamba-ish models (kv_cache_configurator._handle_max_mamba_cache): the state pool
#              takes mamba_full_memory_ratio / (1 + ratio) of the budget first (default 0.9),
#              the rest holds the full-attention layers' tokens
KV_POOLS = ("full", "hybrid_swa", "linear")
SWA_FULL_TOKENS_RATIO = 0.8  # server_args.py swa_full_tokens_ratio default
MAMBA_FULL_MEMORY_RATIO = 0.9  # server_args.py mamba_full_memory_ratio default


@dataclass(frozen=True)
class Arch:
    name: str
    family: str  # dense | gqa_moe | mla_moe | linear_moe
    source: str  # SGLang 0.5.16 file the shapes come from
    experts_key: str = "num_experts"
    expert_inter_key: str = "moe_intermediate_size"
    # which layers are MoE: all | sparse_step (decoder_sparse_step, mlp_only_layers) |
    # first_k_dense (first_k_dense_replace, moe_layer_freq) | interleave (interleave_moe_layer_step)
    moe_layers: str = "all"
    dense_inter_key: str = "intermediate_size"
    # shared expert: "" none | "n_shared" (n_shared_experts x expert size) | "key" (shared_expert_intermediate_size)
    # | "one" (one expert's size, Llama 4)
    shared: str = ""
    shared_gate: bool = False  # Qwen2-MoE / Qwen3-Next: sigmoid gate hidden -> 1 on the shared expert
    router_dtype_bytes: int = 0  # 0: the model dtype; 4: fp32 router (MiniMax-M2)
    router_bias: bool = False  # gpt-oss: the router has a bias
    correction_bias: str = ""  # config value of the fp32 e_score_correction_bias switch, "always" or ""
    expert_bias: bool = False  # gpt-oss: gate_up and down of every expert carry a bias
    qkv_bias: str = ""  # config key that switches q/k/v biases on, "always" or ""
    o_bias: bool = False
    qk_norm: str = ""  # "" | "head" (q_norm/k_norm over head_dim) | "all" (over every head, TP-split)
    q_gate: bool = False  # Qwen3-Next: q_proj also emits the attention output gate (2x)
    sinks: bool = False  # gpt-oss: one learned sink logit per head
    kv_pool: str = "full"
    moe_kernel_checked: bool = True  # speed model: H200 records of this architecture meet the target
    # speed model: kernel nodes of one decode layer in the CUDA graph, counted from the model file
    # (docs/cost-model.md itemises each count); 0: speed.KERNELS_PER_LAYER of the family
    kernels_per_layer: int = 0
    # of those, unfused torch elementwise ops on one token's vector (a norm or RoPE run as native torch
    # ops): they cost tau_elementwise_us a node, not the average node's tau_kernel_us
    elementwise_per_layer: int = 0
    # --moe-dense-tp-size 1 replicates the dense (first_k_dense) MLP layers on every rank
    # (deepseek_v2.py / glm4_moe.py: enable_moe_dense_fully_dp() -> tp_size=1)
    dense_fully_dp: bool = False
    note: str = ""


_A = Arch
# DeepSeek V2 and V3 share SGLang's model file and every rule here
_DEEPSEEK_V3 = _A(
    "DeepseekV3ForCausalLM",
    "mla_moe",
    "models/deepseek_v2.py",
    experts_key="n_routed_experts",
    moe_layers="first_k_dense",
    dense_fully_dp=True,
    shared="n_shared",
    correction_bias="noaux_tc",
)
ARCHS: dict[str, Arch] = {
    a.name: a
    for a in (
        _DEEPSEEK_V3,
        replace(_DEEPSEEK_V3, name="DeepseekV2ForCausalLM"),
        _A("Qwen3MoeForCausalLM", "gqa_moe", "models/qwen3_moe.py", moe_layers="sparse_step", qk_norm="head"),
        _A("LlamaForCausalLM", "dense", "models/llama.py", moe_layers="none"),
        _A("MistralForCausalLM", "dense", "models/llama.py", moe_layers="none"),
        _A("Qwen2ForCausalLM", "dense", "models/qwen2.py", moe_layers="none", qkv_bias="always"),
        _A("Qwen3ForCausalLM", "dense", "models/qwen3.py", moe_layers="none", qk_norm="head"),
        _A(
            "MixtralForCausalLM",
            "gqa_moe",
            "models/mixtral.py",
            experts_key="num_local_experts",
            expert_inter_key="intermediate_size",
            kernels_per_layer=17,  # Qwen3-MoE's 18 (counted, M3) without its fused q/k norm
            moe_kernel_checked=False,
        ),
        _A(
            "Qwen2MoeForCausalLM",
            "gqa_moe",
            "models/qwen2_moe.py",
            moe_layers="sparse_step",
            shared="key",
            shared_gate=True,
            qkv_bias="always",
            kernels_per_layer=24,  # 17 as Mixtral + the gated shared expert's 7
            moe_kernel_checked=False,
        ),
        _A(
            "Glm4MoeForCausalLM",
            "gqa_moe",
            "models/glm4_moe.py",
            experts_key="n_routed_experts",
            moe_layers="first_k_dense",
            dense_fully_dp=True,
            shared="n_shared",
            correction_bias="always",
            qkv_bias="attention_bias",
            qk_norm="head",
            # FP8 checkpoints: an activation-quant kernel before each GEMM; the shared expert runs inside
            # the fused MoE as expert E+1 (docs/cost-model.md)
            kernels_per_layer=22,
            moe_kernel_checked=False,
        ),
        _A(
            "GptOssForCausalLM",
            "gqa_moe",
            "models/gpt_oss.py",
            experts_key="num_local_experts",
            expert_inter_key="intermediate_size",
            kernels_per_layer=24,  # counted (lease h100-2026-12-07c): 868 nodes for 36 layers; triton_kernels routing metadata and a combine besides matmul_ogs
            router_bias=True,
            expert_bias=True,
            qkv_bias="always",
            o_bias=True,
            sinks=True,
            kv_pool="hybrid_swa",
            moe_kernel_checked=False,
            note="sliding-window layers from layer_types (SGLang model_config.get_hybrid_layer_ids)",
        ),
        _A(
            "Llama4ForCausalLM",
            "gqa_moe",
            "models/llama4.py",
            experts_key="num_local_experts",
            expert_inter_key="intermediate_size",
            moe_layers="interleave",
            dense_inter_key="intermediate_size_mlp",
            shared="one",
            kernels_per_layer=24,  # attention 11 (fused qk norm, q copy) + shared expert 3 + routed MoE 10
            moe_kernel_checked=False,
            note="text-only Llama 4: SGLang keeps every layer's tokens (no hybrid pool for Llama4ForCausalLM)",
        ),
        _A(
            "Gemma3ForCausalLM",
            "dense",
            "models/gemma3_causal.py",
            moe_layers="none",
            qk_norm="head",
            # counted (lease h100-2026-12-07d: 4,558 nodes for 62 layers): six Gemma3RMSNorms run as
            # unfused torch ops (forward_cuda = forward_native, 10 kernels each), RoPE compiled into 2,
            # 2 residual adds; 4 GEMMs + a split-K reduce, 2 attention kernels, KV store, GeluAndMul
            kernels_per_layer=73,
            elementwise_per_layer=64,
            note="SGLang 0.5.16 turns the hybrid SWA pool off for Gemma 3 (arg_groups/overrides.py "
            "_gemma2_gemma3_overrides): sliding layers hold every token like full ones",
        ),
        _A(
            "Qwen3NextForCausalLM",
            "linear_moe",
            "models/qwen3_next.py",
            moe_layers="sparse_step",
            shared="key",
            shared_gate=True,
            qk_norm="head",
            q_gate=True,
            kv_pool="linear",
            kernels_per_layer=27,  # 3 Gated DeltaNet layers (9) per gated attention one (14) + MoE 10 + shared 7
            moe_kernel_checked=False,
            note="every full_attention_interval-th layer is full attention; the others are Gated DeltaNet",
        ),
        _A(
            "MiniMaxM2ForCausalLM",
            "gqa_moe",
            "models/minimax_m2.py",
            experts_key="num_local_experts",
            expert_inter_key="intermediate_size",
            router_dtype_bytes=4,
            correction_bias="always",
            qk_norm="all",
            moe_kernel_checked=False,
            # counted (lease h100-2026-12-07e): 372 nodes for 16 layers; the q/k norm over every head
            # is three kernels, and each of the four FP8 block-scaled GEMMs has its activations'
            # per-token-group quantisation before it
            kernels_per_layer=23,
        ),
    )
}

# Multimodal wrappers whose text model is one of ARCHS (config under text_config), and what
# changes for the wrapper: Llama 4's wrapper is a hybrid-SWA model in SGLang (chunked-attention
# layers are the sliding ones: model_config.is_hybrid_swa_model, get_hybrid_layer_ids).
WRAPPERS: dict[str, tuple[str, str]] = {
    "KimiK25ForConditionalGeneration": ("DeepseekV3ForCausalLM", ""),
    "Llama4ForConditionalGeneration": ("Llama4ForCausalLM", "hybrid_swa"),
    "Gemma3ForConditionalGeneration": ("Gemma3ForCausalLM", ""),
}


def swa_layer_ids(wrapper_or_arch: str, config: dict) -> list[int]:
    """Layers SGLang puts in the sliding-window pool (model_config.get_hybrid_layer_ids)."""
    n = int(config["num_hidden_layers"])
    if wrapper_or_arch == "Llama4ForConditionalGeneration":
        return [i for i in range(n) if (i + 1) % 4 != 0]
    types = config.get("layer_types") or []
    return [i for i, t in enumerate(types[:n]) if t == "sliding_attention"]


def sliding_window(wrapper_or_arch: str, config: dict) -> int | None:
    if wrapper_or_arch == "Llama4ForConditionalGeneration":
        return int(config.get("attention_chunk_size") or 0) or None
    return int(config.get("sliding_window") or 0) or None


def linear_layer_ids(config: dict) -> list[int]:
    """Qwen3-Next: every full_attention_interval-th layer is attention, the rest linear (configs/qwen3_next.py)."""
    n = int(config["num_hidden_layers"])
    types = config.get("layer_types")
    if types:
        return [i for i, t in enumerate(types[:n]) if t == "linear_attention"]
    step = int(config.get("full_attention_interval") or 4)
    return [i for i in range(n) if (i + 1) % step != 0]


def linear_state_bytes_per_request(config: dict, attn_tp: int, n_layers: int) -> int:
    """One request's Gated-DeltaNet state on one rank: conv state (bf16) + recurrent state
    (mamba_ssm_dtype, fp32 by default), per linear layer (configs/mamba_utils.py Mamba2StateShape,
    configs/qwen3_next.py mamba2_cache_params)."""
    kh, kd = int(config["linear_num_key_heads"]), int(config["linear_key_head_dim"])
    vh, vd = int(config["linear_num_value_heads"]), int(config["linear_value_head_dim"])
    kernel = int(config.get("linear_conv_kernel_dim") or 4)
    conv_dim = vh * vd + 2 * kh * kd
    ssm_bytes = {"bfloat16": 2, "float16": 2}.get(str(config.get("mamba_ssm_dtype") or "float32"), 4)
    conv = conv_dim // attn_tp * (kernel - 1) * 2
    ssm = vh // attn_tp * vd * kd * ssm_bytes
    return (conv + ssm) * n_layers
