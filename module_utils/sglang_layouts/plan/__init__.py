"""The planner: inputs, SGLang's parallelism rules, placement, prefill/decode, the layout search."""
