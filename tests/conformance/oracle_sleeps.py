"""The stand-in both schedule oracles run: a load generator's own sleeps, recorded instead of slept.

Imported by oracle_bench_serving_schedule.py (SGLang's oracle python) and oracle_vllm_schedule.py
(the vLLM venv's python), which run as scripts from this folder; standard library only.
"""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def recorded_sleeps(module, clock: float | None = None):
    """module.asyncio.sleep records each delay in the yielded list (and module.time.time returns
    clock, when given) for the block; both are put back after it."""
    delays: list[float] = []

    async def record(delay, *args, **kwargs):
        delays.append(float(delay))

    real_sleep = module.asyncio.sleep
    real_time = module.time.time if clock is not None else None
    module.asyncio.sleep = record
    if clock is not None:
        module.time.time = lambda: clock
    try:
        yield delays
    finally:
        module.asyncio.sleep = real_sleep
        if real_time is not None:
            module.time.time = real_time


async def count_requests(requests, pad_delays=None) -> int:
    """Iterate a load generator's request stream; with pad_delays (the recorded list), a request
    that slept nothing gets a delay of 0.0 so request i's delay stays at index i."""
    n = 0
    async for _ in requests:
        if pad_delays is not None and len(pad_delays) < n + 1:
            pad_delays.append(0.0)
        n += 1
    return n
