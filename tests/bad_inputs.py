"""The bad-input matrix: every case as the Ansible variables a user would write (-e or inventory).

One table, three readers: tests/unit/test_bad_inputs.py runs each case through the planner,
tests/integration/test_plan.py runs the plan.yml cases through ansible-runner in one run (one
inventory host per case), and ci/reliability.py writes them into docs/reliability.md and
prints that table with pass/fail counts (make reliability).

expect:
  error      the planner (so plan.yml, deploy.yml and sweep.yml) stops with a message holding `needles`
  invalid    the plan has the layout with verdict invalid and a reason holding `needles`
  sanitised  the plan goes through; `check` names what must (not) be in the plan and the unit
"""

from __future__ import annotations

from dataclasses import dataclass, field

LAYOUT = {"name": "tp8", "tp": 8}
SECRET = "hf_s3cretTOKENvalue"


@dataclass
class Case:
    id: str
    what: str
    vars: dict
    expect: str
    needles: list = field(default_factory=list)
    # plan.yml through ansible-runner too (False: JSON extra vars cannot carry it, or it needs a single-host cluster)
    plan_yml: bool = True
    # files the case needs, written into a temporary folder whose path replaces {tmp}
    files: dict = field(default_factory=dict)
    check: dict = field(default_factory=dict)
    # further tests of the same input on another path (deploy.yml, a molecule host)
    also: list = field(default_factory=list)


def _lay(**kw):
    return [{**LAYOUT, **kw}]


