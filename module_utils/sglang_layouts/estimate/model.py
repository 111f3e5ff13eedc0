"""What a checkpoint holds: its architecture, quantization and every weight tensor.

The planner needs, for each weight, its size and how SGLang shards it. This
module produces that inventory either from the Hugging Face ``config.json``
(mode ``config``: shapes derived the way SGLang builds the model) or from the
``*.safetensors`` headers when the weights are on this machine (mode
``safetensors``: exact sizes). Sharding rules live in estimate/memory.py (``shard_factor``: a
rank's share of each kind) and plan/rules.py (which splits divide evenly); here a tensor
only says *which kind* of split applies (see ``SHARD_KINDS``).
"""

from __future__ import annotations

import glob
import json
import os
import re
import struct
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from .archs import ARCHS, WRAPPERS, Arch, linear_layer_ids, sliding_window, swa_layer_ids

GIB = 1024**3


class PlanError(ValueError):
    """Bad input. The message says what is wrong and what to do."""


def kind_of(value) -> str:
    """A value's kind as a message names it ("a list", "a number"), the same for Ansible's tagged
    subclasses of str, int, dict and list as for plain Python values."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return type(value).__name__


# How a tensor is split across the ranks of one pipeline stage.
SHARD_KINDS = (
    "replicated",  # every rank holds all of it (norms, router, MLA down-projections)
    "attn_tp",  # split over the attention-TP group (tp / dp under dp-attention)
    "kv_heads",  # GQA k/v projections: split over attn_tp, but never below one head
    "tp",  # split over the whole TP group (dense MLP, shared experts, lm_head)
    "dense_tp",  # a MoE model's dense MLP layers: over TP, replicated with --moe-dense-tp-size 1
    "vocab",  # vocab-parallel embedding: over TP, replicated under dp-attention
    "experts",  # routed experts: E/ep experts per rank, each sliced tp/ep ways => 1/tp
)

# Where a tensor lives along the pipeline.
STAGE_FIRST = -1  # embedding (and a vision tower): first PP stage
STAGE_LAST = -2  # final norm and lm_head: last PP stage

# Supported text architectures -> attention/MLP family (estimate/archs.py holds each one's traits).
ARCH_FAMILIES = {name: arch.family for name, arch in ARCHS.items()}
# Multimodal wrappers whose text model is one of the above (config under text_config).
WRAPPER_ARCHITECTURES = {name: text for name, (text, _pool) in WRAPPERS.items()}
SUPPORTED_ARCHITECTURES = tuple(ARCH_FAMILIES) + tuple(WRAPPER_ARCHITECTURES)
SUPPORTED_SUMMARY = (
    "DeepSeek-V2/V3 and Kimi K2.x, Llama, Mistral, Qwen2/Qwen3, Qwen3-MoE, Mixtral, Qwen2-MoE, "
    "GLM-4.5/4.6, gpt-oss, Llama 4, Gemma 3, Qwen3-Next, MiniMax-M2"
)

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "fp8_e4m3": 1, "fp8_e5m2": 1, "auto": None}
SAFETENSORS_DTYPE_BYTES = {
    "F64": 8,
    "I64": 8,
    "U64": 8,
    "F32": 4,
    "I32": 4,
    "U32": 4,
    "F16": 2,
    "BF16": 2,
    "I16": 2,
    "U16": 2,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
}


@dataclass(frozen=True)
class Tensor:
    """One weight (or a group of identical per-expert weights) of the checkpoint."""

    name: str
    nbytes: int
    shard: str
    stage: int  # layer index, STAGE_FIRST or STAGE_LAST
    component: (
        str  # embed, lm_head, attention, dense_mlp, routed_experts, shared_experts, router, norms, vision
    )


@dataclass(frozen=True)
class Linear:
    """A quantizable linear layer: shapes matter for block/group divisibility."""

    name: str
    in_features: int
    out_features: int
    split: str  # "column" (out split), "row" (in split) or "none"
    shard: str
    component: str
    experts: int = 1  # >1 for a fused routed-expert weight group


# Weight formats (SGLang 0.5.16 layers/quantization/): bytes of one stored weight and its scales.
#   fp8_block    fp8.py, weight_block_size [n, k]: 1 B + one fp32 scale per n x k block
#   fp8_tensor   fp8.py without blocks, modelopt_quant.py FP8, compressed_tensors float8 "tensor":
#                1 B + fp32 scales per tensor
#   fp8_channel  compressed_tensors float8 "channel" (CompressedTensorsW8A8Fp8): 1 B + one fp32 scale per output
#   int4_group   compressed_tensors pack-quantized int4 (WNA16): 0.5 B + one bf16 scale per group of inputs
#   mxfp4        mxfp4.py (gpt-oss): routed experts only, 0.5 B + one uint8 scale per 32 inputs; every
#                other linear stays in the model dtype (Mxfp4Config.get_quant_method)
#   nvfp4        modelopt_quant.py NVFP4: 0.5 B + one fp8 scale per 16 inputs + fp32 global scales
#   awq          awq/: 4-bit, qweight int32, fp16 scales and packed zeros per group of inputs
#   gptq         gptq/: 4-bit, qweight int32, fp16 scales, packed zeros per group, int32 g_idx per input
QUANT_METHODS = (
    "none",
    "fp8_block",
    "fp8_tensor",
    "fp8_channel",
    "int4_group",
    "mxfp4",
    "nvfp4",
    "awq",
    "gptq",
)
SUPPORTED_QUANTIZATION = (
    "none/bf16/fp16; fp8 (with or without weight_block_size); compressed-tensors float8 "
    "(tensor, channel or block strategy) and pack-quantized int4 with group scales; modelopt FP8 and "
    "NVFP4; mxfp4; awq and gptq 4-bit"
)


@dataclass(frozen=True)
class Quantization:
    method: str  # one of QUANT_METHODS
    weight_bits: int = 16
    block: tuple[int, int] | None = None  # fp8: (block_n = out, block_k = in)
    group_size: int | None = None  # int4/awq/gptq/mxfp4/nvfp4: scales per group of inputs
    ignore: tuple[str, ...] = ()
    param_bytes: int = 2  # unquantized parameters (bf16)
    source: str = ""  # the config's quant_method (and format)

    def is_quantized(self, module: str, component: str = "") -> bool:
        if self.method == "none":
            return False
        if self.method == "mxfp4" and component and component != "routed_experts":
            return False
        for pattern in self.ignore:
            if pattern.startswith("re:"):
                if re.match(pattern[3:], module):
                    return False
            elif "*" in pattern or "?" in pattern:
                if fnmatchcase(module, pattern) or fnmatchcase(module, pattern + ".*"):
                    return False
            elif module == pattern or module.endswith("." + pattern) or module.startswith(pattern + "."):
                return False
        return True

    def describe(self) -> str:
        if self.method == "fp8_block":
            return f"fp8 with {self.block[0]}x{self.block[1]} weight blocks"
        if self.method == "int4_group":
            return f"int4 (compressed-tensors pack-quantized, group size {self.group_size})"
        if self.method == "fp8_tensor":
            return f"fp8 with per-tensor scales ({self.source})"
        if self.method == "fp8_channel":
            return f"fp8 with per-channel scales ({self.source})"
        if self.method == "mxfp4":
            return "mxfp4 routed experts (group 32, uint8 scales); other weights unquantized"
        if self.method == "nvfp4":
            return f"nvfp4 (modelopt, fp8 scales per {self.group_size} inputs)"
        if self.method in ("awq", "gptq"):
            return f"{self.method} int4, group size {self.group_size}"
        return "unquantized"


@dataclass
class ModelSpec:
    name: str
    path: str
    architecture: str  # the text architecture
    family: str
    config: dict  # the text config
    quant: Quantization
    mode: str = "config"
    vision_bytes: int = 0
    # sglang_model.load_format: `dummy` serves random weights from config.json alone (no checkpoint needed)
    load_format: str = ""
    # where the planner read config.json (which of hf_config, hf_config_file, path won)
    config_source: str = ""
    tensors: list[Tensor] = field(default_factory=list)
    linears: list[Linear] = field(default_factory=list)
    # how SGLang sizes the token pool (archs.KV_POOLS) and, for hybrid SWA, which layers slide
    kv_pool: str = "full"
    swa_layers: tuple[int, ...] = ()
    window: int | None = None

    # -- config shortcuts ---------------------------------------------------
    def get(self, key, default=None):
        return self.config.get(key, default)

    @property
    def num_layers(self) -> int:
        return int(self.config["num_hidden_layers"])

    @property
    def max_context(self) -> int | None:
        v = self.config.get("max_position_embeddings")
        return int(v) if v else None

    @property
    def arch(self) -> Arch:
        return ARCHS[self.architecture]

    @property
    def is_moe(self) -> bool:
        return self.family in ("mla_moe", "gqa_moe", "linear_moe")

    @property
    def n_experts(self) -> int:
        return int(self.config.get(self.arch.experts_key) or 0)

    @property
    def top_k(self) -> int:
        return int(self.config.get("num_experts_per_tok") or 0)

    @property
    def num_heads(self) -> int:
        return int(self.config["num_attention_heads"])

    @property
    def num_kv_heads(self) -> int:
        return int(self.config.get("num_key_value_heads") or self.num_heads)

    @property
    def head_dim(self) -> int:
        return int(self.config.get("head_dim") or int(self.config["hidden_size"]) // self.num_heads)

    def is_moe_layer(self, layer: int) -> bool:
        c = self.config
        rule = self.arch.moe_layers
        if not self.is_moe or self.n_experts <= 0 or rule == "none":
            return False
        if rule == "first_k_dense":
            return layer >= int(c.get("first_k_dense_replace", 0)) and (
                layer % int(c.get("moe_layer_freq", 1)) == 0
            )
        if rule == "sparse_step":
            if layer in (c.get("mlp_only_layers") or []):
                return False
            step = int(c.get("decoder_sparse_step", 1) or 1)
            return (layer + 1) % step == 0
        if rule == "interleave":
            step = int(c.get("interleave_moe_layer_step", 1) or 0)
            return True if step == 0 else (layer + 1) % step == 0
        return True

    def attention_layers(self) -> list[int]:
        """Layers with softmax attention (a KV cache); Qwen3-Next's linear layers have none."""
        if self.arch.kv_pool == "linear":
            linear = set(linear_layer_ids(self.config))
            return [i for i in range(self.num_layers) if i not in linear]
        return list(range(self.num_layers))

    def kv_bytes_per_token_per_layer(self, attn_tp: int, kv_dtype_bytes: int) -> int:
        """KV cache bytes one token costs on one rank for one layer."""
        c = self.config
        if self.family == "mla_moe":
            # MLA caches the compressed latent plus the rope key, replicated on every rank.
            return (int(c["kv_lora_rank"]) + int(c["qk_rope_head_dim"])) * kv_dtype_bytes
        heads_per_rank = max(1, self.num_kv_heads // attn_tp)
        return heads_per_rank * self.head_dim * 2 * kv_dtype_bytes


# ---------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------


def _read_json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise PlanError(f"cannot read {path}: {e.strerror}") from e
    except json.JSONDecodeError as e:
        raise PlanError(f"{path} is not valid JSON ({e.msg} at line {e.lineno})") from e


def _hf_config(model: dict) -> tuple[dict, str]:
    """The model's config.json as a mapping, and where it came from.

    Precedence (README, "How the model's config is found"): sglang_model.hf_config (inline), then
    hf_config_file (a file on the controller), then <path>/config.json when the controller can read
    it. A hf_config_file whose model (architecture, shape) differs from a readable <path>/config.json
    is refused: one of them names another model."""
    path = model.get("path")
    at_path = os.path.join(str(path), "config.json") if path else ""
    if model.get("hf_config"):
        if not isinstance(model["hf_config"], dict):
            raise PlanError("sglang_model.hf_config must be a mapping (the model's config.json)")
        return model["hf_config"], "sglang_model.hf_config"
    if model.get("hf_config_file"):
        given = str(model["hf_config_file"])
        raw = _read_json(given)
        elsewhere = (
            at_path and os.path.isfile(at_path) and os.path.realpath(at_path) != os.path.realpath(given)
        )
        # another model, not a copy the roles made from hf_config_file (which may lag behind an edit)
        if elsewhere and _model_identity(_read_json(at_path)) != _model_identity(raw):
            raise PlanError(
                f"sglang_model.hf_config_file ({given}) and sglang_model.path's config.json ({at_path}) "
                "name different models. Remove hf_config_file, or point it at this model's config."
            )
        return raw, f"{given} (sglang_model.hf_config_file)"
    if at_path and os.path.isfile(at_path):
        return _read_json(at_path), f"{at_path} (sglang_model.path)"
    raise PlanError(
        f"no config.json for model {model.get('name', '?')!r}: set sglang_model.hf_config (the config as a "
        f"mapping) or sglang_model.hf_config_file (a path on the controller), or make "
        f"{path or 'sglang_model.path'}/config.json readable on the controller"
    )


_IDENTITY = (
    "architectures",
    "model_type",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "vocab_size",
)


def _model_identity(raw) -> tuple:
    """What tells two config.json files of different models apart (a text_config's too)."""
    if not isinstance(raw, dict):
        return (repr(raw),)
    text = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else {}
    return tuple(repr(raw.get(k)) for k in _IDENTITY) + tuple(repr(text.get(k)) for k in _IDENTITY)


def _ignore_list(qc: dict, *keys: str) -> tuple[str, ...]:
    for key in keys:
        if qc.get(key):
            return tuple(str(x) for x in qc[key])
    return ()


def _int(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
        raise PlanError(f"quantization_config: {what} must be a whole number, not {value!r}")
    return int(value)


def _quantization(qc: dict | None, torch_dtype: str) -> Quantization:
    param_bytes = DTYPE_BYTES.get(torch_dtype or "bfloat16") or 2
    if not qc:
        return Quantization("none", weight_bits=param_bytes * 8, param_bytes=param_bytes)
    method = str(qc.get("quant_method") or "").lower()
    if method == "fp8":
        block = qc.get("weight_block_size")
        ignore = _ignore_list(qc, "ignored_layers", "modules_to_not_convert")
        if block is None:
            return Quantization("fp8_tensor", 8, None, None, ignore, param_bytes, "fp8")
        if not isinstance(block, list) or len(block) != 2:
            raise PlanError(f"fp8 weight_block_size must be [n, k], not {block!r}")
        block = (_int(block[0], "weight_block_size"), _int(block[1], "weight_block_size"))
        return Quantization("fp8_block", 8, block, None, ignore, param_bytes, "fp8")
    if method == "compressed-tensors":
        return _compressed_tensors(qc, param_bytes)
    if method == "modelopt":
        algo = str(qc.get("quant_algo") or (qc.get("quantization") or {}).get("quant_algo") or "").upper()
        ignore = _ignore_list(qc, "exclude_modules", "ignore") or _ignore_list(
            qc.get("quantization") or {}, "exclude_modules"
        )
        if algo == "FP8":
            return Quantization("fp8_tensor", 8, None, None, ignore, param_bytes, "modelopt FP8")
        if algo == "NVFP4":
            group = _int(
                qc.get("group_size") or (qc.get("quantization") or {}).get("group_size") or 16, "group_size"
            )
            return Quantization("nvfp4", 4, None, group, ignore, param_bytes, "modelopt NVFP4")
        raise PlanError(
            f"modelopt quant_algo {algo or None!r} is not supported yet (supported: FP8, NVFP4). "
            f"Supported quantization: {SUPPORTED_QUANTIZATION}."
        )
    if method == "mxfp4":
        ignore = _ignore_list(qc, "modules_to_not_convert", "ignored_layers")
        return Quantization("mxfp4", 4, None, 32, ignore, 2, "mxfp4")
    if method in ("awq", "awq_marlin", "gptq", "gptq_marlin"):
        bits = _int(qc.get("bits") or qc.get("w_bit") or 4, "bits")
        if bits != 4:
            raise PlanError(f"{method} with {bits}-bit weights is not supported yet (supported: 4-bit)")
        group = _int(qc.get("group_size") or qc.get("q_group_size") or 128, "group_size")
        ignore = _ignore_list(qc, "modules_to_not_convert")
        return Quantization(method.split("_", maxsplit=1)[0], 4, None, group, ignore, param_bytes, method)
    raise PlanError(
        f"quantization {method or None!r} is not supported yet. Supported quantization: {SUPPORTED_QUANTIZATION}. "
        "Serve an unquantized or a supported checkpoint, or plan with its safetensors on the controller."
    )


def _compressed_tensors(qc: dict, param_bytes: int) -> Quantization:
    groups = list((qc.get("config_groups") or {}).values())
    if len(groups) != 1 or not isinstance(groups[0], dict):
        raise PlanError("compressed-tensors with several config_groups is not supported yet")
    w = groups[0].get("weights") or {}
    fmt = qc.get("format") or groups[0].get("format")
    ignore = _ignore_list(qc, "ignore")
    bits = int(w.get("num_bits") or 0)
    if fmt == "pack-quantized" and w.get("type") == "int" and bits == 4:
        if w.get("strategy") != "group" or not w.get("group_size"):
            raise PlanError("compressed-tensors int4 needs strategy 'group' with a group_size")
        return Quantization(
            "int4_group", 4, None, int(w["group_size"]), ignore, param_bytes, "compressed-tensors"
        )
    if w.get("type") == "float" and bits == 8:
        strategy = w.get("strategy")
        where = f"compressed-tensors float8 {strategy}"
        if strategy == "tensor":
            return Quantization("fp8_tensor", 8, None, None, ignore, param_bytes, where)
        if strategy == "channel":
            return Quantization("fp8_channel", 8, None, None, ignore, param_bytes, where)
        if strategy == "block" and isinstance(w.get("block_structure"), list):
            n, k = (int(x) for x in w["block_structure"])
            return Quantization("fp8_block", 8, (n, k), None, ignore, param_bytes, where)
    if fmt == "nvfp4-pack-quantized" or (w.get("type") == "float" and bits == 4):
        return Quantization(
            "nvfp4", 4, None, int(w.get("group_size") or 16), ignore, param_bytes, "compressed-tensors nvfp4"
        )
    raise PlanError(
        f"compressed-tensors format {fmt!r} with {w.get('num_bits')}-bit {w.get('type')} weights "
        f"({w.get('strategy')}) is not supported yet. Supported quantization: {SUPPORTED_QUANTIZATION}."
    )


def load_model(model: dict) -> ModelSpec:
    """Build the weight inventory of ``model`` (the ``sglang_model`` mapping)."""
    if not isinstance(model, dict) or not model.get("name"):
        raise PlanError("sglang_model must be a mapping with at least name and path (or hf_config)")
    raw, source = _hf_config(model)
    if not isinstance(raw, dict):
        raise PlanError(f"{source}: a model config must be a JSON object, not {kind_of(raw)}")
    archs = raw.get("architectures") or []
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise PlanError(f'{source}: architectures must be a list of names, e.g. ["DeepseekV3ForCausalLM"]')
    arch = archs[0] if archs else None
    wrapper = arch
    config = raw
    vision_bytes = 0
    if arch in WRAPPER_ARCHITECTURES:
        config = raw.get("text_config") or {}
        config = dict(config) if isinstance(config, dict) else {}
        if not config:
            raise PlanError(f"{arch} config has no text_config")
        text_arch = (config.get("architectures") or [WRAPPER_ARCHITECTURES[arch]])[0]
        vision_bytes = _vision_tower_bytes(raw.get("vision_config") or {})
        if "quantization_config" not in config and raw.get("quantization_config"):
            config["quantization_config"] = raw["quantization_config"]
        arch = text_arch
    if arch not in ARCH_FAMILIES:
        raise PlanError(
            f"architecture {archs[0] if archs else None!r} is not supported; supported: {SUPPORTED_SUMMARY} "
            "(docs/planner.md, Architectures, lists the class names)"
        )
    _check_config(config, source, ARCHS[arch])
    qc = config.get("quantization_config")
    if qc is not None and not isinstance(qc, dict):
        raise PlanError(f"{source}: quantization_config must be a mapping, not {kind_of(qc)}")
    quant = _quantization(qc, config.get("torch_dtype") or raw.get("torch_dtype"))
    spec = ModelSpec(
        name=str(model["name"]),
        path=str(model.get("path") or ""),
        architecture=arch,
        family=ARCH_FAMILIES[arch],
        config=config,
        quant=quant,
        vision_bytes=vision_bytes,
        load_format=str(model.get("load_format") or ""),
        config_source=source,
    )
    _kv_pool(spec, wrapper)
    try:
        spec.linears = _linears(spec)
        shards = _safetensors_files(spec.path)
        if shards:
            spec.tensors = _tensors_from_safetensors(spec, shards)
            spec.mode = "safetensors"
        else:
            spec.tensors = _tensors_from_config(spec)
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as e:
        if isinstance(e, PlanError):
            raise
        # a field _check_config does not cover (an optional one of a rarer shape)
        what = f"no {e.args[0]!r}" if isinstance(e, KeyError) else "a value of the wrong type or zero"
        raise PlanError(f"{source}: the {arch} config has {what}; is it the model's config.json?") from None
    return spec


# Fields every config of a family needs, each a whole number >= 1 (the weights' shapes).
_REQUIRED = {
    "dense": ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size", "intermediate_size"),
    "gqa_moe": ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"),
    "linear_moe": (
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "vocab_size",
        "linear_num_key_heads",
        "linear_key_head_dim",
        "linear_num_value_heads",
        "linear_value_head_dim",
    ),
    "mla_moe": (
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "vocab_size",
        "kv_lora_rank",
        "qk_rope_head_dim",
    ),
}
_OPTIONAL_POSITIVE = ("num_key_value_heads", "head_dim", "max_position_embeddings")


def _check_config(config: dict, source: str, arch: Arch) -> None:
    """The shape fields the planner reads: present, whole numbers >= 1."""
    required = _REQUIRED[arch.family]
    if arch.family in ("gqa_moe", "linear_moe"):
        required += (arch.expert_inter_key,)
    for key in required + _OPTIONAL_POSITIVE:
        value = config.get(key)
        if value is None and key in _OPTIONAL_POSITIVE:
            continue
        if value is None:
            raise PlanError(
                f"{source}: {key} is missing; the planner needs it (is it the model's config.json?)"
            )
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise PlanError(f"{source}: {key} must be a whole number >= 1, not {value!r}")


def _kv_pool(spec: ModelSpec, wrapper: str) -> None:
    """How SGLang 0.5.16 sizes this model's token pool (estimate/archs.py KV_POOLS)."""
    pool = WRAPPERS[wrapper][1] if wrapper in WRAPPERS else ""
    spec.kv_pool = pool or spec.arch.kv_pool
    if spec.kv_pool == "hybrid_swa":
        spec.swa_layers = tuple(swa_layer_ids(wrapper, spec.config))
        spec.window = sliding_window(wrapper, spec.config)
        if not spec.swa_layers:
            spec.kv_pool = "full"  # SGLang asserts >= 1 SWA layer; a config without layer_types has none


def _vision_tower_bytes(vc: dict) -> int:
    """MoonViT-style tower (+ projector), BF16, replicated on every rank."""
    hidden = int(vc.get("vt_hidden_size") or vc.get("hidden_size") or 0)
    layers = int(vc.get("vt_num_hidden_layers") or vc.get("num_hidden_layers") or 0)
    inter = int(vc.get("vt_intermediate_size") or vc.get("intermediate_size") or 4 * hidden)
    if not hidden or not layers:
        return 0
    per_layer = 4 * hidden * hidden + 2 * hidden * inter + 4 * hidden
    merge = vc.get("merge_kernel_size") or [2, 2]
    text_hidden = int(vc.get("text_hidden_size") or hidden)
    mm_in = hidden * int(merge[0]) * int(merge[1])
    projector = mm_in * mm_in + mm_in * text_hidden
    return 2 * (layers * per_layer + projector)


# ---------------------------------------------------------------------------
# Config mode: the linears and tensors SGLang builds
# ---------------------------------------------------------------------------


def _linears(spec: ModelSpec) -> list[Linear]:
    """Every quantizable linear of one representative layer of each kind (layer index 'L')."""
    c = spec.config
    arch = spec.arch
    h = int(c["hidden_size"])
    out: list[Linear] = []
    a = "model.layers.L.self_attn."
    if spec.family == "mla_moe":
        heads = spec.num_heads
        nope, rope, v = int(c["qk_nope_head_dim"]), int(c["qk_rope_head_dim"]), int(c["v_head_dim"])
        kv_lora = int(c["kv_lora_rank"])
        q_lora = c.get("q_lora_rank")
        if q_lora:
            out += [
                Linear(a + "q_a_proj", h, int(q_lora), "none", "replicated", "attention"),
                Linear(a + "q_b_proj", int(q_lora), heads * (nope + rope), "column", "attn_tp", "attention"),
            ]
        else:
            out.append(Linear(a + "q_proj", h, heads * (nope + rope), "column", "attn_tp", "attention"))
        out += [
            Linear(a + "kv_a_proj_with_mqa", h, kv_lora + rope, "none", "replicated", "attention"),
            Linear(a + "kv_b_proj", kv_lora, heads * (nope + v), "column", "attn_tp", "attention"),
            Linear(a + "o_proj", heads * v, h, "row", "attn_tp", "attention"),
        ]
    else:
        heads, kv, hd = spec.num_heads, spec.num_kv_heads, spec.head_dim
        q_out = heads * hd * (2 if arch.q_gate else 1)  # Qwen3-Next: q and the output gate in one
        out += [
            Linear(a + "q_proj", h, q_out, "column", "attn_tp", "attention"),
            Linear(a + "k_proj", h, kv * hd, "column", "kv_heads", "attention"),
            Linear(a + "v_proj", h, kv * hd, "column", "kv_heads", "attention"),
            Linear(a + "o_proj", heads * hd, h, "row", "attn_tp", "attention"),
        ]
    if spec.family == "linear_moe":
        # Gated DeltaNet (qwen3_next.py Qwen3GatedDeltaNet): q,k,z,v in one projection, b and a heads
        key_dim = int(c["linear_num_key_heads"]) * int(c["linear_key_head_dim"])
        value_dim = int(c["linear_num_value_heads"]) * int(c["linear_value_head_dim"])
        g = "model.layers.L.linear_attn."
        out += [
            Linear(g + "in_proj_qkvz", h, 2 * key_dim + 2 * value_dim, "column", "attn_tp", "linear_attn"),
            Linear(
                g + "in_proj_ba", h, 2 * int(c["linear_num_value_heads"]), "column", "attn_tp", "linear_attn"
            ),
            Linear(g + "out_proj", value_dim, h, "row", "attn_tp", "linear_attn"),
        ]
    inter = int(c.get(arch.dense_inter_key) or 0)
    m = "model.layers.L.mlp."
    if inter and not all(spec.is_moe_layer(i) for i in range(spec.num_layers)):
        dense = "dense_tp" if arch.dense_fully_dp else "tp"
        out += [
            Linear(m + "gate_proj", h, inter, "column", dense, "dense_mlp"),
            Linear(m + "up_proj", h, inter, "column", dense, "dense_mlp"),
            Linear(m + "down_proj", inter, h, "row", dense, "dense_mlp"),
        ]
    if spec.is_moe:
        mi = int(c[arch.expert_inter_key])
        e = spec.n_experts
        out += [
            Linear(m + "experts.E.gate_proj", h, mi, "column", "experts", "routed_experts", e),
            Linear(m + "experts.E.up_proj", h, mi, "column", "experts", "routed_experts", e),
            Linear(m + "experts.E.down_proj", mi, h, "row", "experts", "routed_experts", e),
        ]
        si = {
            "n_shared": mi * int(c.get("n_shared_experts") or 0),
            "key": int(c.get("shared_expert_intermediate_size") or 0),
            "one": mi,
        }.get(arch.shared, 0)
        if si:
            out += [
                Linear(m + "shared_experts.gate_proj", h, si, "column", "tp", "shared_experts"),
                Linear(m + "shared_experts.up_proj", h, si, "column", "tp", "shared_experts"),
                Linear(m + "shared_experts.down_proj", si, h, "row", "tp", "shared_experts"),
            ]
    return out


def rope_cache_bytes(spec: ModelSpec) -> int:
    """SGLang's rotary cos/sin cache on one rank: fp32 on CUDA, rows x rotary_dim, one per distinct
    get_rope key (layers/rotary_embedding/factory.py _ROPE_DICT, base.py _compute_cos_sin_cache).

    Rows: max_position_embeddings (default, llama3); x factor for linear and dynamic scaling;
    original_max_position_embeddings x factor for yarn / deepseek_yarn (yarn.py). Llama 4's
    10,485,760 positions x 128 make 5 GiB of it, none of it in the checkpoint."""
    c = spec.config
    max_pos = int(c.get("max_position_embeddings") or 8192)
    if spec.family == "mla_moe":
        dim = int(c["qk_rope_head_dim"])
    elif c.get("rotary_dim"):
        dim = int(c["rotary_dim"])  # MiniMax-M2 (minimax_m2.py)
    else:
        dim = int(spec.head_dim * float(c.get("partial_rotary_factor") or 1.0))
    if spec.architecture == "Gemma3ForCausalLM":
        # gemma3_causal.py: a local and a global rope, both "default" (config's scaling ignored)
        return 2 * max_pos * dim * 4
    scaling = c.get("rope_scaling") or c.get("rope_parameters") or {}
    kind = (
        str(scaling.get("rope_type") or scaling.get("type") or "default") if isinstance(scaling, dict) else ""
    )
    factor = float(scaling.get("factor") or 1.0) if isinstance(scaling, dict) else 1.0
    rows = max_pos
    if kind in ("linear", "dynamic"):
        rows = int(max_pos * factor)
    elif kind in ("yarn", "deepseek_yarn"):
        rows = int(int(scaling.get("original_max_position_embeddings") or max_pos) * factor)
    return rows * dim * 4


def linear_bytes(quant: Quantization, lin: Linear, layer: int | str = 0) -> int:
    """Bytes of one linear (all its experts) as stored: weight + scales (QUANT_METHODS)."""
    name = lin.name.replace(".L.", f".{layer}.").replace(".E.", ".0.")
    params = lin.in_features * lin.out_features * lin.experts
    if not quant.is_quantized(name, lin.component):
        return params * quant.param_bytes
    m = quant.method
    if m == "fp8_block":
        bn, bk = quant.block
        scales = -(-lin.out_features // bn) * -(-lin.in_features // bk) * lin.experts
        return params + scales * 4
    if m == "fp8_tensor":
        return params + 8 * lin.experts  # fp32 weight and input scales
    if m == "fp8_channel":
        return params + lin.out_features * lin.experts * 4
    groups = -(-lin.in_features // quant.group_size) * lin.out_features * lin.experts
    if m == "int4_group":
        # 8 values per int32, one scale (model dtype) per group of inputs
        return (
            params // 2
            + (lin.in_features // quant.group_size) * lin.out_features * lin.experts * quant.param_bytes
        )
    if m == "mxfp4":
        return params // 2 + groups  # one uint8 (e8m0) scale per 32
    if m == "nvfp4":
        return params // 2 + groups + 8 * lin.experts  # fp8 scale per 16, fp32 global scales
    if m == "awq":
        return params // 2 + groups * 2 + groups // 2  # fp16 scales, int4 zeros packed in int32
    if m == "gptq":
        return params // 2 + groups * 2 + groups // 2 + lin.in_features * lin.experts * 4  # + int32 g_idx
    raise ValueError(m)


def _tensors_from_config(spec: ModelSpec) -> list[Tensor]:
    c = spec.config
    arch = spec.arch
    h = int(c["hidden_size"])
    vocab = int(c["vocab_size"])
    pb = spec.quant.param_bytes
    tensors: list[Tensor] = []
    if spec.vision_bytes:
        tensors.append(Tensor("vision_tower", spec.vision_bytes, "replicated", STAGE_FIRST, "vision"))
    tensors.append(Tensor("model.embed_tokens.weight", vocab * h * pb, "vocab", STAGE_FIRST, "embed"))
    attention = set(spec.attention_layers())
    heads, kv, hd = spec.num_heads, spec.num_kv_heads, spec.head_dim
    for layer in range(spec.num_layers):
        moe = spec.is_moe_layer(layer)
        softmax = layer in attention
        for lin in spec.linears:
            if lin.component == "dense_mlp" and moe:
                continue
            if lin.component in ("routed_experts", "shared_experts") and not moe:
                continue
            if (lin.component == "attention") != softmax and lin.component in ("attention", "linear_attn"):
                continue
            name = lin.name.replace(".L.", f".{layer}.")
            tensors.append(
                Tensor(name, linear_bytes(spec.quant, lin, layer), lin.shard, layer, lin.component)
            )
        norms = 2 * h
        if spec.family == "mla_moe":
            norms += int(c["kv_lora_rank"]) + int(c.get("q_lora_rank") or 0)
        if softmax and arch.qk_norm == "head":
            norms += 2 * hd
        tensors.append(Tensor(f"model.layers.{layer}.norms", norms * pb, "replicated", layer, "norms"))
        tensors += _attention_extras(spec, layer, softmax, heads, kv, hd)
        if moe:
            e = spec.n_experts
            router = e * h * (arch.router_dtype_bytes or pb) + (e * pb if arch.router_bias else 0)
            # fp32 score-correction bias (DeepSeek-V3 noaux_tc, GLM-4.5, MiniMax-M2)
            if arch.correction_bias == "always" or (
                arch.correction_bias and c.get("topk_method") == arch.correction_bias
            ):
                router += e * 4
            if arch.shared_gate:
                router += h * pb
            tensors.append(Tensor(f"model.layers.{layer}.mlp.gate", router, "replicated", layer, "router"))
            if arch.expert_bias:
                mi = int(c[arch.expert_inter_key])
                tensors.append(
                    Tensor(
                        f"model.layers.{layer}.mlp.experts.bias",
                        e * (2 * mi + h) * pb,
                        "experts",
                        layer,
                        "routed_experts",
                    )
                )
    tensors.append(Tensor("model.norm.weight", h * pb, "replicated", STAGE_LAST, "norms"))
    tie = c.get("tie_word_embeddings", spec.architecture == "Gemma3ForCausalLM")
    if not tie:
        tensors.append(Tensor("lm_head.weight", vocab * h * pb, "tp", STAGE_LAST, "lm_head"))
    return tensors


def _attention_extras(
    spec: ModelSpec, layer: int, softmax: bool, heads: int, kv: int, hd: int
) -> list[Tensor]:
    """Biases, sinks, per-layer q/k norms and a linear-attention layer's small tensors."""
    c, arch, pb = spec.config, spec.arch, spec.quant.param_bytes
    out: list[Tensor] = []
    name = f"model.layers.{layer}.self_attn."
    if softmax:
        if arch.qkv_bias == "always" or (arch.qkv_bias and c.get(arch.qkv_bias)):
            out.append(Tensor(name + "q_proj.bias", heads * hd * pb, "attn_tp", layer, "attention"))
            out.append(Tensor(name + "kv_proj.bias", 2 * kv * hd * pb, "kv_heads", layer, "attention"))
        if arch.o_bias:
            out.append(
                Tensor(name + "o_proj.bias", int(c["hidden_size"]) * pb, "replicated", layer, "attention")
            )
        if arch.sinks:
            out.append(Tensor(name + "sinks", heads * pb, "attn_tp", layer, "attention"))
        if arch.qk_norm == "all":
            out.append(Tensor(name + "q_norm", heads * hd * pb, "attn_tp", layer, "norms"))
            out.append(Tensor(name + "k_norm", kv * hd * pb, "kv_heads", layer, "norms"))
    elif spec.family == "linear_moe":
        kh, kd = int(c["linear_num_key_heads"]), int(c["linear_key_head_dim"])
        vh, vd = int(c["linear_num_value_heads"]), int(c["linear_value_head_dim"])
        conv = (2 * kh * kd + vh * vd) * int(c.get("linear_conv_kernel_dim") or 4) * pb
        small = conv + vh * 4 * 2  # conv1d weight, dt_bias and A_log
        out.append(Tensor(f"model.layers.{layer}.linear_attn.conv1d", small, "attn_tp", layer, "linear_attn"))
        out.append(Tensor(f"model.layers.{layer}.linear_attn.norm", vd * pb, "replicated", layer, "norms"))
    return out


# ---------------------------------------------------------------------------
# Safetensors mode: exact sizes from the headers (a few KB per file)
# ---------------------------------------------------------------------------


def _safetensors_files(path: str) -> list[str]:
    if not path or not os.path.isdir(path):
        return []
    return sorted(glob.glob(os.path.join(path, "*.safetensors")))


def read_safetensors_header(path: str) -> dict:
    """The JSON header of one .safetensors file: {tensor: {dtype, shape, data_offsets}}."""
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise PlanError(f"{path} is not a safetensors file (shorter than its 8-byte header length)")
        (n,) = struct.unpack("<Q", raw)
        if n > 100 * 1024 * 1024:
            raise PlanError(f"{path}: header length {n} is implausible; is it a safetensors file?")
        try:
            header = json.loads(f.read(n))
        except json.JSONDecodeError as e:
            raise PlanError(f"{path}: unreadable safetensors header ({e.msg})") from e
    header.pop("__metadata__", None)
    return header


_LAYER_RE = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def classify_tensor(spec: ModelSpec, name: str) -> tuple[str, str, int]:
    """(component, shard kind, stage) of a checkpoint tensor, by SGLang's module structure."""
    if "vision_tower" in name or "mm_projector" in name or "visual" in name:
        return "vision", "replicated", STAGE_FIRST
    if name.endswith("embed_tokens.weight"):
        return "embed", "vocab", STAGE_FIRST
    if name.startswith("lm_head") or ".lm_head." in name:
        return "lm_head", "tp", STAGE_LAST
    m = _LAYER_RE.search(name)
    if not m:
        return "norms", "replicated", STAGE_LAST  # model.norm and other stragglers
    layer = int(m.group(1))
    if layer >= spec.num_layers:  # MTP / nextn layers: SGLang does not load them without speculative decoding
        return "skip", "replicated", layer
    if ".mlp.experts." in name or ".block_sparse_moe.experts." in name or ".feed_forward.experts." in name:
        return "routed_experts", "experts", layer
    if ".shared_expert" in name:
        return "shared_experts", "tp", layer
    if (
        ".mlp.gate." in name
        or ".block_sparse_moe.gate." in name
        or ".mlp.router." in name
        or ".feed_forward.router." in name
        or "e_score_correction_bias" in name
    ):
        return "router", "replicated", layer
    if ".linear_attn." in name:
        return "linear_attn", "attn_tp", layer
    if ".feed_forward." in name:
        return "dense_mlp", "tp", layer
    if ".mlp." in name:
        return "dense_mlp", "dense_tp" if spec.arch.dense_fully_dp else "tp", layer
    if ".self_attn." in name:
        leaf = name.split(".self_attn.")[1]
        if leaf.startswith(("q_a_proj", "kv_a_proj_with_mqa")) or "layernorm" in leaf or "norm" in leaf:
            return "attention", "replicated", layer
        if leaf.startswith(("k_proj", "v_proj")):
            return "attention", "kv_heads", layer
        return "attention", "attn_tp", layer
    return "norms", "replicated", layer


def _tensors_from_safetensors(spec: ModelSpec, files: list[str]) -> list[Tensor]:
    tensors: list[Tensor] = []
    for path in files:
        for name, meta in read_safetensors_header(path).items():
            try:
                size = SAFETENSORS_DTYPE_BYTES[meta["dtype"]]
                nbytes = size
                for d in meta["shape"]:
                    nbytes *= int(d)
            except KeyError as e:
                raise PlanError(f"{path}: tensor {name} has an unknown dtype {meta.get('dtype')!r}") from e
            component, shard, stage = classify_tensor(spec, name)
            if component == "skip":
                continue
            tensors.append(Tensor(name, nbytes, shard, stage, component))
    if not tensors:
        raise PlanError(f"no tensors found in the safetensors files under {spec.path}")
    return tensors
