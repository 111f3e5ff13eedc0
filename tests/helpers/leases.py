"""Layouts of a lease as its units ran them."""

DEFAULT_ALLOCATOR = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False"}


def as_ran(layout: dict) -> dict:
    """The lease's layout with the allocator its unit ran with: leases before the plan gave the MXFP4
    path expandable segments (memory.allocator_env) ran PyTorch's default allocator wherever the
    layout's env named none, so a replay of their logs plans them with it said."""
    env = dict(layout.get("env") or {})
    if not {"PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"} & set(env):
        env.update(DEFAULT_ALLOCATOR)
    return {**layout, "env": env}
