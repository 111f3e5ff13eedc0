"""The bad-input matrix: every case as the Ansible variables a user would write (-e or inventory).

One table, three readers: tests/unit/test_bad_inputs.py runs each case through the planner,
tests/integration/test_plan.py runs the plan.yml cases through ansible-runner in one run (one
inventory host per case), and ci/reliability.py writes them into docs/reliability.md and
prints that table with pass/fail counts (make reliability).

expect:
  error      the planner (so plan.yml, deploy.yml and sweep.yml) stops with a message holding `needles`,
             of at most two lines, without the secret; plan.yml writes nothing for the host
  invalid    the plan has the layout with verdict invalid and a reason holding `needles`
  sanitised  the plan goes through; `check` names what must (not) be in the plan and the unit
  accepted   the plan goes through; `check` may name argv that must be there (argv_has) and a value that
             must not be anywhere in the plan (absent)

A variable `_cluster` (not an Ansible variable) gives the host group of a case that spans hosts;
such cases run through the planner only (plan.yml's test puts every case's host in one group).
"""

from __future__ import annotations

from dataclasses import dataclass, field

LAYOUT = {"name": "tp8", "tp": 8}
SECRET = "hf_s3cretTOKENvalue"
# A dense model's config.json (Llama 3.1 70B's published values), edited by the config cases.
LLAMA_CONFIG = (
    '{"architectures": ["LlamaForCausalLM"], "hidden_size": 8192, "intermediate_size": 28672, '
    '"max_position_embeddings": 131072, "num_attention_heads": 64, "num_hidden_layers": 80, '
    '"num_key_value_heads": 8, "torch_dtype": "bfloat16", "vocab_size": 128256}'
)


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
    # --- the layout search (sglang_layout_search, issue 26): refused before anything is planned
    Case(
        "search-unknown-objective",
        "sglang_layout_search with an objective that does not exist",
        {"sglang_layout_search": {"objective": "fastest"}},
        "error",
        ["sglang_layout_search.objective 'fastest' does not exist", "single, peak, goodput, cost_per_mtok"],
    ),
    Case(
        "search-unknown-knob",
        "sglang_layout_search with a knob the pinned SGLang's flag table lacks",
        {"sglang_layout_search": {"knobs": {"kv_cache_dtyp": ["fp8_e4m3"]}}},
        "error",
        [
            "sglang_layout_search.knobs.kv_cache_dtyp",
            "no flag --kv-cache-dtyp",
            "did you mean --kv-cache-dtype",
        ],
    ),
    Case(
        "search-no-valid-layout",
        "sglang_layout_search whose range yields no valid layout (Kimi K2.6 on one GPU)",
        {
            "sglang_layout_search": {
                "gpus": 1,
                "vary": {"tp": [1], "pp": [1], "dp": [1], "ep": [1], "nnodes": [1]},
            }
        },
        "error",
        ["yields no valid layout", "1 does_not_fit", "CUDA runs out of memory while loading the weights"],
    ),
    Case(
        "search-budget-zero",
        "sglang_layout_search with a measurement budget below 1",
        {"sglang_layout_search": {"budget": 0}},
        "error",
        ["sglang_layout_search.budget must be at least 1"],
    ),
]

