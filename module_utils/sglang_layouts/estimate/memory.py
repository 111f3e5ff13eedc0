"""The per-rank memory model: weights per pipeline stage and rank, KV bytes, the allocation order.

KV budget: mem_fraction_static of the memory free before load holds the weights plus the KV
pool; whatever the weights leave is the pool (docs/kimi-k2-memory.md 5, 6).
"""

from __future__ import annotations

from .archs import MAMBA_FULL_MEMORY_RATIO, SWA_FULL_TOKENS_RATIO, linear_state_bytes_per_request
from .model import GIB, STAGE_FIRST, STAGE_LAST, ModelSpec, PlanError, linear_bytes, rope_cache_bytes

# CUDA context, NCCL and cuBLAS workspaces: memory PyTorch cannot use. 1 GiB reproduces the seed's OOM
# ("Tried to allocate 672.00 MiB" with 93.62 GiB allocated on a 94.97 GiB card needs 0.69-1.35 GiB).
CUDA_CONTEXT_GIB = 1.0
# One GPU to an engine (no communicator): what SGLang finds in use before it loads, torch's capacity
# less `Load weight begin. avail mem`: 0.67-0.76 GiB, median 0.69, over the 29 single-GPU starts of
# SGLang 0.5.16 on H100s and H200s under tests/fixtures/ (test_planner checks it against them).
CUDA_CONTEXT_SINGLE_GPU_GIB = 0.70


def cuda_context_gib(gpus_per_engine: int) -> float:
    """Memory an engine's rank cannot use before it loads (CUDA context; NCCL's beyond one GPU)."""
    return CUDA_CONTEXT_SINGLE_GPU_GIB if gpus_per_engine == 1 else CUDA_CONTEXT_GIB


# Below this, the memory outside the static pool (CUDA graphs, activations) is tight.
MIN_DYNAMIC_GIB = 2.0


# Weight load also needs room for one layer's transient copy (INT4 Marlin repack etc.).
TRANSIENT_LAYERS = 1


