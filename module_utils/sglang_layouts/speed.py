"""The speed model: decode step, prefill and benchmark figures of one layout on one host.

One model for the planner (each fitting layout's `speed`), the simulator (sglang_sim/cost.py is a
thin user) and the report (predicted beside measured). docs/cost-model.md gives every constant its
source and says which are still priors; the per-rank bytes come from memory.decode_cost.

Decode step of one PP stage for a micro-batch of m requests holding T tokens of context:

    t = (dense + routed(m)) / (eta * BW)  |  max with FLOPs / (eta_f * F)
      + kv_bytes * layers * T / (eta_kv * BW)
      + layers * ((K_layer - K_elem) * tau_k + K_elem * tau_e)   one floor per kernel node (CUDA graph),
      + layers * K_elem * m * hidden * 8 / (eta_e * BW)         K_elem of them unfused elementwise ops
      + n_AR * (alpha + S * 2(n-1)/n / busBW)            NCCL all-reduce, S = m * hidden * 2 B

routed(m): uniform top-k routing, EP waits for its busiest rank; under dummy weights a router with a
correction bias (noaux_tc) sends every token to the same k experts, re-read once per kernel block.
Without CUDA graphs a step costs at least its kernel launches on the host. PP as SGLang runs it:
micro-batches of max_running_requests // pp, the overlap scheduler off, CPU per micro-batch exposed.
Prefill: per chunk, max(FLOPs / (eta_f * F), bytes / (eta * BW)) + all-reduces + eager launches.
"""

from __future__ import annotations

import json
import math
import os

from .gpu_specs import TABLE_PATH, gpu_spec

# Constants: (value, status, source), from data/speed_constants.json (the priors and sourced values:
# SRC datasheet/code, MEAS a published measurement, OPEN a prior that docs/cost-model.md says how to
# pin), then data/speed_measured.json (our measurements, each turning its constant MEAS).
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
CONSTANTS_DATA = os.path.join(DATA, "speed_constants.json")
MEASURED_DATA = os.path.join(DATA, "speed_measured.json")


def _load_constants(path: str = CONSTANTS_DATA) -> dict[str, tuple[float, str, str]]:
    with open(path, encoding="utf-8") as f:
        entries = json.load(f)["constants"]
    return {name: (float(e["value"]), str(e["status"]), str(e["source"])) for name, e in entries.items()}


CONSTANTS: dict[str, tuple[float, str, str]] = _load_constants()

# Our measurements replace the priors: data/speed_measured.json holds {"constants": {name: {"value",
# "source" (the file under benchmarks/results/), "command"}}}; each entry turns its constant MEAS.


def _load_measured(path: str = MEASURED_DATA) -> None:
    try:
        with open(path, encoding="utf-8") as f:
            entries = json.load(f).get("constants") or {}
    except OSError:
        return
    for name, entry in entries.items():
        if name not in CONSTANTS:
            raise ValueError(f"{path}: {name} is not a constant of speed.py ({', '.join(CONSTANTS)})")
        CONSTANTS[name] = (float(entry["value"]), "MEAS", f"{entry['source']} ({entry.get('command', '')})")


_load_measured()

# Kernel nodes per decoder layer of a decode CUDA graph, by family when the architecture has no count
# of its own (archs.Arch.kernels_per_layer): gqa_moe as M3 counted Qwen3-30B-A3B tp1 (SGLang 0.5.16,
# triton attention: 868 nodes for 48 layers, lease h100-2026-12-07c), the others itemised from
# SGLang's code path.
KERNELS_PER_LAYER = {"mla_moe": 30, "gqa_moe": 18, "gqa": 12}
# bytes an unfused elementwise op moves per value of a token's hidden vector: Gemma 3's native norms
# upcast to fp32, so each op reads and writes 4 B a value
ELEMENTWISE_BYTES_PER_VALUE = 8

# All-reduce by interconnect: small-message latency (us) and bus bandwidth (GB/s).
INTERCONNECTS: dict[str, dict] = {
    "pcie": {
        "alpha_us": 24.0,
        "busbw_gbs": 30.0,
        "source": "voipmonitor/rtx6kpro hardware/pcie-bandwidth.md: NCCL all-reduce 8x PCIe 24 us, busbw 22-41 GB/s",
    },
    # SGLang's custom all-reduce runs on PCIe only up to two GPUs (custom_all_reduce.py)
    "pcie_custom": {
        "alpha_us": 8.3,
        "busbw_gbs": 30.0,
        "source": "voipmonitor/rtx6kpro models/kimi-k25.md: custom all-reduce ~8.3 us",
    },
}

# NCCL on 2 x H200 over NVLink (benchmarks/bench_collectives.py), in a CUDA graph; more GPUs only
# add ring steps, so the 2-GPU figure is a lower bound for larger TP.
NVLINK_DATA = os.path.join(DATA, "collectives_nvlink.json")


def _nvlink() -> dict:
    with open(NVLINK_DATA, encoding="utf-8") as f:
        data = json.load(f)
    ar = data["ops"]["all_reduce"]["2"]
    return {
        "alpha_us": float(ar["latency_us"]),
        "busbw_gbs": float(ar["busbw_gbs"]),
        "hop_us": float(data["ops"]["sendrecv"]["2"]["latency_us"]),
        "source": data["source"] + " (all-reduce at 8 KB in a CUDA graph; busbw at 256 MiB)",
    }