# --- issue 30: values that walked around the checks, given another way
SECOND_ROUND = [
    # a public bind, wherever it is given
    Case(
        "args-host-public",
        "args: {host: 0.0.0.0} with no API key",
        {"sglang_layouts": _lay(args={"host": "0.0.0.0"})},
        "error",
        ["layout tp8: args.host is 0.0.0.0", "sglang_api_key", "127.0.0.1"],
    ),
    Case(
        "args-host-ipv6-any",
        "args: {host: '::'} with no API key",
        {"sglang_layouts": _lay(args={"host": "::"})},
        "error",
        ["layout tp8: args.host is ::", "sglang_api_key"],
    ),
    Case(
        "args-host-dashed",
        "args: {'--host': 0.0.0.0} with no API key",
        {"sglang_layouts": _lay(args={"--host": "0.0.0.0"})},
        "error",
        ["layout tp8: args.host is 0.0.0.0"],
    ),
    Case(
        "sglang-host-name",
        "sglang_host: a host name (public) with no API key",
        {"sglang_host": "gpu1.example.com"},
        "error",
        ["sglang_host is gpu1.example.com", "sglang_api_key"],
    ),
    Case(
        "args-host-public-with-key",
        "args: {host: 0.0.0.0} with sglang_api_key set",
        {"sglang_api_key": SECRET, "sglang_layouts": _lay(args={"host": "0.0.0.0"})},
        "accepted",
        check={"argv_has": ["--host", "0.0.0.0"], "absent": SECRET},
    ),
    # secrets given as serving flags (the flag table names them) or inside values
    Case(
        "args-api-key",
        "args: {api_key: ...}",
        {"sglang_layouts": _lay(args={"api_key": SECRET})},
        "error",
        ["layout tp8: args.api_key is a credential (--api-key)", "sglang_api_key"],
    ),
    Case(
        "args-api-key-dashed",
        "args: {'--api-key': ...}",
        {"sglang_layouts": _lay(args={"--api-key": SECRET})},
        "error",
        ["args.api_key is a credential", "not shown"],
    ),
    Case(
        "args-admin-api-key",
        "args: {admin_api_key: ...}",
        {"sglang_layouts": _lay(args={"admin_api_key": SECRET})},
        "error",
        ["args.admin_api_key is a credential (--admin-api-key)", "leave it out"],
    ),
    Case(
        "args-ssl-keyfile-password",
        "args: {ssl_keyfile_password: ...}",
        {"sglang_layouts": _lay(args={"ssl_keyfile_password": SECRET})},
        "error",
        ["args.ssl_keyfile_password is a credential (--ssl-keyfile-password)"],
    ),
    Case(
        "args-api-key-vllm",
        "args: {api_key: ...} on a vLLM layout",
        {"sglang_layouts": _lay(engine="vllm", args={"api_key": SECRET})},
        "error",
        ["args.api_key is a credential (--api-key)"],
    ),
    Case(
        "args-hf-token-vllm",
        "args: {hf_token: ...} on a vLLM layout (vLLM's --hf-token)",
        {"sglang_layouts": _lay(engine="vllm", args={"hf_token": SECRET})},
        "error",
        ["args.hf_token is a credential (--hf-token)"],
    ),
    Case(
        "args-url-credential",
        "a password inside a URL in an args: value",
        {"sglang_layouts": _lay(args={"served_model_name": f"https://user:{SECRET}@mirror.example/m"})},
        "error",
        ["args.served_model_name carries a credential", "user:password@"],
    ),
    Case(
        "env-db-passwd",
        "env: {DB_PASSWD: ...} (not *PASSWORD*)",
        {"sglang_layouts": _lay(env={"DB_PASSWD": SECRET})},
        "sanitised",
        check={"masked": "DB_PASSWD", "absent": SECRET},
    ),
    Case(
        "env-url-credential",
        "env: {HF_ENDPOINT: https://user:pw@mirror/} (a password in a URL)",
        {"sglang_layouts": _lay(env={"HF_ENDPOINT": f"https://user:{SECRET}@mirror.example"})},
        "sanitised",
        check={
            "masked": "HF_ENDPOINT",
            "absent": SECRET,
            "value": f"https://user:{SECRET}@mirror.example",
        },
    ),
    Case(
        "env-custom-list-keeps-defaults",
        "sglang_secret_env: [MY_CRED] and env: {HF_TOKEN: ...}",
        {"sglang_secret_env": ["MY_CRED"], "sglang_layouts": _lay(env={"HF_TOKEN": SECRET})},
        "sanitised",
        check={"masked": "HF_TOKEN", "absent": SECRET},
    ),
    Case(
        "env-lowercase-token",
        "env: {hf_token: ...} (lower case)",
        {"sglang_layouts": _lay(env={"hf_token": SECRET})},
        "sanitised",
        check={"masked": "hf_token", "absent": SECRET},
    ),
    Case(
        "env-aws-secret",
        "env: {AWS_SECRET_ACCESS_KEY: ...}",
        {"sglang_layouts": _lay(env={"AWS_SECRET_ACCESS_KEY": SECRET})},
        "sanitised",
        check={"masked": "AWS_SECRET_ACCESS_KEY", "absent": SECRET},
    ),
    Case(
        "env-credentials-name",
        "env: {GCS_CREDENTIALS: ...}",
        {"sglang_layouts": _lay(env={"GCS_CREDENTIALS": SECRET})},
        "sanitised",
        check={"masked": "GCS_CREDENTIALS", "absent": SECRET},
    ),
    Case(
        "env-token-as-list",
        "env: {HF_TOKEN: [...]} (a list)",
        {"sglang_layouts": _lay(env={"HF_TOKEN": [SECRET]})},
        "error",
        ["layout tp8: env.HF_TOKEN must be a string or a number, not a list", "not shown"],
    ),
    Case(
        "env-token-as-mapping",
        "env: {HF_TOKEN: {...}} (a mapping)",
        {"sglang_layouts": _lay(env={"HF_TOKEN": {"v": SECRET}})},
        "error",
        ["env.HF_TOKEN must be a string or a number, not a mapping"],
    ),
    Case(
        "env-token-newline",
        "a newline inside HF_TOKEN's value",
        {"sglang_layouts": _lay(env={"HF_TOKEN": SECRET + "\nX=1"})},
        "error",
        ["env.HF_TOKEN contains a newline", "not shown"],
    ),
    Case(
        "nameless-layout-with-secret",
        "a layout with no name whose env holds a secret",
        {"sglang_layouts": [{"tp": 8, "env": {"HF_TOKEN": SECRET}}]},
        "error",
        ["sglang_layouts entry 1 has no name"],
    ),
    Case(
        "secret-env-int",
        "sglang_secret_env: 5",
        {"sglang_secret_env": 5},
        "error",
        ["sglang_secret_env must be a list", "not a number"],
    ),
    Case(
        "secret-env-list-of-int",
        "sglang_secret_env: [1, 2]",
        {"sglang_secret_env": [1, 2]},
        "error",
        ["sglang_secret_env must be a list"],
    ),
    Case(
        "extra-env-newline",
        "a newline in sglang_service_extra_env",
        {"sglang_service_extra_env": {"A": "x\nExecStartPre=/bin/true"}},
        "error",
        ["sglang_service_extra_env.A contains a newline"],
    ),
    Case(
        "extra-env-bad-name",
        "sglang_service_extra_env with a dash in a name",
        {"sglang_service_extra_env": {"A-B": "1"}},
        "error",
        ["sglang_service_extra_env name 'A-B'", "Write A_B instead"],
    ),
    Case(
        "extra-env-not-a-mapping",
        "sglang_service_extra_env given as a list",
        {"sglang_service_extra_env": ["A=1"]},
        "error",
        ["sglang_service_extra_env must be a mapping", "not a list"],
    ),
    Case(
        "extra-env-cuda-visible-devices",
        "sglang_service_extra_env sets CUDA_VISIBLE_DEVICES",
        {"sglang_service_extra_env": {"CUDA_VISIBLE_DEVICES": "0"}},
        "error",
        ["sglang_service_extra_env: CUDA_VISIBLE_DEVICES would override", "gpus:"],
    ),
    Case(
        "extra-env-secret-list",
        "sglang_service_extra_env: {HF_TOKEN: [...]}",
        {"sglang_service_extra_env": {"HF_TOKEN": [SECRET]}},
        "error",
        ["sglang_service_extra_env.HF_TOKEN must be a string or a number", "not shown"],
    ),
    # ports
    Case(
        "base-port-too-high",
        "sglang_base_port: 70000",
        {"sglang_base_port": 70000},
        "error",
        ["sglang_base_port 70000 is out of range", "65535"],
    ),
    Case(
        "base-port-privileged",
        "sglang_base_port: 80 (the service user is unprivileged)",
        {"sglang_base_port": 80},
        "error",
        ["sglang_base_port 80 is out of range", "below 1024"],
    ),
    Case(
        "base-port-zero",
        "sglang_base_port: 0",
        {"sglang_base_port": 0},
        "error",
        ["sglang_base_port 0 is out of range"],
    ),
    Case(
        "base-port-text",
        "sglang_base_port: http",
        {"sglang_base_port": "http"},
        "error",
        ["sglang_base_port must be a port number"],
    ),
    Case(
        "layout-port-privileged",
        "port: 80",
        {"sglang_layouts": _lay(port=80)},
        "error",
        ["layout tp8: port 80 is out of range", "below 1024"],
    ),
    Case(
        "layout-port-negative",
        "port: -1",
        {"sglang_layouts": _lay(port=-1)},
        "error",
        ["layout tp8: port -1 is out of range"],
    ),
    Case(
        "layout-port-float",
        "port: 30000.5",
        {"sglang_layouts": _lay(port=30000.5)},
        "error",
        ["layout tp8: port must be a port number"],
    ),
    Case(
        "layout-port-bool",
        "port: true",
        {"sglang_layouts": _lay(port=True)},
        "error",
        ["layout tp8: port must be a port number"],
    ),
    Case(
        "replicas-port-near-top",
        "replicas: 2 at port 65000 (the router's metrics would be 66000)",
        {"sglang_layouts": [{"name": "r", "tp": 4, "replicas": 2, "port": 65000}]},
        "error",
        ["layout r: port 65000 leaves no room", "at most 64535"],
    ),
    Case(
        "replicas-base-port-near-top",
        "replicas: 2 on sglang_base_port 65534",
        {"sglang_base_port": 65534, "sglang_layouts": [{"name": "r", "tp": 4, "replicas": 2}]},
        "error",
        ["layout r: sglang_base_port 65534 leaves no room"],
    ),
    Case(
        "dist-init-port-too-high",
        "sglang_dist_init_port: 70000",
        {"sglang_dist_init_port": 70000},
        "error",
        ["sglang_dist_init_port 70000 is out of range"],
    ),
    Case(
        "dist-init-port-privileged",
        "sglang_dist_init_port: 443",
        {"sglang_dist_init_port": 443},
        "error",
        ["sglang_dist_init_port 443 is out of range", "below 1024"],
    ),
    Case(
        "dist-init-port-is-http-port",
        "a two-node layout whose port: is sglang_dist_init_port",
        {
            "_cluster": ["n0", "n1"],
            "sglang_layouts": [{"name": "two", "tp": 16, "ep": 16, "nnodes": 2, "port": 50000}],
        },
        "error",
        ["layout two: the rendezvous port sglang_dist_init_port 50000", "HTTP port"],
        plan_yml=False,
    ),
    Case(
        "dist-init-port-is-base-port",
        "sglang_base_port equal to sglang_dist_init_port for a two-node layout",
        {
            "_cluster": ["n0", "n1"],
            "sglang_base_port": 50000,
            "sglang_layouts": [{"name": "two", "tp": 16, "ep": 16, "nnodes": 2}],
        },
        "error",
        ["sglang_dist_init_port 50000 is also node rank 0's HTTP sglang_base_port"],
        plan_yml=False,
    ),
    # the GPU set is the planner's
    Case(
        "env-cuda-visible-devices",
        "env: {CUDA_VISIBLE_DEVICES: ...}",
        {"sglang_layouts": _lay(env={"CUDA_VISIBLE_DEVICES": "0,1"})},
        "error",
        ["layout tp8: CUDA_VISIBLE_DEVICES would override the GPUs", "set gpus:"],
    ),
    Case(
        "env-cuda-visible-devices-with-gpus",
        "env: CUDA_VISIBLE_DEVICES beside gpus:",
        {
            "sglang_layouts": [
                {"name": "tp2", "tp": 2, "gpus": [0, 1], "env": {"CUDA_VISIBLE_DEVICES": "6,7"}}
            ]
        },
        "error",
        ["layout tp2: CUDA_VISIBLE_DEVICES would override"],
    ),
    Case(
        "gpus-not-numbers",
        "gpus: '0,1,x'",
        {"sglang_layouts": [{"name": "tp2", "tp": 2, "gpus": "0,x"}]},
        "error",
        ["layout tp2: gpus entry must be an integer"],
    ),
    Case(
        "gpus-negative",
        "gpus: [-1, 0]",
        {"sglang_layouts": [{"name": "tp2", "tp": 2, "gpus": [-1, 0]}]},
        "error",
        ["layout tp2: gpus entry must be an integer >= 0"],
    ),
    # numbers with a range, wherever given
    Case(
        "args-context-length-negative",
        "args: {context_length: -1}",
        {"sglang_layouts": _lay(args={"context_length": -1})},
        "error",
        ["layout tp8: args.context_length must be a whole number >= 1", "sglang_context_length"],
    ),
    Case(
        "args-context-length-zero",
        "args: {context_length: 0}",
        {"sglang_layouts": _lay(args={"context_length": 0})},
        "error",
        ["args.context_length must be a whole number >= 1"],
    ),
    Case(
        "args-context-length-text",
        "args: {context_length: long}",
        {"sglang_layouts": _lay(args={"context_length": "long"})},
        "error",
        ["args.context_length must be a whole number >= 1", "'long'"],
    ),
    Case(
        "args-max-running-zero",
        "args: {max_running_requests: 0}",
        {"sglang_layouts": _lay(args={"max_running_requests": 0})},
        "error",
        ["args.max_running_requests must be a whole number >= 1", "sglang_max_running_requests"],
    ),
    Case(
        "context-length-negative",
        "sglang_context_length: -5",
        {"sglang_context_length": -5},
        "error",
        ["sglang_context_length must be an integer >= 1"],
    ),
    Case(
        "context-length-text",
        "sglang_context_length: abc",
        {"sglang_context_length": "abc"},
        "error",
        ["sglang_context_length must be an integer"],
    ),
    Case(
        "max-running-zero",
        "sglang_max_running_requests: 0",
        {"sglang_max_running_requests": 0},
        "error",
        ["sglang_max_running_requests must be an integer >= 1"],
    ),
    Case(
        "args-context-too-long",
        "args: {context_length: 100000000}",
        {"sglang_layouts": _lay(args={"context_length": 100000000})},
        "invalid",
        ["context_length 100000000 exceeds the model's max_position_embeddings"],
    ),
    Case(
        "mem-fraction-text",
        "sglang_mem_fraction_static: lots",
        {"sglang_mem_fraction_static": "lots"},
        "error",
        ["mem_fraction_static must be a number"],
    ),
    Case(
        "args-mem-fraction-out-of-range",
        "args: {mem_fraction_static: 1.5}",
        {"sglang_layouts": _lay(args={"mem_fraction_static": 1.5})},
        "invalid",
        ["mem_fraction_static must be between 0 and 1"],
    ),
    # args: values SGLang would reject or misread
    Case(
        "args-list-for-one-value",
        "a list for a one-value flag",
        {"sglang_layouts": _lay(args={"served_model_name": ["a", "b"]})},
        "error",
        ["args.served_model_name is a list, but --served-model-name takes one value"],
    ),
    Case(
        "args-mapping",
        "a mapping as an args: value",
        {"sglang_layouts": _lay(args={"served_model_name": {"a": 1}})},
        "error",
        ["args.served_model_name is a mapping"],
    ),
    Case(
        "args-null",
        "null as an args: value",
        {"sglang_layouts": _lay(args={"served_model_name": None})},
        "error",
        ["args.served_model_name is null", "'None'"],
    ),
    Case(
        "args-second-config",
        "args: {config: FILE} beside the API key's --config",
        {"sglang_api_key": SECRET, "sglang_layouts": _lay(args={"config": "/etc/sglang/x.yaml"})},
        "error",
        ["args.config: with sglang_api_key set", "second --config"],
    ),
    Case(
        "args-list-of-mappings",
        "a list of mappings for a many-value flag",
        {"sglang_layouts": _lay(args={"lora_paths": [{"a": 1}]})},
        "error",
        ["args.lora_paths: each value of --lora-paths must be text or a number"],
    ),
    Case(
        "args-list-for-many-values",
        "a list for a many-value flag (accepted)",
        {"sglang_layouts": _lay(args={"cuda_graph_bs_decode": [1, 2, 4]})},
        "accepted",
        check={"argv_has": ["--cuda-graph-bs-decode", "1", "2", "4"]},
    ),
    Case(
        "args-switch-with-text",
        "a switch given a text value",
        {"sglang_layouts": _lay(args={"enable_metrics": "yes"})},
        "error",
        ["--enable-metrics is a switch", "enable_metrics: true"],
    ),
    Case(
        "args-value-flag-with-bool",
        "a value flag given true",
        {"sglang_layouts": _lay(args={"served_model_name": True})},
        "error",
        ["--served-model-name takes a value"],
    ),
    Case(
        "args-model-path",
        "args: {model_path: ...}",
        {"sglang_layouts": _lay(args={"model_path": "/x"})},
        "error",
        ["set --model-path with sglang_model.path"],
    ),
    Case(
        "args-port",
        "args: {port: 31000}",
        {"sglang_layouts": _lay(args={"port": 31000})},
        "error",
        ["set --port with port:"],
    ),
    Case(
        "args-nnodes",
        "args: {nnodes: 2}",
        {"sglang_layouts": _lay(args={"nnodes": 2})},
        "error",
        ["set --nnodes with nnodes:"],
    ),
    Case(
        "args-dist-init-addr",
        "args: {dist_init_addr: ...}",
        {"sglang_layouts": _lay(args={"dist_init_addr": "1.2.3.4:5"})},
        "error",
        ["set --dist-init-addr with"],
    ),
    Case(
        "args-key-newline",
        "a newline in an args: key",
        {"sglang_layouts": _lay(args={"served_model_name\nUser=root": "m"})},
        "error",
        ["layout tp8: args key contains a newline"],
    ),
    Case(
        "args-a-list",
        "args: given as a list",
        {"sglang_layouts": _lay(args=["--foo", "1"])},
        "error",
        ["layout tp8: args must be a mapping"],
    ),
    # the layer partition is the layout's, not the controller's
    Case(
        "pp-partition-count",
        "env: SGLANG_PP_LAYER_PARTITION with the wrong number of stages",
        {"sglang_layouts": [{"name": "pp8", "pp": 8, "env": {"SGLANG_PP_LAYER_PARTITION": "30,31"}}]},
        "error",
        ["layout pp8: env.SGLANG_PP_LAYER_PARTITION '30,31' must be 8 layer counts", "61 layers"],
    ),
    Case(
        "pp-partition-sum",
        "env: SGLANG_PP_LAYER_PARTITION that does not sum to the layers",
        {
            "sglang_layouts": [
                {"name": "pp2", "pp": 2, "tp": 4, "env": {"SGLANG_PP_LAYER_PARTITION": "30,30"}}
            ]
        },
        "error",
        ["env.SGLANG_PP_LAYER_PARTITION '30,30' must be 2 layer counts", "summing to the model's 61 layers"],
    ),
    Case(
        "pp-partition-text",
        "env: SGLANG_PP_LAYER_PARTITION that is not numbers",
        {
            "sglang_layouts": [
                {"name": "pp2", "pp": 2, "tp": 4, "env": {"SGLANG_PP_LAYER_PARTITION": "half,half"}}
            ]
        },
        "error",
        ["env.SGLANG_PP_LAYER_PARTITION 'half,half' must be 2 layer counts"],
    ),
    # replicas over hosts the router cannot reach
    Case(
        "replicas-over-hosts-loopback",
        "replicas over two hosts, bound to 127.0.0.1",
        {"_cluster": ["n0", "n1"], "sglang_layouts": [{"name": "r", "tp": 8, "replicas": 2}]},
        "error",
        ["layout r: its replicas on n1 bind 127.0.0.1", "sglang_api_key"],
        plan_yml=False,
    ),
    # names: one rule for the planner, the units, the stop path and the result store
    Case(
        "name-all",
        "a layout named all (stop.yml -e layout=all means every layout)",
        {"sglang_layouts": [{"name": "all", "tp": 8}]},
        "error",
        ["sglang_layouts 'all': name is reserved", "layout=all"],
    ),
    Case(
        "name-latest",
        "a layout named latest",
        {"sglang_layouts": [{"name": "latest", "tp": 8}]},
        "error",
        ["name is reserved", "results/latest"],
    ),
    Case(
        "name-space",
        "a layout name with a space (tp8 fp8kv)",
        {"sglang_layouts": [{"name": "tp8 fp8kv", "tp": 8}]},
        "error",
        ["'tp8 fp8kv': name has characters", "name: tp8-fp8kv"],
    ),
    Case(
        "name-path",
        "a layout name that is a path (../../etc/tp8)",
        {"sglang_layouts": [{"name": "../../etc/tp8", "tp": 8}]},
        "error",
        ["'../../etc/tp8': name has characters", "'/'"],
    ),
    Case(
        "name-slash",
        "a layout name with a slash",
        {"sglang_layouts": [{"name": "a/b", "tp": 8}]},
        "error",
        ["'a/b': name has characters", "'/'"],
    ),
    Case(
        "name-non-ascii",
        "a layout name with a non-ASCII letter",
        {"sglang_layouts": [{"name": "tp8-é", "tp": 8}]},
        "error",
        ["name has characters", "'é'"],
    ),
    Case(
        "name-too-long",
        "a 300-character layout name",
        {"sglang_layouts": [{"name": "t" * 300, "tp": 8}]},
        "error",
        ["name is 300 characters long; at most 128"],
    ),
    Case(
        "name-129",
        "a 129-character layout name",
        {"sglang_layouts": [{"name": "t" * 129, "tp": 8}]},
        "error",
        ["name is 129 characters long"],
    ),
    Case(
        "name-percent",
        "a % in a layout name (a systemd specifier in Description=)",
        {"sglang_layouts": [{"name": "tp%h", "tp": 8}]},
        "error",
        ["'tp%h': name has characters", "'%'"],
    ),
    Case(
        "name-dollar",
        "a $ in a layout name",
        {"sglang_layouts": [{"name": "tp$8", "tp": 8}]},
        "error",
        ["name has characters", "'$'"],
    ),
    Case(
        "name-number",
        "name: 8 (a number)",
        {"sglang_layouts": [{"name": 8, "tp": 8}]},
        "error",
        ["sglang_layouts entry 1: name must be text, not a number", "name: '8'"],
    ),
    Case(
        "name-list",
        "name: [tp8]",
        {"sglang_layouts": [{"name": ["tp8"], "tp": 8}]},
        "error",
        ["entry 1: name must be text, not a list"],
    ),
    Case(
        "name-bool",
        "name: true",
        {"sglang_layouts": [{"name": True, "tp": 8}]},
        "error",
        ["entry 1: name must be text, not true/false"],
    ),
    Case(
        "name-leading-dot",
        "a name starting with a dot",
        {"sglang_layouts": [{"name": ".tp8", "tp": 8}]},
        "error",
        ["name must start with a letter or digit"],
    ),
    Case(
        "name-leading-dash",
        "a name starting with a dash",
        {"sglang_layouts": [{"name": "-tp8", "tp": 8}]},
        "error",
        ["name must start with a letter or digit"],
    ),
    Case(
        "name-empty",
        "name: ''",
        {"sglang_layouts": [{"name": "", "tp": 8}]},
        "error",
        ["entry 1 has no name"],
    ),
    # inputs of every type where a list or a mapping belongs
    Case(
        "layouts-string",
        "sglang_layouts as a string (-e sglang_layouts=[...])",
        {"sglang_layouts": "[{name: tp8, tp: 8}]"},
        "error",
        ["sglang_layouts is a string, not a list", "as JSON"],
    ),
    Case(
        "layouts-mapping",
        "sglang_layouts as one mapping",
        {"sglang_layouts": {"name": "tp8", "tp": 8}},
        "error",
        ["sglang_layouts must be a non-empty list"],
    ),
    Case(
        "layouts-number",
        "sglang_layouts: 8",
        {"sglang_layouts": 8},
        "error",
        ["sglang_layouts must be a non-empty list"],
    ),
    Case(
        "layout-entry-string",
        "a layout given as a string",
        {"sglang_layouts": ["tp8"]},
        "error",
        ["sglang_layouts entry 1 must be a mapping", "not text"],
    ),
    Case(
        "layout-entry-list",
        "a layout given as a list",
        {"sglang_layouts": [["tp8", 8]]},
        "error",
        ["entry 1 must be a mapping", "not a list"],
    ),
    Case(
        "layout-entry-null",
        "a layout given as null",
        {"sglang_layouts": [LAYOUT, None]},
        "error",
        ["entry 2 must be a mapping", "not null"],
    ),
    Case(
        "model-string",
        "sglang_model: deepseek-ai/DeepSeek-V3 (a string)",
        {"sglang_model": "deepseek-ai/DeepSeek-V3"},
        "error",
        ["sglang_model must be a mapping with name and path", "not text"],
    ),
    Case(
        "model-list",
        "sglang_model as a list",
        {"sglang_model": ["kimi"]},
        "error",
        ["sglang_model must be a mapping", "not a list"],
    ),
    Case(
        "model-no-path",
        "sglang_model without path (would become a Hub download of the name)",
        {"sglang_model": {"name": "kimi-k2.6", "hf_config_file": "{repo}/models/kimi-k2.6/config.json"}},
        "error",
        ["sglang_model.path is not set", "path: org/name"],
    ),
    Case(
        "model-path-number",
        "sglang_model.path: 5",
        {"sglang_model": {"name": "m", "path": 5}},
        "error",
        ["sglang_model.path must be text", "not a number"],
    ),
    Case(
        "model-no-name",
        "sglang_model without name",
        {"sglang_model": {"path": "{repo}/models/kimi-k2.6"}},
        "error",
        ["sglang_model.name must be text"],
    ),
    Case(
        "model-config-file-and-path-differ",
        "hf_config_file names another model than path's config.json",
        {
            "sglang_model": {
                "name": "llama",
                "path": "{tmp}",
                "hf_config_file": "{repo}/models/kimi-k2.6/config.json",
            }
        },
        "error",
        ["sglang_model.hf_config_file", "name different models", "Remove hf_config_file"],
        files={"config.json": LLAMA_CONFIG},
    ),
    Case(
        "model-hf-config-text",
        "sglang_model.hf_config as text",
        {"sglang_model": {"name": "m", "path": "/m", "hf_config": "{}x"}},
        "error",
        ["sglang_model.hf_config must be a mapping"],
    ),
    Case(
        "config-no-layers",
        "a config.json without num_hidden_layers",
        {"sglang_model": {"name": "m", "path": "/models/m", "hf_config_file": "{tmp}/c.json"}},
        "error",
        ["c.json (sglang_model.hf_config_file): num_hidden_layers is missing"],
        files={"c.json": LLAMA_CONFIG.replace('"num_hidden_layers": 80, ', "")},
    ),
    Case(
        "config-heads-zero",
        "a config.json with num_attention_heads: 0",
        {"sglang_model": {"name": "m", "path": "/models/m", "hf_config_file": "{tmp}/c.json"}},
        "error",
        ["num_attention_heads must be a whole number >= 1, not 0"],
        files={"c.json": LLAMA_CONFIG.replace('"num_attention_heads": 64', '"num_attention_heads": 0')},
    ),
    Case(
        "config-heads-text",
        "a config.json with num_attention_heads: 'many'",
        {"sglang_model": {"name": "m", "path": "/models/m", "hf_config_file": "{tmp}/c.json"}},
        "error",
        ["num_attention_heads must be a whole number >= 1, not 'many'"],
        files={"c.json": LLAMA_CONFIG.replace('"num_attention_heads": 64', '"num_attention_heads": "many"')},
    ),
    Case(
        "config-architectures-text",
        "architectures given as a string",
        {"sglang_model": {"name": "m", "path": "/models/m", "hf_config_file": "{tmp}/c.json"}},
        "error",
        ["architectures must be a list of names"],
        files={"c.json": LLAMA_CONFIG.replace('["LlamaForCausalLM"]', '"LlamaForCausalLM"')},
    ),
    Case(
        "config-json-list",
        "a config.json that is a list",
        {"sglang_model": {"name": "m", "path": "/models/m", "hf_config_file": "{tmp}/c.json"}},
        "error",
        ["a model config must be a JSON object, not a list"],
        files={"c.json": "[1, 2]"},
    ),
    Case(
        "config-file-missing",
        "hf_config_file that does not exist",
        {"sglang_model": {"name": "m", "path": "/models/m", "hf_config_file": "{tmp}/none.json"}},
        "error",
        ["cannot read", "none.json"],
    ),
    Case(
        "config-quantization-text",
        "quantization_config given as text",
        {"sglang_model": {"name": "m", "path": "/models/m", "hf_config_file": "{tmp}/c.json"}},
        "error",
        ["quantization_config must be a mapping"],
        files={
            "c.json": LLAMA_CONFIG.replace(
                '"vocab_size": 128256', '"vocab_size": 128256, "quantization_config": "fp8"'
            )
        },
    ),
    Case(
        "config-unknown-quantization",
        "a quantization the planner does not know (bitsandbytes)",
        {"sglang_model": {"name": "m", "path": "/models/m", "hf_config_file": "{tmp}/c.json"}},
        "error",
        [
            "quantization 'bitsandbytes' is not supported yet",
            "Supported quantization:",
            "mxfp4",
            "awq and gptq",
        ],
        files={
            "c.json": LLAMA_CONFIG.replace(
                '"vocab_size": 128256',
                '"vocab_size": 128256, "quantization_config": {"quant_method": "bitsandbytes"}',
            )
        },
    ),
    Case(
        "config-unknown-modelopt-algo",
        "modelopt quantization with an algorithm the planner does not know (W4A8_AWQ)",
        {"sglang_model": {"name": "m", "path": "/models/m", "hf_config_file": "{tmp}/c.json"}},
        "error",
        ["modelopt quant_algo 'W4A8_AWQ'", "supported: FP8, NVFP4"],
        files={
            "c.json": LLAMA_CONFIG.replace(
                '"vocab_size": 128256',
                '"vocab_size": 128256, "quantization_config": {"quant_method": "modelopt", "quant_algo": "W4A8_AWQ"}',
            )
        },
    ),
    Case(
        "config-wrapper-without-text-config",
        "a Kimi K2.5 wrapper config without text_config",
        {"sglang_model": {"name": "m", "path": "/models/m", "hf_config_file": "{tmp}/c.json"}},
        "error",
        ["KimiK25ForConditionalGeneration config has no text_config"],
        files={"c.json": '{"architectures": ["KimiK25ForConditionalGeneration"]}'},
    ),
    # layout keys of the wrong type
    Case(
        "tp-bool",
        "tp: true",
        {"sglang_layouts": _lay(tp=True)},
        "error",
        ["layout tp8: tp must be an integer, not True"],
    ),
    Case(
        "tp-float",
        "tp: 2.5",
        {"sglang_layouts": _lay(tp=2.5)},
        "error",
        ["layout tp8: tp must be an integer >= 1, not 2.5"],
    ),
    Case(
        "tp-list", "tp: [8]", {"sglang_layouts": _lay(tp=[8])}, "error", ["layout tp8: tp must be an integer"]
    ),
    Case(
        "pp-text",
        "pp: two",
        {"sglang_layouts": _lay(pp="two")},
        "error",
        ["layout tp8: pp must be an integer"],
    ),
    Case(
        "nnodes-zero",
        "nnodes: 0",
        {"sglang_layouts": _lay(nnodes=0)},
        "error",
        ["layout tp8: nnodes must be an integer >= 1"],
    ),
    Case(
        "replicas-zero",
        "replicas: 0",
        {"sglang_layouts": _lay(replicas=0)},
        "error",
        ["layout tp8: replicas must be an integer >= 1"],
    ),
    Case(
        "dp-attention-text",
        "enable_dp_attention: maybe",
        {"sglang_layouts": _lay(enable_dp_attention="maybe")},
        "error",
        ["layout tp8: enable_dp_attention must be true or false"],
    ),
    Case(
        "force-text",
        "force: sometimes",
        {"sglang_layouts": _lay(force="sometimes")},
        "error",
        ["layout tp8: force must be true or false"],
    ),
    Case(
        "engine-number", "engine: 3", {"sglang_layouts": _lay(engine=3)}, "error", ["layout tp8: engine '3'"]
    ),
    Case(
        "gpu-memory-negative",
        "gpu_memory_gib: -1",
        {"gpu_memory_gib": -1},
        "error",
        ["gpu_memory_gib must be positive"],
    ),
    Case(
        "gpu-interconnect-bogus",
        "gpu_interconnect: infiniband",
        {"gpu_interconnect": "infiniband"},
        "error",
        ["gpu_interconnect must be pcie, nvlink or none"],
    ),
    Case(
        "gpu-count-text",
        "gpu_count: eight",
        {"gpu_count": "eight"},
        "error",
        ["gpu_count must be an integer"],
    ),
    Case("gpu-count-zero", "gpu_count: 0", {"gpu_count": 0}, "error", ["gpu_count must be an integer >= 1"]),
]
CASES += SECOND_ROUND


