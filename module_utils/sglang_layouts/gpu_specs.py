"""Per-GPU figures the planner and the speed model read: one table, every figure with its source.

Pure Python (standard library only), so gpu_facts ships it to the host with gpu.py. A GPU is found
by its nvidia-smi name (``gpu_name``); the first pattern that matches wins, so specific names come
first. Figures: memory bandwidth in GB/s, dense (not sparse) tensor-core TFLOP/s for bf16 and fp8.
A GPU without FLOP/s figures gets a bandwidth (for gpu_facts) but no speed prediction: extend
GPU_SPECS below (docs/cost-model.md says what each field means).
"""

from __future__ import annotations

import re

H200_DATASHEET = "https://www.nvidia.com/en-us/data-center/h200/ (H200 SXM: 4.8 TB/s; BF16 1979, FP8 3958 TFLOPS with sparsity)"
H100_DATASHEET = "https://www.nvidia.com/en-us/data-center/h100/ (SXM: 3.35 TB/s; PCIe: 2 TB/s; NVL: 3.9 TB/s; BF16/FP8 with sparsity)"
B200_DATASHEET = "https://www.nvidia.com/en-us/data-center/hgx/ (HGX B200, 8 GPUs: 64 TB/s; FP16/BF16 36 PF, FP8 72 PF with sparsity)"
RTX_PRO_6000_DATASHEET = (
    "https://www.nvidia.com/en-us/data-center/rtx-pro-6000-blackwell-server-edition/ "
    "(96 GB GDDR7, 512-bit, 1792 GB/s; 4 PFLOPS FP4 with sparsity: FP8 1000, BF16 500 dense by halving)"
)
L40S_DATASHEET = (
    "https://www.nvidia.com/en-us/data-center/l40s/ (864 GB/s; BF16 733, FP8 1466 TFLOPS with sparsity)"
)
A100_DATASHEET = "https://www.nvidia.com/en-us/data-center/a100/ (80GB SXM 2039 GB/s, PCIe 1935, 40GB 1555; BF16 312 dense)"

# (pattern on the nvidia-smi name, figures). Dense TFLOP/s = the datasheet's sparse figure / 2.
GPU_SPECS: tuple[tuple[str, dict], ...] = (
    ("GH200", {"bandwidth_gbs": 4000, "bf16_tflops": 989, "fp8_tflops": 1979, "source": H200_DATASHEET}),
    ("H200", {"bandwidth_gbs": 4800, "bf16_tflops": 989, "fp8_tflops": 1979, "source": H200_DATASHEET}),
    ("H100 NVL", {"bandwidth_gbs": 3900, "bf16_tflops": 835, "fp8_tflops": 1671, "source": H100_DATASHEET}),
    ("H100 PCIe", {"bandwidth_gbs": 2000, "bf16_tflops": 756, "fp8_tflops": 1513, "source": H100_DATASHEET}),
    ("H100|H800", {"bandwidth_gbs": 3350, "bf16_tflops": 989, "fp8_tflops": 1979, "source": H100_DATASHEET}),
    ("B300|GB300", {"bandwidth_gbs": 8000, "source": B200_DATASHEET}),
    ("B200", {"bandwidth_gbs": 8000, "bf16_tflops": 2250, "fp8_tflops": 4500, "source": B200_DATASHEET}),
    (
        "RTX PRO 6000 Blackwell",
        {"bandwidth_gbs": 1792, "bf16_tflops": 500, "fp8_tflops": 1000, "source": RTX_PRO_6000_DATASHEET},
    ),
    ("A100.*80GB.*PCIe", {"bandwidth_gbs": 1935, "bf16_tflops": 312, "source": A100_DATASHEET}),
    ("A100-SXM4-80GB|A100 80GB", {"bandwidth_gbs": 2039, "bf16_tflops": 312, "source": A100_DATASHEET}),
    ("A100", {"bandwidth_gbs": 1555, "bf16_tflops": 312, "source": A100_DATASHEET}),
    ("L40S", {"bandwidth_gbs": 864, "bf16_tflops": 362, "fp8_tflops": 733, "source": L40S_DATASHEET}),
    (
        "RTX 6000 Ada",
        {"bandwidth_gbs": 960, "source": "https://www.nvidia.com/en-us/design-visualization/rtx-6000/"},
    ),
)

TABLE_PATH = "module_utils/sglang_layouts/gpu_specs.py (GPU_SPECS)"


def gpu_spec(name: str | None) -> dict | None:
    """The figures of the GPU named `name` (nvidia-smi's name, or a part of it), None when unknown."""
    if not name:
        return None
    for pattern, figures in GPU_SPECS:
        if re.search(pattern, str(name), re.IGNORECASE):
            return {"pattern": pattern, **figures}
    return None