INTERCONNECTS["nvlink"] = _nvlink()

# The KV cache's way from a prefill server to a decode server (pd layouts): per GPU, each prefill
# rank sends its own share of every token's KV to its decode peer, all ranks at once. (GB/s, status,
# source); the same host uses the GPUs' interconnect, other hosts the network.
KV_LINKS: dict[str, tuple[float, str, str]] = {
    "nvlink": (
        INTERCONNECTS["nvlink"]["busbw_gbs"],
        "MEAS",
        "NVLink GPU to GPU: " + INTERCONNECTS["nvlink"]["source"],
    ),
    "pcie": (
        INTERCONNECTS["pcie"]["busbw_gbs"],
        "OPEN",
        "PCIe GPU to GPU: " + INTERCONNECTS["pcie"]["source"],
    ),
    "rdma": (50.0, "OPEN", "one 400 Gb/s RDMA NIC per GPU (HGX reference design), mooncake/nixl; prior"),
    "tcp": (3.0, "OPEN", "mooncake_tcp: TCP through host memory (~25 Gb/s effective); prior"),
    "fake": (0.0, "SRC", "transfer backend fake: no bytes move (SGLang's test backend)"),
}


def kv_link(hardware: dict, transfer_backend: str | None, same_host: bool = True) -> dict:
    """The link a pd layout's KV transfer runs over: {name, gbs, status, source}."""
    backend = (transfer_backend or "mooncake").lower()
    if backend == "fake":
        name = "fake"
    elif backend == "mooncake_tcp":
        name = "tcp"
    elif same_host:
        name = "nvlink" if (hardware.get("gpu_interconnect") or "pcie").lower() == "nvlink" else "pcie"
    else:
        name = "rdma"
    gbs, status, source = KV_LINKS[name]
    return {"name": name, "gbs": gbs, "status": status, "source": source}


def kv_transfer_s(kv_bytes_per_token: float | None, prompt_tokens: int, link_gbs: float) -> float:
    """Seconds to move one request's KV from prefill to decode: the plan's bytes per token (per rank,
    every rank sending its share at once) x prompt tokens / the link's bandwidth (0 on `fake`)."""
    if not kv_bytes_per_token or link_gbs <= 0:
        return 0.0
    return float(kv_bytes_per_token) * max(0, int(prompt_tokens)) / (link_gbs * 1e9)


def c(name: str) -> float:
    return CONSTANTS[name][0]


class overrides:
    """`with overrides({"eta_weights": 0.7}):` predicts with other values of some constants (the
    search's calibration for one host, plan/calibrate.py); the table is restored on exit."""

    def __init__(self, values: dict[str, float] | None):
        unknown = sorted(set(values or {}) - set(CONSTANTS))
        if unknown:
            raise ValueError(f"not constants of speed.py: {', '.join(unknown)}")
        self.values = dict(values or {})
        self.saved: dict = {}

    def __enter__(self):
        for name, value in self.values.items():
            self.saved[name] = CONSTANTS[name]
            CONSTANTS[name] = (float(value), "FIT", f"calibrated from measurements ({CONSTANTS[name][2]})")
        return self

    def __exit__(self, *exc):
        CONSTANTS.update(self.saved)
        return False


# The flags SpeedModel reads from a layout's argv: layouts equal in these, their cost, KV capacity
# and weights kind get the same prediction (prediction_key).
READ_FLAGS = (
    "--disable-cuda-graph",
    "--disable-overlap-schedule",
    "--disable-custom-all-reduce",
    "--max-running-requests",
    "--chunked-prefill-size",
    "--attention-backend",
    "--cuda-graph-max-bs",
    "--cuda-graph-max-bs-decode",
)


def sglang_size_defaults(gpu_memory_gib: float, tp: int) -> tuple[int, int]:
    """(chunked_prefill_size, decode CUDA-graph max batch) SGLang picks when neither flag is given.

    SGLang 0.5.16 server_args.py, ServerArgs._handle_gpu_memory_settings: by the GPU's memory in
    MiB (<20 Gi: 2048 / 8; <35 Gi: 2048 / 24, 80 from tp 4; <60 Gi: 4096 / 32, 160 from tp 4;
    <160 Gi: 8192 / 256, 512 from tp 4; larger: 16384 / 512). The scheduler never runs more than
    max_running_requests, so the graphs it captures stop there."""
    mib = gpu_memory_gib * 1024
    if mib < 20 * 1024:
        return 2048, 8
    if mib < 35 * 1024:
        return 2048, 24 if tp < 4 else 80
    if mib < 60 * 1024:
        return 4096, 32 if tp < 4 else 160
    if mib < 160 * 1024:
        return 8192, 256 if tp < 4 else 512
    return 16384, 512


