"""Per-layout timing of the simulated engine: the planner's speed model, nothing of its own.

Every decode step and prefill batch takes what `sglang_layouts.speed` (docs/cost-model.md) predicts
for this layout on the simulated host (SGLANG_SIM_GPU_NAME, default the seed's RTX PRO 6000
Blackwell). Tests that need a fixed pace set SGLANG_SIM_DECODE_STEP_MS (any batch size) and
SGLANG_SIM_PREFILL_MS_PER_TOKEN (then a prefill batch takes one decode step plus that per token).
"""

from __future__ import annotations

import os

from sglang_layouts.speed import SpeedModel, model_for

GIB = 1 << 30

# The simulator's default host is the seed's box.
DEFAULT_GPU_NAME = "NVIDIA RTX PRO 6000 Blackwell Server Edition"


def env_float(name: str, default: float | None) -> float | None:
    raw = os.environ.get(name)
    if raw in (None, ""):
        return default
    return float(raw)


class SimCost:
    """The speed model of one layout, with the fixed-pace overrides tests use."""

    def __init__(
        self, model: SpeedModel | None, fixed_step_s: float | None, prefill_per_token_s: float | None
    ):
        self.model = model
        self.fixed_step_s = fixed_step_s
        self.prefill_per_token_s = prefill_per_token_s

    @property
    def pp(self) -> int:
        return self.model.pp if self.model else 1

    def decode_step(self, batch: int, kv_tokens_in_use: int = 0) -> float:
        """Seconds for one decode step of `batch` running requests."""
        if self.fixed_step_s is not None:
            return self.fixed_step_s
        if batch <= 0 or self.model is None:
            return 0.0
        return self.model.decode_step(batch, kv_tokens_in_use)

    def prefill(self, new_tokens: int, batch: int) -> float:
        """Seconds for one prefill batch of `batch` requests holding `new_tokens` input tokens."""
        if self.prefill_per_token_s is not None or self.model is None:
            return self.decode_step(batch) + new_tokens * (self.prefill_per_token_s or 0.0)
        return self.model.prefill(new_tokens, batch)

    def describe(self) -> dict:
        m = self.model
        return {
            "source": "module_utils/sglang_layouts/speed.py",
            "fixed_step_ms": None if self.fixed_step_s is None else self.fixed_step_s * 1e3,
            "prefill_ms_per_token": None
            if self.prefill_per_token_s is None
            else self.prefill_per_token_s * 1e3,
            "assumptions": m.assumptions() if m else [],
            "decode_step_ms": {str(b): round(self.decode_step(b) * 1e3, 3) for b in (1, 8, 64)},
        }


def from_plan(layout_plan: dict, hardware: dict) -> SimCost:
    """The simulated timing of the planner's layout plan on the simulated hardware."""
    hw = {**hardware, "gpu_name": hardware.get("gpu_name") or DEFAULT_GPU_NAME}
    model, _why = model_for(layout_plan, hw)
    fixed = env_float("SGLANG_SIM_DECODE_STEP_MS", None)
    per_token = env_float("SGLANG_SIM_PREFILL_MS_PER_TOKEN", None)
    return SimCost(
        model,
        None if fixed is None else fixed * 1e-3,
        None if per_token is None else per_token * 1e-3,
    )