CASES = [
    # --- values that reach argv, a unit file or an environment (issue 15: the 6 that got through)
    Case(
        "newline-in-args",
        "a newline in an args: value (would add ExecStartPre= to the unit)",
        {"sglang_layouts": _lay(args={"served_model_name": "m\nExecStartPre=/bin/touch /tmp/pwned"})},
        "error",
        ["layout tp8", "args.served_model_name", "a newline", "one line"],
    ),
    Case(
        "newline-in-env",
        "a newline in an env: value (would add a directive through Environment=)",
        {"sglang_layouts": _lay(env={"FOO": "bar\nExecStartPre=/bin/touch /tmp/pwned2"})},
        "error",
        ["layout tp8", "env.FOO", "a newline", "one line"],
        also=[
            "tests/integration/test_service_process.py::test_bad_deploys_change_nothing_and_the_running_layout_keeps_running"
        ],
    ),
    Case(
        "space-in-env-name",
        "an environment name with a space",
        {"sglang_layouts": _lay(env={"A B": "1"})},
        "error",
        ["layout tp8", "env name 'A B'", "Write A_B instead"],
    ),
    Case(
        "hf-token-in-env",
        "HF_TOKEN in env: (gated models need it)",
        {"sglang_layouts": _lay(env={"HF_TOKEN": SECRET})},
        "sanitised",
        check={"masked": "HF_TOKEN", "absent": SECRET},
    ),
    Case(
        "unit-name-collision",
        "layouts named 'a.b' and 'a-b' (one unit name)",
        {"sglang_layouts": [{"name": "a.b", "tp": 8}, {"name": "a-b", "tp": 8}]},
        "error",
        ["'a.b'", "'a-b'", "sglang-kimi-k2-6-a-b.service", "Rename one"],
        also=[
            "tests/integration/test_service_process.py::test_bad_deploys_change_nothing_and_the_running_layout_keeps_running"
        ],
    ),
    Case(
        "port-collision",
        "two layouts on disjoint GPUs with the same port:",
        {
            "sglang_layouts": [
                {"name": "left", "tp": 4, "gpus": [0, 1, 2, 3], "port": 31000},
                {"name": "right", "tp": 4, "gpus": [4, 5, 6, 7], "port": 31000},
            ]
        },
        "error",
        ["left", "right", "port 31000", "Give right its own port:"],
    ),
    # --- more of the same family
    Case(
        "cr-in-env",
        "a carriage return in an env: value",
        {"sglang_layouts": _lay(env={"FOO": "a\rb"})},
        "error",
        ["layout tp8", "env.FOO", "a carriage return"],
    ),
    Case(
        "nul-in-args",
        "a NUL byte in an args: value",
        {"sglang_layouts": _lay(args={"served_model_name": "m\x00x"})},
        "error",
        ["layout tp8", "args.served_model_name", "a NUL byte"],
        plan_yml=False,
    ),
    Case(
        "newline-in-layout-name",
        "a newline in a layout's name",
        {"sglang_layouts": [{"name": "tp8\nExecStartPre=/bin/true", "tp": 8}]},
        "error",
        ["name contains a newline"],
    ),
    Case(
        "newline-in-model-name",
        "a newline in sglang_model.name",
        {
            "sglang_model": {
                "name": "kimi\nUser=root",
                "path": "/models/kimi",
                "hf_config_file": "{repo}/models/kimi-k2.6/config.json",
            }
        },
        "error",
        ["sglang_model:", "name contains a newline"],
    ),
    Case(
        "digit-first-env-name",
        "an environment name that starts with a digit",
        {"sglang_layouts": _lay(env={"1FOO": "1"})},
        "error",
        ["layout tp8", "env name '1FOO'", "Write _1FOO instead"],
    ),
    Case(
        "dash-in-env-name",
        "an environment name with a dash",
        {"sglang_layouts": _lay(env={"MY-VAR": "1"})},
        "error",
        ["layout tp8", "env name 'MY-VAR'", "Write MY_VAR instead"],
    ),
    Case(
        "custom-secret-env",
        "a secret named in sglang_secret_env",
        {"sglang_secret_env": ["MY_CRED"], "sglang_layouts": _lay(env={"MY_CRED": SECRET})},
        "sanitised",
        check={"masked": "MY_CRED", "absent": SECRET},
    ),
    Case(
        "secret-env-not-a-list",
        "sglang_secret_env given as a string",
        {"sglang_secret_env": "HF_TOKEN"},
        "error",
        ["sglang_secret_env must be a list"],
    ),
    Case(
        "unit-name-case",
        "layouts named TP8 and tp8 (one unit name)",
        {"sglang_layouts": [{"name": "TP8", "tp": 8}, {"name": "tp8", "tp": 8}]},
        "error",
        ["'TP8'", "'tp8'", "sglang-kimi-k2-6-tp8.service"],
    ),
    Case(
        "name-without-letters",
        "a layout name with no letter or digit",
        {"sglang_layouts": [{"name": "!!!", "tp": 8}]},
        "error",
        ["sglang_layouts '!!!'", "name has characters", "name: tp8"],
    ),
    Case(
        "default-port-collision",
        "two layouts on disjoint GPUs, both on the default port",
        {
            "sglang_layouts": [
                {"name": "left", "tp": 4, "gpus": [0, 1, 2, 3]},
                {"name": "right", "tp": 4, "gpus": [4, 5, 6, 7]},
            ]
        },
        "error",
        ["left", "right", "port 30000", "port: 30001"],
    ),
    # --- layout keys and values
    Case(
        "duplicate-names",
        "two layouts with the same name",
        {"sglang_layouts": [LAYOUT, LAYOUT]},
        "error",
        ["layout names must be unique", "tp8"],
    ),
    Case(
        "typo-in-key",
        "a layout key with a typo (tpp)",
        {"sglang_layouts": _lay(tpp=2)},
        "error",
        ["layout tp8", "unknown key(s) tpp", "did you mean tp"],
    ),
    Case(
        "unknown-flag",
        "an args: flag the pinned SGLang does not have",
        {"sglang_layouts": _lay(args={"kv_cache_dtyp": "fp8_e4m3"})},
        "error",
        ["layout tp8", "no flag --kv-cache-dtyp", "did you mean --kv-cache-dtype"],
    ),
    Case(
        "structural-flag-in-args",
        "--tp-size under args: instead of tp:",
        {"sglang_layouts": _lay(args={"tp_size": 4})},
        "error",
        ["layout tp8", "set --tp-size with"],
    ),
    Case(
        "bad-flag-choice",
        "an args: value outside the flag's choices",
        {"sglang_layouts": _lay(args={"kv_cache_dtype": "int3"})},
        "error",
        ["layout tp8", "--kv-cache-dtype must be one of"],
    ),
    Case(
        "unknown-engine",
        "an engine name that does not exist",
        {"sglang_layouts": _lay(engine="sglangx")},
        "error",
        ["layout tp8", "engine 'sglangx'", "use one of sglang, sim, vllm"],
    ),
    Case(
        "tp-not-a-number",
        "tp: eight",
        {"sglang_layouts": _lay(tp="eight")},
        "error",
        ["layout tp8: tp must be an integer"],
    ),
    Case(
        "tp-zero",
        "tp: 0",
        {"sglang_layouts": _lay(tp=0)},
        "error",
        ["layout tp8: tp must be an integer >= 1"],
    ),
    Case(
        "port-out-of-range",
        "port: 70000",
        {"sglang_layouts": _lay(port=70000)},
        "error",
        ["layout tp8: port 70000 is out of range", "1024-65535"],
    ),
    Case(
        "args-not-a-mapping",
        "args: given as a string",
        {"sglang_layouts": _lay(args="--foo 1")},
        "error",
        ["layout tp8: args must be a mapping"],
    ),
    Case(
        "env-not-a-mapping",
        "env: given as a list",
        {"sglang_layouts": _lay(env=["A=1"])},
        "error",
        ["layout tp8: env must be a mapping"],
    ),
    Case(
        "layout-without-name",
        "a layout with no name:",
        {"sglang_layouts": [{"tp": 8}]},
        "error",
        ["sglang_layouts entry 1 has no name", "name: tp8"],
    ),
    Case(
        "layouts-empty",
        "sglang_layouts: []",
        {"sglang_layouts": []},
        "error",
        ["sglang_layouts must be a non-empty list"],
    ),
    # --- layouts that plan as invalid (a verdict with the reason, no unit)
    Case(
        "gpus-twice",
        "gpus lists a device twice",
        {"sglang_layouts": [{"name": "tp4", "tp": 4, "gpus": [0, 0, 1, 1]}]},
        "invalid",
        ["tp4: gpus lists a device twice"],
    ),
    Case(
        "gpus-missing-device",
        "gpus names a device the host does not have",
        {"sglang_layouts": [{"name": "tp2", "tp": 2, "gpus": [8, 9]}]},
        "invalid",
        ["tp2: gpus [8, 9] do not exist"],
    ),
    Case(
        "gpus-wrong-count",
        "gpus lists fewer devices than the layout uses",
        {"sglang_layouts": _lay(gpus=[0, 1])},
        "invalid",
        ["tp8: gpus lists 2 devices but the layout uses 8"],
    ),
    Case(
        "ep-larger-than-tp",
        "ep larger than tp (tp 2, ep 4)",
        {"sglang_layouts": [{"name": "tp2ep4", "tp": 2, "ep": 4}]},
        "invalid",
        ["tp2ep4: ep (4) is larger than tp (2)"],
    ),
    Case(
        "ep-not-dividing-tp",
        "ep that does not divide tp (tp 8, ep 3)",
        {"sglang_layouts": _lay(ep=3)},
        "invalid",
        ["tp8: ep (3) must divide tp (8)"],
    ),
    Case(
        "dp-without-dp-attention",
        "dp 2 without dp-attention over more GPUs than the host has",
        {"sglang_layouts": _lay(dp=2)},
        "invalid",
        ["tp8: needs 16 GPUs", "x dp"],
    ),
    Case(
        "nnodes-not-dividing",
        "nnodes 3 for tp x pp = 8",
        {"sglang_layouts": _lay(nnodes=3)},
        "invalid",
        ["tp8: tp x pp (8) must be divisible by nnodes (3)"],
    ),
    Case(
        "replicas-with-gpus",
        "replicas with a fixed gpus: list",
        {"sglang_layouts": [{"name": "r", "tp": 2, "replicas": 2, "gpus": [0, 1, 2, 3]}]},
        "invalid",
        ["r: replicas place themselves on GPU blocks; drop gpus:"],
    ),
    Case(
        "mem-fraction-out-of-range",
        "sglang_mem_fraction_static 1.5",
        {"sglang_mem_fraction_static": 1.5},
        "invalid",
        ["mem_fraction_static must be between 0 and 1"],
    ),
    Case(
        "context-too-long",
        "sglang_context_length above the model's max_position_embeddings",
        {"sglang_context_length": 100000000},
        "invalid",
        ["context_length 100000000 exceeds the model's max_position_embeddings"],
    ),
    # --- the model and the host
    Case(
        "unknown-architecture",
        "a model architecture the planner does not know",
        {"sglang_model": {"name": "foo", "path": "/models/foo", "hf_config_file": "{tmp}/foo.json"}},
        "error",
        ["FooForCausalLM"],
        files={"foo.json": '{"architectures": ["FooForCausalLM"], "hidden_size": 8}'},
    ),
    Case(
        "config-not-json",
        "a config.json that does not parse",
        {"sglang_model": {"name": "broken", "path": "/models/broken", "hf_config_file": "{tmp}/broken.json"}},
        "error",
        ["broken.json is not valid JSON"],
        files={"broken.json": '{"architectures": ["DeepseekV3ForCausalLM",'},
    ),
    Case(
        "gpu-count-missing",
        "gpu_count not set for the host",
        {"gpu_count": ""},
        "error",
        ["gpu_count is not set for this host"],
    ),
    Case(
        "public-host-without-key",
        "sglang_host 0.0.0.0 with no API key",
        {"sglang_host": "0.0.0.0"},
        "error",
        ["sglang_host is 0.0.0.0", "sglang_api_key"],
    ),
]