def shard_factor(kind: str, par: dict, spec: ModelSpec) -> float:
    if kind == "replicated":
        return 1.0
    if kind == "attn_tp":
        return 1.0 / par["attn_tp"]
    if kind == "kv_heads":
        kv = spec.num_kv_heads
        return max(1, kv // par["attn_tp"]) / kv
    if kind == "tp":
        return 1.0 / par["tp"]
    if kind == "dense_tp":
        return 1.0 if par.get("moe_dense_tp") == 1 else 1.0 / par["tp"]
    if kind == "vocab":
        return 1.0 if par["dp_attention"] else 1.0 / par["tp"]
    if kind == "experts":
        return 1.0 / par["expert_ways"]
    raise ValueError(kind)


def pp_layer_ranges(num_layers: int, pp: int, partition: list[int] | None = None) -> list[tuple[int, int]]:
    """SGLang's get_pp_indices: even split, the *last* `remainder` stages get one more layer; or the
    layout's own SGLANG_PP_LAYER_PARTITION (checked by validate.pp_partition)."""
    if partition:
        sizes = list(partition)
    else:
        base, rem = divmod(num_layers, pp)
        sizes = [base + (1 if i >= pp - rem else 0) for i in range(pp)]
    ranges, start = [], 0
    for s in sizes:
        ranges.append((start, start + s - 1))
        start += s
    return ranges


def stage_of(stage: int, ranges: list[tuple[int, int]]) -> int:
    if stage == STAGE_FIRST:
        return 0
    if stage == STAGE_LAST:
        return len(ranges) - 1
    for i, (a, b) in enumerate(ranges):
        if a <= stage <= b:
            return i
    raise ValueError(stage)


def stage_bytes(
    spec: ModelSpec, par: dict, engine: str = "sglang", gpu_name: str | None = None, env: dict | None = None
) -> list[dict[str, float]]:
    """Per PP stage: bytes on one rank of that stage, by component.

    Under SGLang each stage also holds the rotary cos/sin cache (model.rope_cache_bytes), and
    gpt-oss's MXFP4 experts take the shape SGLang's MoE path gives them (mxfp4_moe_path), with
    what the allocator keeps of that path's transform under expandable segments (`env`, the unit's
    environment: swizzle_residue_bytes)."""
    ranges = pp_layer_ranges(spec.num_layers, par["pp"], par.get("pp_layer_partition"))
    stages: list[dict[str, float]] = [{} for _stage in ranges]
    path = mxfp4_moe_path(spec, par, engine, gpu_name)
    residue = swizzle_residue_bytes(path, env)
    for t in spec.tensors:
        if path and t.component == "routed_experts":
            continue  # replaced below by the path's own shapes
        s = stages[stage_of(t.stage, ranges)]
        s[t.component] = s.get(t.component, 0.0) + t.nbytes * shard_factor(t.shard, par, spec)
    if engine != "sglang":
        return stages
    rope = rope_cache_bytes(spec)
    for i, (a, b) in enumerate(ranges):
        if path:
            moe = sum(1 for layer in range(a, b + 1) if spec.is_moe_layer(layer))
            stages[i]["routed_experts"] = moe * mxfp4_expert_bytes(spec, par, path)
            if residue:
                stages[i]["allocator_residue"] = float(moe * residue)
        if rope:
            stages[i]["rope_cache"] = float(rope)
    return stages


# gpt-oss's MXFP4 MoE in SGLang 0.5.16: server_args / arg_groups/overrides.py picks the runner
# (moe_runner_backend auto): SM100 -> flashinfer_mxfp4; Hopper with ep_size 1 and triton_kernels
# installed -> triton_kernel; Hopper with ep > 1 stays auto, and Mxfp4MoEMethod.process_weights_after_loading
# then upcasts the experts to bf16 (upcast_from_mxfp). Only the Hopper paths change the bytes here.
HOPPER_GPU_NAMES = ("H100", "H200", "H800", "H20", "GH200")
MXFP4_PATHS = ("triton_kernels", "bf16_upcast")


def mxfp4_moe_path(spec: ModelSpec, par: dict, engine: str, gpu_name: str | None) -> str | None:
    """Which of MXFP4_PATHS SGLang's Mxfp4MoEMethod takes for this layout, None when the checkpoint's
    MXFP4 bytes stand (other engines, other GPUs, unknown GPU)."""
    if engine != "sglang" or spec.quant.method != "mxfp4" or not spec.is_moe:
        return None
    name = str(gpu_name or "").upper()
    if not any(g in name for g in HOPPER_GPU_NAMES):
        return None
    return "triton_kernels" if par["ep"] == 1 else "bf16_upcast"


# PyTorch's expandable segments map the large pool in pages of 20 MiB (c10 CachingDeviceAllocator.h,
# ExpandableSegment: "2MB for small pool, 20MB for large pool"), and torch.cuda.empty_cache unmaps only
# the pages a free block covers whole (ExpandableSegment::unmap, segmentRight of its start to
# segmentLeft of its end): the page at each end of a free block stays mapped, on average half idle.
EXPANDABLE_LARGE_PAGE_BYTES = 20 * 2**20
# Mxfp4MoEMethod.process_weights_after_loading on the triton_kernels path frees two large tensors a
# MoE layer (the original w13 and w2 values, `del layer.w13_weight`, `del layer.w2_weight`), then
# calls torch.cuda.empty_cache().
MXFP4_SWIZZLE_FREED_BLOCKS = 2


def swizzle_residue_bytes(path: str | None, env: dict | None) -> int:
    """Per MoE layer: what stays mapped of the blocks the triton_kernels transform frees, under
    expandable segments (two end pages of each block, half idle on average: one page a block). With
    PyTorch's default allocator the free fragments depend on its splitting history and are not modelled."""
    if path != "triton_kernels" or not expandable_segments(env):
        return 0
    return MXFP4_SWIZZLE_FREED_BLOCKS * EXPANDABLE_LARGE_PAGE_BYTES


ALLOCATOR_ENV_KEYS = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")


def allocator_env(spec: ModelSpec, par: dict, engine: str, gpu_name: str | None, env: dict | None) -> dict:
    """The allocator setting the plan gives a layout's servers: expandable segments on the
    triton_kernels MXFP4 path unless the layout's env chose an allocator itself. With PyTorch's default
    allocator the swizzle's free fragments are not modelled and can stop the load: gpt-oss-120b tp1
    did not load on one H100 (torch.OutOfMemoryError in _swizzle_mxfp4, 5.27 GiB reserved but
    unallocated), and with them the same start loaded within 0.9 % of the plan's weights (lease
    h100-2026-12-07c)."""
    env = env or {}
    if mxfp4_moe_path(spec, par, engine, gpu_name) != "triton_kernels" or any(
        k in env for k in ALLOCATOR_ENV_KEYS
    ):
        return {}
    return {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}


def expandable_segments(env: dict | None) -> bool:
    """Whether the unit's allocator settings turn on the caching allocator's expandable segments
    (comma-separated key:value pairs, the value True): PYTORCH_CUDA_ALLOC_CONF, the name the H100
    starts used, else its device-generic alias PYTORCH_ALLOC_CONF (torch 2.9 and later; unchecked
    here, and pytorch/pytorch#183387 reports 2.9.1 ignoring the alias for this key)."""
    env = env or {}
    conf = str(env.get("PYTORCH_CUDA_ALLOC_CONF") or env.get("PYTORCH_ALLOC_CONF") or "")
    pairs = dict(p.split(":", 1) for p in conf.replace(" ", "").split(",") if ":" in p)
    return pairs.get("expandable_segments") == "True"


def weights_assumptions(
    spec: ModelSpec, par: dict, engine: str, gpu_name: str | None, env: dict | None = None
) -> list[str]:
    """What the weight figure of this layout does not model, said in the plan (docs/planner.md).
    Figures: the H200 start of lease h200-2026-12-04b, the H100 starts of lease h100-2026-12-07b."""
    path = mxfp4_moe_path(spec, par, engine, gpu_name)
    modelled = (
        "weights: MXFP4 experts on SGLang's triton_kernels path (Hopper, ep 1) are modelled as "
        "mxfp4.py leaves them (Hopper-swizzled padded values, swizzled scales beside the original "
        "ones, fp32 biases); "
    )
    if path == "triton_kernels" and expandable_segments(env):
        return [
            modelled + "and, with expandable segments (PYTORCH_CUDA_ALLOC_CONF in this layout's env), "
            "what stays mapped of the two tensors each layer's swizzle frees (the 20 MiB page at each "
            "end of a free block, half idle on average: 40 MiB a MoE layer, component "
            "allocator_residue). Three H100 starts (gpt-oss-20b, gpt-oss-120b cut to 18 and 30 layers) "
            "used 0.07 to 0.41 GiB more than this figure, the whole gpt-oss-120b 0.58 GiB (0.9 %): read the "
            "planned KV tokens as an upper bound where the pool is small beside the weights"
        ]
    if path == "triton_kernels":
        return [
            modelled
            + "with the allocator this layout's env chose, not modelled: the free fragments PyTorch's "
            "caching allocator keeps after each "
            "layer's swizzle (its temporaries are freed, torch.cuda.empty_cache releases only whole "
            "segments). Real starts used more than this figure: 4.7 GiB on one H200 (gpt-oss-120b), "
            "5.4 GiB on one H100 (gpt-oss-120b cut to 18 layers), 1.4 GiB (gpt-oss-20b); read the "
            "planned KV tokens as an upper bound on this path; gpt-oss-120b tp1 did not load on one H100 "
            "(torch.OutOfMemoryError in the swizzle). PYTORCH_CUDA_ALLOC_CONF="
            "expandable_segments:True in the layout's env returns most of it, and the plan then models "
            "what is left: the same H100 start then held 14.7 % more KV tokens (963,713 -> 1,105,113), "
            "1.1 % below that plan"
        ]
    if path == "bf16_upcast":
        return [
            "weights: with ep > 1 on Hopper SGLang's Mxfp4MoEMethod upcasts the MXFP4 experts to bf16 "
            "(mxfp4.py process_weights_after_loading, upcast_from_mxfp); modelled from the source, "
            "not yet checked on a GPU"
        ]
    return []


def _up(x: int, m: int) -> int:
    return -(-x // m) * m


def mxfp4_expert_bytes(spec: ModelSpec, par: dict, path: str) -> int:
    """One MoE layer's routed experts on one rank after SGLang's Mxfp4MoEMethod (mxfp4.py):
    create_weights pads each rank's intermediate slice to a multiple of 64 (triton_kernels alignment),
    then process_weights_after_loading:

    triton_kernels  biases to fp32; w13 / w2 values swizzled into HopperMXValueLayout (both matrix dims
                    padded to 64, same bytes otherwise) replacing the originals; the scales swizzled
                    into HopperMXScaleLayout (M padded to 2 x num_warps(8) x 2 x 8 = 256, K to 2) held
                    by the PrecisionConfig while the original w13/w2_weight_scale stay registered
                    (triton_kernels tensor_details/layout_details/hopper_value.py, hopper_scale.py)
    bf16_upcast     upcast_from_mxfp: w13 / w2 in bf16, scales deleted, biases bf16
    """
    c = spec.config
    e = spec.n_experts // max(par["ep"], 1)
    h = int(c["hidden_size"])
    moe_tp = par.get("moe_tp") or max(par["tp"] // max(par["ep"], 1), 1)
    ip = _up(int(c[spec.arch.expert_inter_key]) // moe_tp, 64)
    if path == "bf16_upcast":
        return e * (3 * h * ip + 2 * ip + h) * 2
    values = e * (_up(h // 2, 64) * _up(2 * ip, 64) + _up(ip // 2, 64) * _up(h, 64))
    scales = e * (2 * ip * (h // 32) + h * (ip // 32))
    swizzled = e * (_up(2 * ip, 256) * _up(h // 32, 2) + _up(h, 256) * _up(ip // 32, 2))
    return values + scales + swizzled + e * (2 * ip + h) * 4


def largest_layer_bytes(spec: ModelSpec, par: dict) -> float:
    per_layer: dict[int, float] = {}
    for t in spec.tensors:
        if t.stage >= 0:
            per_layer[t.stage] = per_layer.get(t.stage, 0.0) + t.nbytes * shard_factor(t.shard, par, spec)
    return max(per_layer.values(), default=0.0)


def kv_dtype_bytes(spec: ModelSpec, kv_cache_dtype: str | None) -> int:
    dtype = (kv_cache_dtype or "auto").lower()
    if dtype == "auto":
        return spec.quant.param_bytes
    if dtype.startswith("fp8"):
        return 1
    if dtype in ("bf16", "bfloat16", "fp16", "float16"):
        return 2
    if dtype.startswith("fp4"):
        return 1  # packed + scales; conservative
    raise PlanError(f"kv_cache_dtype {kv_cache_dtype!r} is not known to the planner")


def allocation_sequence(spec: ModelSpec, layout_plan: dict, rank: int = 0) -> list[tuple[str, int]]:
    """Weights in model-construction order for one rank: (tensor name, bytes on that rank).

    Routed experts become SGLang's fused MoE parameters in the order its quantization method
    registers them (w13 and w2 weights, then their scales), so an OOM names the tensor SGLang
    would have been allocating.
    """
    par = layout_plan["parallel"]
    ranges = pp_layer_ranges(spec.num_layers, par["pp"], par.get("pp_layer_partition"))
    stage = layout_plan["ranks"][rank]["pp_rank"]
    lins = {lin.name.rsplit(".", 1)[1]: lin for lin in spec.linears if lin.component == "routed_experts"}
    experts_factor = shard_factor("experts", par, spec)
    seq: list[tuple[str, int]] = []
    rope = rope_cache_bytes(spec)  # built with the stage's first attention layer (get_rope)
    for t in spec.tensors:
        if stage_of(t.stage, ranges) != stage:
            continue
        if rope and t.stage >= 0:
            seq.append(("rotary_emb.cos_sin_cache", rope))
            rope = 0
        if t.component == "routed_experts" and spec.mode == "config":
            if not t.name.endswith("down_proj"):
                continue  # gate/up are fused into w13; emitted with down_proj below
            base = f"model.layers.{t.stage}.mlp.experts."
            w13 = sum(linear_bytes(spec.quant, lins[k], t.stage) for k in ("gate_proj", "up_proj"))
            w2 = linear_bytes(spec.quant, lins["down_proj"], t.stage)
            w13_parts = _split_weight_scale(
                spec, base + "w13_weight", w13 * experts_factor, lins["up_proj"], 2
            )
            w2_parts = _split_weight_scale(
                spec, base + "w2_weight", w2 * experts_factor, lins["down_proj"], 1
            )
            seq += [w13_parts[0], w2_parts[0], *w13_parts[1:], *w2_parts[1:]]
            continue
        seq.append((t.name, int(t.nbytes * shard_factor(t.shard, par, spec))))
    return seq


def _split_weight_scale(spec: ModelSpec, name: str, nbytes: float, lin, n: int) -> list[tuple[str, int]]:
    q = spec.quant
    if q.method == "int4_group":
        packed = lin.in_features * lin.out_features * lin.experts * n / 2
        frac = packed / linear_bytes(q, lin) / n
        return [(name + "_packed", int(nbytes * frac)), (name + "_scale", int(nbytes * (1 - frac)))]
    return [(name, int(nbytes))]


def decode_cost(
    spec: ModelSpec, par: dict, stages: list[dict[str, float]], hardware: dict, engine: str = "sglang"
) -> dict:
    """Inputs of a decode-step cost model (the simulator's): what one step reads and syncs."""
    per_stage = []
    ranges = pp_layer_ranges(spec.num_layers, par["pp"], par.get("pp_layer_partition"))
    for i, comps in enumerate(stages):
        experts = comps.get("routed_experts", 0.0)
        # the embedding is a gather (a few rows), not a full read
        # and the rope cache only a few rows per token
        dense = sum(
            v
            for k, v in comps.items()
            if k not in ("routed_experts", "embed", "vision", "rope_cache", "allocator_residue")
        )
        a, b = ranges[i]
        n_layers = b - a + 1
        moe_layers = sum(1 for layer in range(a, b + 1) if spec.is_moe_layer(layer))
        collectives = 0
        if par["tp"] > 1:
            # one all-reduce after attention and one after the MLP of every layer (+ logits on the last stage)
            collectives = 2 * n_layers + (1 if i == len(stages) - 1 else 0)
        per_stage.append(
            {
                "dense_bytes": int(dense),
                "expert_bytes": int(experts),
                "layers": n_layers,
                "moe_layers": moe_layers,
                "collectives": collectives,
                # the lm_head runs on one token per request in prefill, on every token in decode
                "lm_head_bytes": int(comps.get("lm_head", 0.0)),
            }
        )
    return {
        "stages": per_stage,
        "n_experts": spec.n_experts,
        "experts_per_gpu": spec.n_experts // par["ep"] if spec.is_moe and par["moe_tp"] else 0,
        "top_k": spec.top_k,
        "tp": par["tp"],
        "pp": par["pp"],
        "interconnect": hardware["gpu_interconnect"],
        "bandwidth_gbs": hardware.get("gpu_memory_bandwidth_gbs"),
        "kv_bytes_per_token_layer": spec.kv_bytes_per_token_per_layer(par["attn_tp"], spec.quant.param_bytes),
        # one token's hidden state, the message of each all-reduce (activations in the model dtype)
        "allreduce_bytes_per_token": int(spec.config["hidden_size"]) * spec.quant.param_bytes,
        # what the speed model (speed.py) needs besides bytes: kernel path, router, attention shape
        "family": spec.family,
        "kernels_per_layer": spec.arch.kernels_per_layer or None,
        "elementwise_per_layer": spec.arch.elementwise_per_layer,
        "quant_method": spec.quant.method,
        # SGLang's kernel path for MXFP4 experts on this GPU (triton_kernels on Hopper at ep 1)
        "mxfp4_moe_path": mxfp4_moe_path(spec, par, engine, hardware.get("gpu_name")),
        "int4_group_size": spec.quant.group_size,
        "hidden_size": int(spec.config["hidden_size"]),
        "attn_flop_dim": _attn_flop_dim(spec),
        "attn_tp": par["attn_tp"],
        "moe_tp": par["moe_tp"],
        "ep": par["ep"],
        "dp": par["dp"],
        "dp_attention": par["dp_attention"],
        # DeepSeek/Kimi's biased sigmoid top-k, gpt-oss's router bias: with dummy weights
        # (U(-1e-3, 1e-3), one seed per parameter) the bias outweighs the token's logits and picks the experts
        "router_correction_bias": str(spec.config.get("topk_method") or "") == "noaux_tc"
        or spec.arch.correction_bias == "always"
        or spec.arch.router_bias,
        # which layers read which KV (speed.py): full layers every token, sliding ones a window,
        # linear ones a fixed state per request
        "kv_layers": _kv_layers(spec, par),
        "unchecked": _unchecked(spec),
    }


def _kv_layers(spec: ModelSpec, par: dict) -> dict | None:
    c = spec.config
    n = spec.num_layers
    # a full pool whose kernels still read only a window on some layers: Gemma 3's sliding layers
    # (every sliding_window_pattern-th layer is global), text-only Llama 4's chunked layers (3 of 4)
    if spec.kv_pool == "full" and spec.architecture == "Gemma3ForCausalLM" and c.get("sliding_window"):
        types = c.get("layer_types") or []
        pattern = int(c.get("sliding_window_pattern") or 6)
        swa = sum(1 for t in types[:n] if t == "sliding_attention") if types else n - n // pattern
        return {"total": n, "full": n - swa, "swa": swa, "window": int(c["sliding_window"])}
    if spec.kv_pool == "full" and spec.architecture == "Llama4ForCausalLM" and c.get("attention_chunk_size"):
        swa = sum(1 for i in range(n) if (i + 1) % 4)
        return {"total": n, "full": n - swa, "swa": swa, "window": int(c["attention_chunk_size"])}
    if spec.kv_pool == "hybrid_swa":
        return {
            "total": spec.num_layers,
            "full": spec.num_layers - len(spec.swa_layers),
            "swa": len(spec.swa_layers),
            "window": spec.window,
        }
    if spec.kv_pool == "linear":
        attention = len(spec.attention_layers())
        linear = spec.num_layers - attention
        return {
            "total": spec.num_layers,
            "full": attention,
            "swa": 0,
            "window": None,
            "state_bytes_per_request": linear_state_bytes_per_request(spec.config, par["attn_tp"], linear),
        }
    return None


def _unchecked(spec: ModelSpec) -> str | None:
    """What no H200 record has pinned for this model (speed.py adds it to the plan's assumptions)."""
    why = []
    if not spec.arch.moe_kernel_checked:
        why.append(f"{spec.architecture}'s kernels (no H200 record of this architecture meets the target)")
    if spec.quant.method in ("mxfp4", "nvfp4", "awq", "gptq", "fp8_tensor", "fp8_channel"):
        why.append(f"the {spec.quant.method} kernel path (efficiency priors of bf16 / fp8 block)")
    if spec.kv_pool in ("hybrid_swa", "linear"):
        why.append(f"{spec.kv_pool} attention reads (modelled as bytes, kernel not measured)")
    return "; ".join(why) or None


def _attn_flop_dim(spec: ModelSpec) -> int:
    """Query heads x (qk + v head dims) / 2: the width of prefill attention's two matmuls."""
    c = spec.config
    if spec.family == "mla_moe":
        qk = int(c.get("qk_nope_head_dim", 128)) + int(c.get("qk_rope_head_dim", 64))
        return spec.num_heads * (qk + int(c.get("v_head_dim", 128))) // 2
    return spec.num_heads * int(c.get("head_dim") or int(c["hidden_size"]) // spec.num_heads)


def kv_pool(spec: ModelSpec, par: dict, kv_bytes: int, layers: tuple[int, int], kv_gib: float) -> dict:
    """What SGLang 0.5.16 builds from `kv_gib` of budget on one rank of the stage `layers`
    (archs.KV_POOLS): max_total_num_tokens, the bytes one of them costs, and the pools beside it.

    full:       tokens = budget / (per-layer bytes x attention layers of the stage)
                (pool_configurator.DefaultPoolConfigurator)
    hybrid_swa: cell = full bytes x full layers + ratio x swa bytes x swa layers, over the model's
                layers (HybridSWAPoolConfigurator); sliding layers hold ratio x tokens
    linear:     the state pool takes ratio / (1 + ratio) of the budget in whole requests first
                (kv_cache_configurator._handle_max_mamba_cache); full-attention layers hold the rest
    """
    per_layer = spec.kv_bytes_per_token_per_layer(par["attn_tp"], kv_bytes)
    first, last = layers
    budget = max(kv_gib, 0.0) * GIB
    pool = {"kind": spec.kv_pool, "swa_tokens": None, "state_slots": None, "state_gib": None}
    if spec.kv_pool == "hybrid_swa":
        swa = set(spec.swa_layers)
        n_swa = len(swa)
        n_full = spec.num_layers - n_swa
        cell = per_layer * n_full + SWA_FULL_TOKENS_RATIO * per_layer * n_swa
        tokens = int(budget // cell)
        pool.update(
            swa_tokens=int(tokens * SWA_FULL_TOKENS_RATIO),
            full_layers=n_full,
            swa_layers=n_swa,
            window=spec.window,
            note=(
                f"KV pool: hybrid sliding-window as SGLang sizes it (pool_configurator.HybridSWAPoolConfigurator): "
                f"{n_full} full layers hold every token, {n_swa} sliding layers (window {spec.window}) "
                f"hold swa_full_tokens_ratio {SWA_FULL_TOKENS_RATIO} x as many"
            ),
        )
        return {**pool, "tokens": tokens, "bytes_per_token": round(cell)}
    attention = [i for i in spec.attention_layers() if first <= i <= last]
    per_token = per_layer * len(attention)
    if spec.kv_pool == "linear":
        linear = (last - first + 1) - len(attention)
        per_req = linear_state_bytes_per_request(spec.config, par["attn_tp"], linear)
        slots = (
            int(budget * MAMBA_FULL_MEMORY_RATIO / (1 + MAMBA_FULL_MEMORY_RATIO) // per_req) if per_req else 0
        )
        budget -= slots * per_req
        pool.update(
            state_slots=slots,
            state_gib=round(slots * per_req / GIB, 3),
            state_bytes_per_request=per_req,
            note=(
                f"KV pool: hybrid linear attention as SGLang sizes it (kv_cache_configurator._handle_max_mamba_cache): "
                f"a state pool of {slots} requests x {per_req / 2**20:.1f} MiB ({linear} linear layers) takes "
                f"mamba_full_memory_ratio {MAMBA_FULL_MEMORY_RATIO}/(1+{MAMBA_FULL_MEMORY_RATIO}) of the KV budget; "
                f"the {len(attention)} full-attention layers hold the tokens"
            ),
        )
    elif spec.architecture in ("Gemma3ForCausalLM", "Llama4ForCausalLM"):
        pool["note"] = f"KV pool: every layer holds every token: {spec.arch.note}"
    tokens = int(budget // per_token) if per_token and budget > 0 else 0
    return {**pool, "tokens": tokens, "bytes_per_token": per_token}