def _pd(**pd):
    """A pd layout (prefill/decode disaggregation) of two tp8 roles, with `pd` keys changed."""
    return [{"name": "pd", "pd": {"prefill": {"tp": 8}, "decode": {"tp": 8}, **pd}}]


# --- issue 29: pd layouts (prefill/decode disaggregation), the planner's refusals
PD_CASES = [
    Case(
        "pd-transfer-backend-unknown",
        "pd.transfer_backend that the host's SGLang does not offer",
        {"sglang_layouts": _pd(transfer_backend="rdma")},
        "error",
        ["pd.transfer_backend 'rdma' is not one SGLang", "mooncake_tcp"],
    ),
    Case(
        "pd-transfer-backend-fake",
        "pd.transfer_backend fake, which SGLang's prefill server refuses",
        {"sglang_layouts": _pd(transfer_backend="fake")},
        "error",
        ["pd.transfer_backend 'fake' is refused by SGLang's prefill server", "mooncake_tcp"],
    ),
    Case(
        "pd-tp-mismatch-gqa",
        "prefill and decode with different tp on a non-MLA model",
        {
            "sglang_model": {"name": "llama", "path": "/models/llama", "hf_config_file": "{tmp}/config.json"},
            "sglang_layouts": [{"name": "pd", "pd": {"prefill": {"tp": 2}, "decode": {"tp": 4}}}],
        },
        "invalid",
        ["pd: prefill tp 2 and decode tp 4 differ on LlamaForCausalLM", "same tp"],
        files={"config.json": LLAMA_CONFIG},
    ),
    Case(
        "pd-port-collision",
        "a decode server's port on a prefill server's port",
        {"sglang_layouts": _pd(decode={"tp": 8, "port": 30001}, share_gpus=True)},
        "error",
        ["port 30001 on", "is both the HTTP port of prefill 0 and the HTTP port of decode 0"],
    ),
    Case(
        "pd-bootstrap-port-collision",
        "pd.prefill.bootstrap_port on the router's port",
        {"sglang_layouts": _pd(prefill={"tp": 8, "bootstrap_port": 30000}, share_gpus=True)},
        "error",
        ["port 30000 on", "is both the bootstrap port of prefill 0 and the HTTP port of router"],
    ),
    Case(
        "pd-shared-gpus",
        "prefill and decode on the same GPUs without pd.share_gpus",
        {
            "sglang_layouts": _pd(
                prefill={"tp": 8, "gpus": list(range(8))}, decode={"tp": 8, "gpus": list(range(8))}
            )
        },
        "invalid",
        ["is used by prefill 0 and decode 0", "pd.share_gpus: true"],
    ),
    Case(
        "pd-shared-gpu-no-room",
        "pd.share_gpus with static pools that leave no room for either server's CUDA graphs and activations",
        {
            "sglang_layouts": _pd(
                prefill={"tp": 8, "mem_fraction_static": 0.5},
                decode={"tp": 8, "mem_fraction_static": 0.97},
                share_gpus=True,
            )
        },
        "invalid",
        ["so 1.4 GiB stay outside both pools", "lower pd.decode.mem_fraction_static"],
    ),
    Case(
        "pd-disaggregation-flag-in-args",
        "--disaggregation-mode under a pd role's args:",
        {"sglang_layouts": _pd(decode={"tp": 8, "args": {"disaggregation_mode": "prefill"}})},
        "error",
        ["pd.decode.args.disaggregation_mode: set it with the role"],
    ),
]
CASES += PD_CASES

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
    """What the role sglang_plan (its defaults) would hand the planner for a host of the test inventory with these
    variables (the serving values of group_vars/all/serving.yml, Kimi K2.6 from the repo)."""
    model = variables.get("sglang_model", {"name": "kimi-k2.6", "path": str(repo / "models" / "kimi-k2.6")})
    serving = {
        "engine": "sim",
        "mem_fraction_static": variables.get("sglang_mem_fraction_static", 0.88),
        "context_length": variables.get("sglang_context_length", 32768),
        "max_running_requests": variables.get("sglang_max_running_requests"),
        "host": variables.get("sglang_host", "127.0.0.1"),
        "base_port": variables.get("sglang_base_port", 30000),
        "api_key_set": bool(variables.get("sglang_api_key")),
        "secret_env": variables.get("sglang_secret_env", []),
    }
    hosts = variables.get("_cluster", ["seed-box"])
    return {
        "host": hosts[0],
        "model": model,
        "layouts": variables.get("sglang_layouts", [LAYOUT]),
        "search": variables.get("sglang_layout_search"),
        "service_env": variables.get("sglang_service_extra_env", {}),
        "hardware": {
            "gpu_count": variables.get("gpu_count", 8),
            "gpu_memory_gib": variables.get("gpu_memory_gib", 94.97),
            "gpu_interconnect": variables.get("gpu_interconnect", "pcie"),
        },
        "serving": serving,
        "cluster": {
            "group": "sglang_hosts",
            "hosts": hosts,
            "addresses": [f"10.0.0.{i + 1}" for i in range(len(hosts))],
            "dist_init_port": variables.get("sglang_dist_init_port", 50000),
        },
    }