# Inputs the planner does not see, tested where they are refused: (id, what, expect, tests).
OTHER_CASES = [
    (
        "run-id-with-slash",
        "a run id with a slash (-e run_id=a/b)",
        "error before any host: run id 'a/b' cannot name a results folder",
        [
            "tests/integration/test_sweep.py::test_bad_run_level_inputs_stop_before_any_host",
            "tests/unit/test_results.py::test_unsafe_names_are_refused",
        ],
    ),
    (
        "results-dir-not-writable",
        "a results dir that cannot be written",
        "error before any host, naming the folder",
        ["tests/integration/test_sweep.py::test_bad_run_level_inputs_stop_before_any_host"],
    ),
    (
        "unreadable-run-dir",
        "the run dir (engine files) in a folder the service user cannot enter (a clone under /root, 0700)",
        "preflight refusal naming the folder, its mode and the fix; nothing written, nothing stopped",
        [
            "tests/integration/test_service_process.py::test_bad_deploys_change_nothing_and_the_running_layout_keeps_running",
            "tests/integration/test_faults.py::test_preflight_names_the_folder_the_service_user_cannot_enter",
        ],
    ),
]


def materialise(case: Case, tmp, repo) -> dict:
    """The case's variables with {tmp} and {repo} filled in, and its files written under tmp."""
    import json

    for name, text in case.files.items():
        (tmp / name).write_text(text)

    def fill(v):
        if isinstance(v, str):
            return v.replace("{tmp}", str(tmp)).replace("{repo}", str(repo))
        if isinstance(v, dict):
            return {k: fill(x) for k, x in v.items()}
        if isinstance(v, list):
            return [fill(x) for x in v]
        return v

    return json.loads(json.dumps(fill(case.vars)))


