"""Test plumbing shared by tests/unit, tests/integration and tests/conformance (one copy each):

- playbook: the playbook runner (ansible-runner), its failed messages and task results
- ansible_module: one module of library/ run by `ansible localhost -m`
- net: free_port, listening (a held port)
- fake_http: the JSON handler and loopback server every fake engine builds on
- engine_fakes: SGLang and vLLM stand-ins for the readiness gate, the process state, the gate itself
- bench_server: the streaming SGLang stand-in of the load generator's tests (it can compile, i.e. stall, on a new batch size)
- log_replay: a real engine log replayed with its own timing
- records: result records for the report's tests
- demo: the demo host (seed box, serving settings) and a Kimi K2.6 plan
- gpu_fakes: an nvidia-smi that replays a recording
- procs: running another venv's Python without this one's leaking in
- router: a layout behind the real sglang-router, deployed by the playbooks (its venv, ports, extra vars)
"""