def prediction_key(layout_plan: dict, hardware: dict, bench: dict | None) -> str:
    """Everything predict() reads of a layout, its host and the workload, as one string."""
    argv = [str(a) for a in (layout_plan.get("argv") or [])]
    pd = layout_plan.get("pd")
    cost = layout_plan.get("cost")
    if pd:  # a pd layout: what predict_pd reads of each role, the backend and the hosts
        cost = {
            "pd": [
                [
                    pd[r].get(k)
                    for k in ("cost", "kv_tokens", "kv_bytes_per_token", "replicas", "gpu_memory_gib")
                ]
                + [(pd[r].get("units") or [{}])[0].get("argv")]
                for r in ("prefill", "decode")
            ],
            "transfer_backend": pd.get("transfer_backend"),
            "hosts": pd.get("hosts"),
        }
    return json.dumps(
        [
            cost,
            layout_plan.get("kv_tokens"),
            bool(layout_plan.get("dummy_weights")),
            [_flag(argv, f) for f in READ_FLAGS],
            hardware,
            bench,
            {k: v[0] for k, v in CONSTANTS.items()},
        ],
        sort_keys=True,
        default=str,
    )


def _flag(argv: list, name: str) -> str | None:
    """The value of --name in argv ('' for a bare switch), None when absent."""
    for i, a in enumerate(argv):
        a = str(a)
        if a == name:
            nxt = str(argv[i + 1]) if i + 1 < len(argv) else ""
            return "" if nxt.startswith("--") else nxt
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