def planner_inputs(variables: dict, repo) -> dict:
    """What group_vars/all/plan.yml would hand the planner for the demo host with these variables."""
    model = variables.get("sglang_model", {"name": "kimi-k2.6", "path": str(repo / "models" / "kimi-k2.6")})
    serving = {
        "engine": "sim",
        "mem_fraction_static": variables.get("sglang_mem_fraction_static", 0.88),
        "context_length": variables.get("sglang_context_length", 32768),
        "max_running_requests": 64,
        "attention_backend": "triton",
        "grammar_backend": "none",
        "trust_remote_code": True,
        "host": variables.get("sglang_host", "127.0.0.1"),
        "base_port": 30000,
        "api_key_set": bool(variables.get("sglang_api_key")),
        "secret_env": variables.get("sglang_secret_env", ["*TOKEN*", "*KEY*", "*SECRET*", "*PASSWORD*"]),
    }
    return {
        "host": "seed-box",
        "model": model,
        "layouts": variables.get("sglang_layouts", [LAYOUT]),
        "hardware": {
            "gpu_count": variables.get("gpu_count", 8),
            "gpu_memory_gib": 94.97,
            "gpu_interconnect": "pcie",
        },
        "serving": serving,
        "cluster": {"group": "sglang_hosts", "hosts": ["seed-box"]},
    }