class SpeedModel:
    """Step times of one layout on one host, from the plan's `cost` and the GPU's figures."""

    def __init__(self, layout_plan: dict, hardware: dict, gpu: dict):
        cost = layout_plan.get("cost") or {}
        self.cost = cost
        self.gpu = gpu
        self.stages = cost.get("stages") or []
        self.pp = max(1, len(self.stages))
        self.bw = float(hardware.get("gpu_memory_bandwidth_gbs") or gpu["bandwidth_gbs"]) * 1e9
        self.bw_source = "inventory/gpu_facts" if hardware.get("gpu_memory_bandwidth_gbs") else gpu["source"]
        self.interconnect = str(hardware.get("gpu_interconnect") or cost.get("interconnect") or "pcie")
        argv = [str(a) for a in (layout_plan.get("argv") or [])]
        self.cuda_graph = _flag(argv, "--disable-cuda-graph") is None
        self.overlap = _flag(argv, "--disable-overlap-schedule") is None and self.pp == 1
        self.custom_ar = _flag(argv, "--disable-custom-all-reduce") is None
        self.attention_backend = _flag(argv, "--attention-backend")
        mrr = _flag(argv, "--max-running-requests")
        self.max_running = int(mrr) if mrr else None
        cps = _flag(argv, "--chunked-prefill-size")
        cap = float(hardware.get("gpu_memory_gib") or 80)
        default_chunk, default_graph_bs = sglang_size_defaults(cap, int(cost.get("tp") or 1))
        self.chunk = int(cps) if cps else default_chunk
        # a decode batch above the largest captured graph runs eager (the host launches every kernel)
        gbs = _flag(argv, "--cuda-graph-max-bs-decode") or _flag(argv, "--cuda-graph-max-bs")
        self.graph_max_bs = int(gbs) if gbs else default_graph_bs
        self.dummy = bool(layout_plan.get("dummy_weights"))
        self.collapsed = self.dummy and bool(cost.get("router_correction_bias"))
        self.family = str(cost.get("family") or "gqa")
        self.quant = str(cost.get("quant_method") or "none")
        self.n_experts = int(cost.get("n_experts") or 0)
        self.top_k = int(cost.get("top_k") or 0)
        self.experts_per_gpu = int(cost.get("experts_per_gpu") or 0)
        self.kv_bytes = float(cost.get("kv_bytes_per_token_layer") or 0)
        self.tp = int(cost.get("tp") or 1)
        self.dp = int(cost.get("dp") or 1)
        self.dp_attention = bool(cost.get("dp_attention"))
        self.ar_bytes_per_token = float(cost.get("allreduce_bytes_per_token") or 0)
        self.hidden = int(cost.get("hidden_size") or 0)
        self.attn_dim = int(cost.get("attn_flop_dim") or 0)
        self.attn_tp = int(cost.get("attn_tp") or self.tp)
        # the architecture's own count (archs.Arch.kernels_per_layer), else its family's
        self.k_layer = int(
            cost.get("kernels_per_layer") or KERNELS_PER_LAYER.get(self.family, KERNELS_PER_LAYER["gqa"])
        )
        self.k_elementwise = min(self.k_layer, int(cost.get("elementwise_per_layer") or 0))
        self._share: dict[tuple[int, float], float] = {}
        self.ar = self._allreduce_table()

    # -- pieces ------------------------------------------------------------------------------
    def _allreduce_table(self) -> dict | None:
        if self.tp <= 1:
            return None
        if self.interconnect == "nvlink":
            return INTERCONNECTS["nvlink"]
        if self.custom_ar and self.tp <= 2:
            return INTERCONNECTS["pcie_custom"]
        return INTERCONNECTS["pcie"]

    def allreduce_s(self, tokens: int) -> float:
        if not self.ar:
            return 0.0
        n = self.tp
        size = max(1, tokens) * self.ar_bytes_per_token
        if self.dp_attention:
            size *= self.dp  # the gather of every DP group's tokens before the MoE
        return self.ar["alpha_us"] * 1e-6 + size * 2 * (n - 1) / n / (self.ar["busbw_gbs"] * 1e9)

    def expert_share(self, tokens: int) -> float:
        """Share of one rank's routed-expert bytes read for a batch of `tokens` tokens."""
        if not (self.n_experts and self.top_k):
            return 0.0
        if self.collapsed:
            # the same k experts for every token: read once per kernel block of tokens
            if self.quant == "int4_group":
                block = c("marlin_block_m")
            elif self.quant in ("fp8_block", "fp8_channel", "fp8_tensor"):
                block = c("triton_moe_block_m_fp8")
            else:
                block = c("triton_moe_block_m")
            return self._busiest(self.top_k / self.n_experts) * math.ceil(tokens / block)
        f = 1.0 - (1.0 - min(1.0, self.top_k / self.n_experts)) ** tokens
        return self._busiest(f)

    def _busiest(self, f: float) -> float:
        """E[max over EP ranks of Binomial(local experts, f)] / local experts (f without EP)."""
        local = self.experts_per_gpu or self.n_experts
        groups = max(1, self.n_experts // max(1, local))
        key = (groups, round(f, 12))
        if key in self._share:
            return self._share[key]
        share = f
        if groups > 1 and 0.0 < f < 1.0:
            cdf, pmf, e_max = 0.0, (1.0 - f) ** local, 0.0
            for x in range(local):
                cdf += pmf
                e_max += 1.0 - min(1.0, cdf) ** groups
                pmf *= (local - x) / (x + 1) * f / (1.0 - f)
            share = e_max / local
        self._share[key] = share
        return share

    def _eta_f(self, kind: str) -> tuple[float, float]:
        """(efficiency, peak FLOP/s) of the GEMMs of `kind`: dense or routed weights."""
        bf16 = float(self.gpu["bf16_tflops"]) * 1e12
        if self.quant in ("fp8_block", "fp8_tensor", "fp8_channel") and self.gpu.get("fp8_tflops"):
            return c("eta_f_fp8"), float(self.gpu["fp8_tflops"]) * 1e12
        if self.quant in ("int4_group", "mxfp4", "nvfp4", "awq", "gptq") and kind == "routed":
            # weight-only 4-bit paths on Hopper dequantize to bf16 tensor cores (Marlin / triton kernels)
            return c("eta_f_int4"), bf16
        return c("eta_f_bf16"), bf16

    def _param_bytes(self, kind: str) -> float:
        """Stored bytes per weight (model.linear_bytes without the per-tensor scales)."""
        group = float(self.cost.get("int4_group_size") or 32)
        if self.quant in ("fp8_block", "fp8_tensor", "fp8_channel"):
            return 1.0
        if self.quant == "int4_group" and kind == "routed":
            return 0.5 + 2.0 / group
        if self.quant == "mxfp4" and kind == "routed":
            return 0.5 + 1.0 / 32  # e8m0 scale per 32; the rest of the model stays bf16
        if self.quant == "nvfp4":
            return 0.5 + 1.0 / 16
        if self.quant in ("awq", "gptq"):
            return 0.5 + 2.5 / group
        return 2.0

    def stage_terms(
        self, st: dict, tokens: int, kv_tokens: float, prefill: bool = False, attn_span: float | None = None
    ) -> dict:
        """Seconds by term for one stage processing `tokens` tokens (one per request in decode).
        In prefill each token attends `attn_span` tokens on average (default: half the chunk plus the
        `kv_tokens` of context before it, one request)."""
        layers = int(st.get("layers", 0))
        dense = float(st.get("dense_bytes", 0))
        lm_head = float(st.get("lm_head_bytes", 0))
        experts = float(st.get("expert_bytes", 0))
        share = self.expert_share(tokens)
        bytes_ = dense + experts * share
        memory = bytes_ / (c("eta_weights") * self.bw)
        # FLOPs: every weight once per token (routed: k experts' worth), lm_head once per request in prefill
        lm_tokens = 1 if prefill else tokens
        eta_d, f_d = self._eta_f("dense")
        eta_r, f_r = self._eta_f("routed")
        dense_flops = 2 * tokens * (dense - lm_head) / self._param_bytes("dense")
        dense_flops += 2 * lm_tokens * lm_head / self._param_bytes("dense")
        routed_flops = 0.0
        if self.n_experts:
            per_expert = experts / self.n_experts  # one expert's bytes / expert ways, as held here
            routed_flops = 2 * tokens * self.top_k * per_expert / self._param_bytes("routed")
        attn_flops = 0.0
        if prefill and self.attn_dim:
            # causal: each token attends to half the chunk on average, plus the context before it
            span = tokens / 2 + kv_tokens if attn_span is None else attn_span
            attn_flops = 4 * tokens * span * self.attn_dim / self.attn_tp * layers
        eta_a = c("eta_f_attn_triton") if self.attention_backend == "triton" else eta_d
        compute = dense_flops / (eta_d * f_d) + routed_flops / (eta_r * f_r) + attn_flops / (eta_a * f_d)
        kv = 0.0 if prefill else self.kv_read_bytes(layers, tokens, kv_tokens) / (c("eta_kv") * self.bw)
        kernel_us = (self.k_layer - self.k_elementwise) * c("tau_kernel_us")
        elementwise_us = self.k_elementwise * c("tau_elementwise_us")
        floors = layers * (kernel_us + elementwise_us) * 1e-6
        # unfused elementwise ops also move each token's hidden vector, read and written in fp32
        elementwise_bytes = layers * self.k_elementwise * tokens * self.hidden * ELEMENTWISE_BYTES_PER_VALUE
        floors += elementwise_bytes / (c("eta_elementwise") * self.bw)
        if self.quant == "fp8_block":
            floors += layers * c("q_extra_fp8_us") * 1e-6
        if self.cost.get("mxfp4_moe_path") == "triton_kernels" and self.n_experts:
            floors += layers * c("q_extra_mxfp4_us") * 1e-6
        collective = int(st.get("collectives", 0)) * self.allreduce_s(tokens)
        return {"memory": memory + kv, "compute": compute, "kernel_latency": floors, "collective": collective}

    def kv_read_bytes(self, layers: int, requests: int, kv_tokens: float) -> float:
        """KV bytes one decode step reads: full layers read every token in use, sliding-window layers at
        most the window of each request, linear-attention layers their fixed state (decode_cost's kv_layers)."""
        kvl = self.cost.get("kv_layers") or {}
        if not kvl or not layers:
            return self.kv_bytes * layers * kv_tokens
        share = layers / max(1, int(kvl.get("total") or layers))  # this stage's part of the model
        full = float(kvl.get("full", 0)) * share
        swa = float(kvl.get("swa", 0)) * share
        per_request = kv_tokens / max(1, requests)
        window = float(kvl.get("window") or per_request)
        state = float(kvl.get("state_bytes_per_request", 0)) * share * max(1, requests)
        return self.kv_bytes * (full * kv_tokens + swa * max(1, requests) * min(window, per_request)) + state

    def _stage_time(self, terms: dict) -> float:
        return max(terms["memory"], terms["compute"]) + terms["kernel_latency"] + terms["collective"]

    def _host_floor(self, terms_list: list[dict]) -> float:
        """Without CUDA graphs: the host launches every kernel and collective one by one."""
        kernels = sum(int(st.get("layers", 0)) for st in self.stages) * self.k_layer
        colls = sum(int(st.get("collectives", 0)) for st in self.stages)
        return kernels * c("tau_cpu_eager_us") * 1e-6 + colls * c("tau_nccl_eager_us") * 1e-6

    # -- decode ------------------------------------------------------------------------------
    def micro_batch(self, batch: int) -> int:
        if self.pp == 1:
            return batch
        cap = max(1, (self.max_running or 4096) // self.pp)
        return max(1, min(batch, cap))

    def sched_cpu_s(self, batch: int) -> float:
        """Scheduler CPU of one step (or PP micro-batch) of `batch` requests, when it is not hidden."""
        return c("t_cpu_sched_ms") * 1e-3 + batch * c("t_cpu_sched_per_req_us") * 1e-6

    def graphed(self, batch: int) -> bool:
        """Whether a decode step of `batch` requests replays a CUDA graph."""
        return self.cuda_graph and batch <= self.graph_max_bs

    def decode_terms(self, batch: int, kv_tokens_in_use: float = 0.0) -> dict:
        """Seconds per decode step (each running request gets one token) and its terms."""
        batch = max(1, int(batch))
        t_cpu = self.sched_cpu_s(batch if self.pp == 1 else self.micro_batch(batch))
        t_hop = c("t_hop_ms") * 1e-3
        t_fixed = c("t_fixed_ms") * 1e-3
        if self.pp == 1:
            terms = self.stage_terms(self.stages[0], batch, kv_tokens_in_use) if self.stages else {}
            gpu = self._stage_time(terms) + t_fixed if terms else t_fixed
            cpu = 0.0 if self.overlap else t_cpu
            if not self.graphed(batch):
                host = self._host_floor([terms])
                if host > gpu:
                    cpu += host - gpu
            return {**terms, "cpu": cpu, "fixed": t_fixed, "step_s": gpu + cpu}
        mb = self.micro_batch(batch)
        n_mb = math.ceil(batch / mb)
        kv_per_mb = kv_tokens_in_use * mb / batch
        per_stage = [self.stage_terms(st, mb, kv_per_mb) for st in self.stages]
        times = [self._stage_time(t) for t in per_stage]
        total = {k: sum(t[k] for t in per_stage) for k in per_stage[0]}
        if batch == 1:
            step = sum(times) + self.pp * t_hop + t_cpu / 2 + t_fixed
            cpu = t_cpu / 2 + self.pp * t_hop
        else:
            ring = sum(times) + self.pp * (t_cpu + t_hop)
            period = n_mb * (max(times) + t_cpu + t_hop)
            step = max(period, ring)
            if n_mb >= self.pp:
                step *= self.pp / (self.pp - 1)  # the return trip of the last micro-batch is never hidden
            step += t_fixed
            cpu = step - sum(times) - t_fixed
        if not self.graphed(mb):
            step = max(step, self._host_floor(per_stage))
        return {**total, "cpu": max(0.0, cpu), "fixed": t_fixed, "step_s": step}

    def decode_step(self, batch: int, kv_tokens_in_use: float = 0.0) -> float:
        if batch <= 0:
            return 0.0
        return self.decode_terms(batch, kv_tokens_in_use)["step_s"]

    # -- prefill -----------------------------------------------------------------------------
    def prefill(self, new_tokens: int, batch: int = 1) -> float:
        """Seconds to prefill `new_tokens` prompt tokens of `batch` requests, chunk by chunk."""
        left, done, t = max(1, int(new_tokens)), 0, 0.0
        per_request = max(1, int(new_tokens)) / max(1, int(batch))
        # prefill runs without a CUDA graph: every kernel is launched from the host (slower still
        # when the server runs without graphs at all: the eager decode path's host cost)
        tau_host = c("tau_cpu_prefill_us") if self.cuda_graph else c("tau_cpu_eager_us")
        while left > 0:
            n = min(left, self.chunk)
            # several requests in one chunk: each token attends half of its own prompt
            span = None if batch <= 1 else min(n, per_request) / 2
            for st in self.stages:
                terms = self.stage_terms(st, n, done, prefill=True, attn_span=span)
                gpu = max(terms["memory"], terms["compute"]) + terms["collective"]
                kernels = int(st.get("layers", 0)) * self.k_layer
                t += max(gpu, kernels * tau_host * 1e-6)
            t += (self.pp - 1) * c("t_hop_ms") * 1e-3 + c("t_fixed_ms") * 1e-3
            done = done + n if batch <= 1 else done
            left -= n
        return t

    # -- the benchmark -----------------------------------------------------------------------
    def bench_level(self, conc: int, input_len: int, output_len: int, kv_tokens: int | None) -> dict:
        """One bench_serving level of `conc` requests of fixed lengths, all sent at once."""
        return self.simulate(conc, [input_len] * conc, [output_len] * conc, kv_tokens)

    def simulate(self, conc: int, input_lens: list, output_lens: list, kv_tokens: int | None) -> dict:
        """A closed-loop client keeping `conc` requests in flight over the given requests, against
        SGLang's scheduling: new requests are prefilled (up to 16384 prompt tokens a batch) while
        decoding waits, then every running request gets one token per decode step."""
        limit = conc
        if self.max_running:
            limit = min(limit, self.max_running)
        queue = list(zip(input_lens, output_lens, strict=True))
        if kv_tokens:
            per_req = max(i + o for i, o in queue) if queue else 1
            limit = max(1, min(limit, int(kv_tokens) // max(1, per_req)))
        t, tokens, ttfts, itls, running = 0.0, 0, [], [], []  # running: [prompt, done, wanted]
        t_request = c("t_request_ms") * 1e-3
        while queue or running:
            if queue and len(running) < limit:
                new, budget = [], 16384
                while queue and len(running) + len(new) < limit and (not new or budget >= queue[0][0]):
                    i, o = queue.pop(0)
                    budget -= i
                    new.append([i, 1, o])
                if not running:
                    # an idle GPU waits while the requests cross HTTP and the tokenizer (behind a
                    # running batch that latency is hidden by its decode steps)
                    t += t_request
                t += self.prefill(sum(r[0] for r in new), len(new))
                ttfts += [t] * len(new)
                tokens += len(new)
                running += [r for r in new if r[1] < r[2]]
                continue
            ctx = sum(r[0] + r[1] for r in running)
            step = self.decode_step(len(running), ctx)
            t += step
            itls.append(step)
            tokens += len(running)
            for r in running:
                r[1] += 1
            running = [r for r in running if r[1] < r[2]]
        return {
            "output_tok_s": round(tokens / t, 1) if t > 0 else 0.0,
            "ttft_ms": round(sum(ttfts) / len(ttfts) * 1e3, 1) if ttfts else None,
            "itl_ms": round(sum(itls) / len(itls) * 1e3, 3) if itls else None,
            "running": limit,
        }

    def bound(self, batch: int, kv_tokens_in_use: float) -> str:
        terms = self.decode_terms(batch, kv_tokens_in_use)
        names = ("memory", "compute", "collective", "cpu", "kernel_latency")
        return max(names, key=lambda k: terms.get(k, 0.0))

    def assumptions(self) -> list[str]:
        out = [
            f"GPU {self.gpu.get('pattern')}: {self.bw / 1e9:.0f} GB/s ({self.bw_source}), "
            f"{self.gpu['bf16_tflops']} bf16 TFLOP/s dense",
            f"CUDA graphs on for decode batches up to {self.graph_max_bs}, eager above"
            if self.cuda_graph
            else "CUDA graphs off: every kernel launched from the host",
            "overlap scheduler on"
            if self.overlap
            else "overlap scheduler off: scheduler CPU exposed each step",
        ]
        if self.ar:
            out.append(
                f"all-reduce {self.ar['alpha_us']} us + bytes / {self.ar['busbw_gbs']} GB/s ({self.ar['source']})"
            )
        if self.pp > 1:
            out.append(
                f"PP {self.pp}: micro-batches of {self.micro_batch(4096)} (max_running_requests // pp)"
            )
        if self.collapsed:
            out.append("dummy weights + a router bias: every token routed to the same top-k experts")
        elif self.n_experts:
            out.append(
                "uniform top-k routing"
                + (
                    ", EP waits for its busiest rank"
                    if self.experts_per_gpu and self.experts_per_gpu < self.n_experts
                    else ""
                )
            )
        unchecked = self.cost.get("unchecked")
        if unchecked:
            out.append(f"prediction unchecked for this architecture: {unchecked}")
        out.append(
            "priors not yet pinned by a measurement: "
            + ", ".join(k for k, v in CONSTANTS.items() if v[1] == "OPEN")
        )
        return out


def model_for(layout_plan: dict, hardware: dict) -> tuple[SpeedModel | None, str | None]:
    """The layout's speed model, or (None, why) when the GPU is not in the table."""
    name = hardware.get("gpu_name")
    if not name:
        return (
            None,
            f"no speed prediction: gpu_name is not set (gpu_facts fills it; or set it in the inventory, a name in {TABLE_PATH})",
        )
    gpu = gpu_spec(name)
    if not gpu or not gpu.get("bf16_tflops"):
        return (
            None,
            f"no speed prediction: GPU {name!r} has no figures in {TABLE_PATH}; add its bandwidth and TFLOP/s there",
        )
    if not (layout_plan.get("cost") or {}).get("stages"):
        return None, "no speed prediction: the layout has no per-rank cost (it does not fit)"
    return SpeedModel(layout_plan, hardware, gpu), None


def predict(layout_plan: dict, hardware: dict, bench: dict | None) -> tuple[dict | None, str | None]:
    """The plan's `speed` block for one fitting layout at the inventory's benchmark, or (None, why)."""
    model, why = model_for(layout_plan, hardware)
    if model is None:
        return None, why
    bench = bench or {}
    concurrency = [int(x) for x in (bench.get("concurrency") or [1, 2, 4, 8, 16, 32, 64])]
    input_len = int(bench.get("input_len") or 1024)
    output_len = int(bench.get("output_len") or 256)
    kv_tokens = layout_plan.get("kv_tokens")
    by = {str(cc): model.bench_level(cc, input_len, output_len, kv_tokens) for cc in concurrency}
    peak_c = max(by, key=lambda k: by[k]["output_tok_s"])
    single = 1.0 / model.decode_step(1, input_len + output_len / 2)
    running = by[peak_c]["running"]
    return {
        "single_tok_s": round(single, 1),
        "peak_tok_s": by[peak_c]["output_tok_s"],
        "peak_concurrency": int(peak_c),
        "bound": model.bound(running, running * (input_len + output_len / 2)),
        "by_concurrency": {
            k: {"output_tok_s": v["output_tok_s"], "ttft_ms": v["ttft_ms"], "itl_ms": v["itl_ms"]}
            for k, v in by.items()
        },
        "input_len": input_len,
        "output_len": output_len,
        "assumptions": model.assumptions(),
    }, None


def _role_model(pd_plan: dict, role: str, hardware: dict):
    """The speed model of one role of a pd layout (its own plan: cost, KV capacity, flags)."""
    r = pd_plan["pd"][role]
    units = r.get("units") or [{}]
    role_plan = {
        "cost": r.get("cost"),
        "kv_tokens": r.get("kv_tokens"),
        "dummy_weights": pd_plan.get("dummy_weights"),
        "argv": units[0].get("argv") or [],
    }
    hw = {**hardware, "gpu_memory_gib": r.get("gpu_memory_gib") or hardware.get("gpu_memory_gib")}
    return model_for(role_plan, hw)


# What predict_pd reads of each role of a pd plan (beside its units' argv and start wave).
PD_ROLE_KEYS = ("cost", "kv_tokens", "gpu_memory_gib", "replicas", "kv_bytes_per_token")


def pd_inputs(pd_plan: dict) -> dict:
    """The part of a pd plan's `pd` block that predict_pd reads: the planner keeps it in the layout's
    `speed` (which every record keeps), so that calibration predicts a measured pd layout again (the
    whole block holds every unit's environment and files, which a record does not need)."""
    pd = pd_plan["pd"]

    def role(r: dict) -> dict:
        units = [
            {"argv": u.get("argv") or [], "start_wave": u.get("start_wave")} for u in r.get("units") or []
        ]
        return {**{k: r.get(k) for k in PD_ROLE_KEYS}, "units": units}

    return {
        "transfer_backend": pd.get("transfer_backend"),
        "hosts": pd.get("hosts"),
        "prefill": role(pd["prefill"]),
        "decode": role(pd["decode"]),
    }


def _shared_gpus(pd_plan: dict) -> bool:
    """Whether a decode server shares its GPUs with a prefill server: the planner starts such a one
    in a second wave (pd.plan_pd_layout's start_wave)."""
    return any(u.get("start_wave") for u in (pd_plan["pd"].get("decode") or {}).get("units") or [])


def predict_pd(pd_plan: dict, hardware: dict, bench: dict | None) -> tuple[dict | None, str | None]:
    """A pd layout's `speed` block: each pool's rate, the rate-matched throughput, the KV transfer.

    Prefill pool: prompts/s of its replicas, each prefilling one chunk of prompts after another.
    Decode pool: output tok/s of its replicas at their largest batch (max_running_requests, and the
    conversations its KV pool holds). Rate-matched: requests/s = min of the two; the slower pool bounds
    the layout. KV transfer per request: kv_transfer_s(the prefill's bytes per token, input_len, the
    link). A closed loop of c streams: each request costs its prefill slot on the pool (c x the pool's
    time per prompt per cycle at most) or its own TTFT plus output_len decode steps, whichever is longer."""
    models = {}
    for role in ("prefill", "decode"):
        m, why = _role_model(pd_plan, role, hardware)
        if m is None:
            return None, why
        models[role] = m
    bench = bench or {}
    concurrency = [int(x) for x in (bench.get("concurrency") or [1, 2, 4, 8, 16, 32, 64])]
    input_len = int(bench.get("input_len") or 1024)
    output_len = int(bench.get("output_len") or 256)
    pre, dec = pd_plan["pd"]["prefill"], pd_plan["pd"]["decode"]
    p_rep, d_rep = int(pre.get("replicas") or 1), int(dec.get("replicas") or 1)
    mp, md = models["prefill"], models["decode"]

    # the prefill pool: a chunk of whole prompts per batch
    per_batch = max(1, mp.chunk // input_len)
    t_batch = mp.prefill(per_batch * input_len, per_batch)
    prefill_req_s = p_rep * per_batch / t_batch
    prefill_one_s = mp.prefill(input_len, 1)
    # the decode pool: its largest batch (the conversations its KV holds, max_running_requests)
    ctx = input_len + output_len / 2
    running = max(1, int((dec.get("kv_tokens") or 0) // max(1, input_len + output_len)))
    if md.max_running:
        running = min(running, md.max_running)
    step_full = md.decode_step(running, running * ctx)
    decode_tok_s = d_rep * running / step_full
    decode_req_s = decode_tok_s / output_len
    matched_req_s = min(prefill_req_s, decode_req_s)
    link = kv_link(
        hardware,
        (pd_plan.get("pd") or {}).get("transfer_backend"),
        same_host=len(pd_plan["pd"].get("hosts") or [1]) <= 1,
    )
    kv_bpt = pre.get("kv_bytes_per_token")
    transfer_s = kv_transfer_s(kv_bpt, input_len, link["gbs"])
    ttft0 = prefill_one_s + transfer_s + md.decode_step(1, input_len)

    # Roles on the same GPUs take turns on them: a closed loop's cycle holds its prompts' prefill and
    # its decode steps one after the other, not side by side. The link is one more pool: the prompts
    # of a wave share its bandwidth, so the last of c requests has its KV (c - 1) transfers after the
    # first (a lone transfer is in ttft0 already). On the H100, mooncake_tcp's transfer stage took
    # 35.7 ms a request at c1 and 199.9 ms at c16 (per_stage_req_latency_seconds): a queue, not c
    # transfers side by side.
    shared = _shared_gpus(pd_plan)
    by = {}
    for cc in concurrency:
        per_rep = max(1, min(running, math.ceil(cc / d_rep)))
        step = md.decode_step(per_rep, per_rep * ctx)
        link_queue_s = (math.ceil(cc / p_rep) - 1) * transfer_s
        if shared:
            cycle = max(ttft0, cc / prefill_req_s) + link_queue_s + output_len * step
        else:
            cycle = max(ttft0 + link_queue_s + output_len * step, cc / prefill_req_s)
        by[str(cc)] = {
            "output_tok_s": round(cc * output_len / cycle, 1),
            "ttft_ms": round((cycle - output_len * step) * 1e3, 1),
            "itl_ms": round(step * 1e3, 3),
        }
    peak_c = max(by, key=lambda k: by[k]["output_tok_s"])
    limited = "prefill" if prefill_req_s < decode_req_s else "decode"
    return {
        "single_tok_s": round(1.0 / md.decode_step(1, ctx), 1),
        "peak_tok_s": by[peak_c]["output_tok_s"],
        "peak_concurrency": int(peak_c),
        "bound": "prefill_pool" if limited == "prefill" else md.bound(running, running * ctx),
        "by_concurrency": by,
        "input_len": input_len,
        "output_len": output_len,
        "pd": {
            "prefill": {
                "replicas": p_rep,
                "req_s": round(prefill_req_s, 2),
                "input_tok_s": round(prefill_req_s * input_len, 1),
                "prefill_ms": round(prefill_one_s * 1e3, 2),
            },
            "decode": {
                "replicas": d_rep,
                "running": running,
                "output_tok_s": round(decode_tok_s, 1),
                "req_s": round(decode_req_s, 2),
            },
            "rate_matched": {
                "req_s": round(matched_req_s, 2),
                "output_tok_s": round(matched_req_s * output_len, 1),
                "limited_by": limited,
            },
            "kv_transfer": {
                "ms_per_request": round(transfer_s * 1e3, 3),
                "bytes_per_request": int((kv_bpt or 0) * input_len),
                "link": link,
            },
            "ttft_ms_single": round(ttft0 * 1e3, 1),
        },
        "assumptions": [
            f"pd: prefill pool {p_rep} x {mp.chunk}-token chunks, decode pool {d_rep} x {running} running "
            "(KV pool / (input + output))",
            f"pd: KV transfer {kv_bpt} B/token (the plan's, per rank) over {link['name']} at {link['gbs']:g} GB/s "
            f"({link['source']})",
            *(
                [
                    "pd: prefill and decode servers share GPUs: each cycle's prefill and decode steps run in turn"
                ]
                if shared
                else []
            ),
            # what real SGLang has checked of this model (make bench-predict, group other-gpu)
            "pd: checked on real SGLang only on one H100 (Qwen1.5-MoE, mooncake_tcp, prefill and decode on "
            "one shared GPU; c16 within 2-6 % on three leases): RDMA and NVLink links, pools on GPUs of "
            "their own and several replicas are unchecked",
            *md.assumptions(),
        ],
    }, None
