"""The planner's command lines against the oracle SGLang's own parser and validator.

The oracle is the pinned SGLang (`make conformance`) or another release that has a flag table
(`make conformance SGLANG_VERSION=0.5.16`); the plan is made for that release (-e sglang_version).

For every layout of the demo inventory, the planner renders `flags` (the argv of
`python -m sglang.launch_server`). SGLang's own code then judges them, on CPU, in ONE subprocess
of the oracle python (tests/conformance/oracle_check_args.py: ServerArgs is imported once,
each argv runs in a forked child):

    prepare_server_args(flags + ["--device", "cpu"])   # argparse + ServerArgs
    resolve_once()                                      # where the pin has it (0.5.23 does)
    check_server_args()

`--model-path` points at a temp dir holding the shipped models/kimi-k2.6/config.json, so the
checks that depend on the model (context length, DeepSeek/MLA/MoE paths) run for real. Kimi
K2.6's config needs one workaround under --trust-remote-code: see `sglang_model_dir` in
conftest.py; test_kimi_config_needs_repo_code_only_under_trust_remote_code shows why.

What is asserted:
- a layout the planner does not call invalid (fits or oom: memory is not the parser's business)
  is accepted, and SGLang resolves it to the same shape the planner computed (world size,
  attention TP, MoE TP, DP ranks) without a rank-derivation error;
- a layout the planner calls invalid for a reason SGLang's parser also checks is rejected by it;
  an invalid demo layout that the parser accepts must be invalid for a reason the parser does
  not check (RUNTIME_ONLY), and where SGLang's own rank derivation shows the crash, it must;
- argparse errors (unknown flag, ambiguous --pp, bad choice, bad int) exit 2;
- the committed flag table of the oracle's release (data/sglang_flags/<version>.json) is what
  its parser says today.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ORACLE_API_KEY = "sk-conformance-not-a-secret"
KIMI_CONFIG = REPO / "models" / "kimi-k2.6" / "config.json"
FLAG_TABLES = REPO / "module_utils" / "sglang_layouts" / "data" / "sglang_flags"
ENGINE_YML = REPO / "group_vars" / "all" / "engine.yml"

# Invalid-layout reasons of the planner that SGLang's parser and validator do NOT check: the
# argv passes `prepare_server_args`/`check_server_args` and the failure comes later, at start.
# pattern -> what SGLang does instead (and, for ep > tp, the rank derivation error we expect).
RUNTIME_ONLY = {
    r"ep \(\d+\) is larger than tp": "moe_tp = tp // ep = 0: ZeroDivisionError when the ranks are derived",
    r"ep \(\d+\) must divide tp": "uneven expert groups; only runtime weight loading notices",
    r"experts do not split": "fused_moe layer: num_experts % ep_size, at model load",
    r"attention heads do not split|KV heads cannot be split": "model construction, at load",
    r"does not divide \d+ ways|whole int4 groups|fp8 weight blocks": "weight sharding, at load",
    r"needs \d+ GPUs": "NCCL/CUDA at start: the parser does not know the host's GPU count",
    r"gpus lists|do not exist on a host": "CUDA_VISIBLE_DEVICES is not the parser's input",
    r"mem_fraction_static must be between": "SGLang does not range-check --mem-fraction-static",
    r"pp \d+ exceeds the model's": "layer partition at load",
}
RANK_ERROR_EXPECTED = {r"ep \(\d+\) is larger than tp": "ZeroDivisionError"}

# Layouts the planner must call invalid for reasons SGLang's validator checks too.
# (layout, serving overrides, planner reason pattern, SGLang error type, SGLang message pattern)
PARSER_LEVEL = [
    pytest.param(
        {"name": "dpa-tp8-dp3", "tp": 8, "dp": 3, "enable_dp_attention": True},
        {},
        r"tp % dp",
        "AssertionError",
        None,  # `assert cfg.tp_size % cfg.attn_dp_size == 0` carries no message in 0.5.23
        id="dp-attention-tp-not-divisible-by-dp",
    ),
    pytest.param(
        {"name": "nnodes3", "tp": 8, "nnodes": 3},
        {},
        r"divisible by nnodes",
        "AssertionError",
        r"divisible by number of nodes",
        id="tp-pp-not-divisible-by-nnodes",
    ),
    pytest.param(
        {"name": "multinode-dp", "tp": 8, "dp": 2, "nnodes": 2},
        {},
        r"multi-node data parallelism",
        "AssertionError",
        r"multi-node data[- ]parallel",  # 0.5.16 writes "data parallel", 0.5.23 "data-parallel"
        id="multi-node-dp-without-dp-attention",
    ),
    pytest.param(
        {"name": "long-context", "tp": 8},
        {"context_length": 300000},
        r"exceeds the model's max_position_embeddings",
        "ValueError",
        r"context_length \(300000\) is greater than the derived context_length \(262144\)",
        id="context-length-beyond-model",
    ),
]

# argparse errors, on top of a planner-rendered argv: (id, edit, message pattern)
ARGPARSE = [
    ("unknown-flag", lambda a: [*a, "--no-such-flag", "1"], r"unrecognized arguments: --no-such-flag"),
    ("ambiguous-pp", lambda a: [*a, "--pp", "2"], r"ambiguous option: --pp could match --pp-size"),
    ("bad-choice", lambda a: _set(a, "--attention-backend", "bogus"), r"invalid choice: 'bogus'"),
    ("bad-int", lambda a: _set(a, "--tp-size", "eight"), r"invalid int value: 'eight'"),
]


def _set(argv: list[str], flag: str, value: str) -> list[str]:
    out = list(argv)
    out[out.index(flag) + 1] = value
    return out


def _without(argv: list[str], flag: str) -> list[str]:
    return [a for a in argv if a != flag]


def demo_plan_inputs(sglang_version: str) -> dict:
    """`sglang_plan_inputs` of the demo host, templated by Ansible exactly as the role sglang_plan sees it
    (inventory/demo + group_vars/ through playbooks/, so group_vars/all loads), for the SGLang
    release the oracle is (-e sglang_version, as a user picks another release)."""
    ansible = Path(sys.executable).parent / "ansible"
    if not ansible.exists():
        pytest.fail(
            f"{ansible} not found: run `make venv` (the controller venv has ansible-core)", pytrace=False
        )
    env = dict(os.environ)
    env.update(
        {
            "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
            "ANSIBLE_STDOUT_CALLBACK": "json",
            "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
            "ANSIBLE_NOCOLOR": "1",
        }
    )
    cmd = [str(ansible), "-i", "inventory/demo", "seed-box", "--playbook-dir", "playbooks"]
    cmd += [
        "-m",
        "ansible.builtin.debug",
        "-a",
        "var=sglang_plan_inputs",
        # the inputs as the role sglang_plan assembles them (its defaults), without planning
        "-e",
        "@roles/sglang_plan/defaults/main.yml",
        "-e",
        f"sglang_version={sglang_version}",
    ]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    # the json callback's document, between ansible.cfg's profile_tasks lines
    start = re.search(r"^\{", proc.stdout, re.M)
    assert start, f"no JSON in the output of {' '.join(cmd)}:\n{proc.stdout[-3000:]}"
    doc, _ = json.JSONDecoder().raw_decode(proc.stdout[start.start() :])
    result = doc["plays"][0]["tasks"][0]["hosts"]["seed-box"]
    return result["sglang_plan_inputs"]


def _plan(inputs: dict, layouts: list[dict], serving: dict | None = None) -> list[dict]:
    from sglang_layouts.plan.planner import plan_host

    inputs = {**inputs, "layouts": layouts, "serving": {**inputs["serving"], **(serving or {})}}
    return plan_host(inputs)["layouts"]


@pytest.fixture(scope="session")
def demo_inputs(oracle_sglang_version) -> dict:
    inputs = demo_plan_inputs(oracle_sglang_version)
    assert inputs["sglang_version"] == oracle_sglang_version  # -e reaches the planner
    return inputs


@pytest.fixture(scope="session")
def demo_plan(demo_inputs) -> list[dict]:
    return _plan(demo_inputs, demo_inputs["layouts"])


@pytest.fixture(scope="session")
def oracle(demo_inputs, demo_plan, judge_argvs, model_dir_factory, tmp_path_factory) -> dict:
    """Everything SGLang judges in this module, in one oracle subprocess."""
    tmp = tmp_path_factory.mktemp("sglang-models")
    kimi = str(model_dir_factory(tmp / "kimi-k2.6", KIMI_CONFIG))
    bare = str(model_dir_factory(tmp / "kimi-k2.6-config-only", KIMI_CONFIG, custom_code_stub=False))

    def on(model: str, flags: list[str]) -> list[str]:
        return _set(flags, "--model-path", model)

    cases, plans = [], {}
    for lay in demo_plan:
        cases.append({"id": f"demo/{lay['name']}", "argv": on(kimi, lay["flags"])})
        plans[f"demo/{lay['name']}"] = lay
    for param in PARSER_LEVEL:
        layout, serving, *_ = param.values
        (lay,) = _plan(demo_inputs, [layout], serving)
        cases.append({"id": f"parser/{param.id}", "argv": on(kimi, lay["flags"])})
        plans[f"parser/{param.id}"] = lay
    base = on(kimi, demo_plan[0]["flags"])
    for name, edit, _ in ARGPARSE:
        cases.append({"id": f"argparse/{name}", "argv": edit(base)})
    cases.append({"id": "kimi/config-only+trust-remote-code", "argv": on(bare, demo_plan[0]["flags"])})
    cases.append(
        {"id": "kimi/config-only", "argv": _without(on(bare, demo_plan[0]["flags"]), "--trust-remote-code")}
    )
    # the API key as the role hands it over: SGLang's --config file, written by secrets.api_key_config
    from sglang_layouts.secrets import api_key_argv, api_key_config

    key_file = tmp / "key.yaml"
    key_file.write_text(api_key_config("sglang", ORACLE_API_KEY))
    cases.append({"id": "api-key/config-file", "argv": base + api_key_argv("sglang", str(key_file))})
    flags_out = tmp / "sglang_flags.json"
    doc = judge_argvs(cases, flags_out=flags_out)
    doc["plans"] = plans
    doc["flags_now"] = json.loads(flags_out.read_text())
    return doc


def _explain(res: dict) -> str:
    return f"{res['verdict']}: {res.get('error_type')}: {res.get('message')}"


def test_demo_inventory_has_layouts_to_judge(demo_plan):
    verdicts = {lay["name"]: lay["verdict"] for lay in demo_plan}
    assert any(v != "invalid" for v in verdicts.values()), verdicts
    assert all("--model-path" in lay["flags"] for lay in demo_plan)


def test_valid_layouts_are_accepted_and_resolve_to_the_planned_shape(oracle, demo_plan):
    problems = []
    judged = 0
    for lay in demo_plan:
        if lay["verdict"] == "invalid":
            continue
        judged += 1
        res = oracle["results"][f"demo/{lay['name']}"]
        if res["verdict"] != "accepted":
            problems.append(
                f"{lay['name']} ({lay['verdict']}): SGLang says {_explain(res)}\n  argv: {lay['flags']}"
            )
            continue
        par, got, widths = lay["parallel"], res["resolved"], res["widths"]
        want = {
            "tp_size": par["tp"],
            "pp_size": par["pp"],
            "ep_size": par["ep"],
            "context_length": int(_flag(lay, "--context-length")),
            "mem_fraction_static": float(_flag(lay, "--mem-fraction-static")),
            "max_running_requests": int(_flag(lay, "--max-running-requests")),
            "attention_backend": _flag(lay, "--attention-backend"),
            "grammar_backend": _flag(lay, "--grammar-backend"),
            "host": _flag(lay, "--host"),
            "port": lay["port"],
            "trust_remote_code": "--trust-remote-code" in lay["flags"],
        }
        for key, value in want.items():
            if got[key] != value:
                problems.append(f"{lay['name']}: SGLang resolved {key}={got[key]!r}, the plan says {value!r}")
        if widths is not None:  # SGLang's own derivation (sglang.srt.runtime_context, 0.5.23)
            shape = {
                "world_size": par["tp"] * par["pp"],
                "attn_tp_size": par["attn_tp"],
                "moe_tp_size": par["moe_tp"],
                "moe_ep_size": par["ep"],
                "num_dp_ranks": par["dp"],
            }
            for key, value in shape.items():
                if widths[key] != value:
                    problems.append(f"{lay['name']}: SGLang derives {key}={widths[key]}, the planner {value}")
            if widths["rank_error"]:
                problems.append(f"{lay['name']}: SGLang cannot place its ranks: {widths['rank_error']}")
    assert judged, "no valid layout in the demo inventory"
    assert not problems, "\n".join(problems)


def test_rendered_flags_draw_no_deprecation_warning(oracle, demo_plan):
    """The units use the release's current spelling: its own parser warns about none of their flags."""
    warned = {
        lay["name"]: oracle["results"][f"demo/{lay['name']}"]["deprecations"]
        for lay in demo_plan
        if oracle["results"][f"demo/{lay['name']}"]["deprecations"]
    }
    assert not warned, f"SGLang {oracle['sglang_version']} warns about the planner's flags: {warned}"


def _flag(lay: dict, flag: str) -> str:
    flags = lay["flags"]
    assert flag in flags, f"{lay['name']}: the planner rendered no {flag}: {flags}"
    return flags[flags.index(flag) + 1]


def test_invalid_demo_layouts_fail_in_sglang_too(oracle, demo_plan):
    invalid = [lay for lay in demo_plan if lay["verdict"] == "invalid"]
    assert invalid, "the demo inventory carries the seed's invalid layout (tp2ep4); none was planned invalid"
    problems = []
    for lay in invalid:
        res = oracle["results"][f"demo/{lay['name']}"]
        if res["verdict"] != "accepted":
            continue  # SGLang's parser refuses it too
        for reason in lay["reasons"]:
            matched = [p for p in RUNTIME_ONLY if re.search(p, reason)]
            if not matched:
                problems.append(
                    f"{lay['name']}: the planner says {reason!r}, but SGLang's parser accepts the argv; "
                    "either that rule is runtime-only (add it to RUNTIME_ONLY with the evidence) or the planner is wrong"
                )
            for pattern in matched:
                expected = RANK_ERROR_EXPECTED.get(pattern)
                rank_error = (res["widths"] or {}).get("rank_error") or ""
                if expected and res["widths"] is not None and expected not in rank_error:
                    problems.append(
                        f"{lay['name']}: the planner predicts {expected}, SGLang's rank derivation gives "
                        f"{rank_error or 'no error'}"
                    )
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("layout, serving, reason, error_type, message", PARSER_LEVEL)
def test_parser_level_invalid_layouts_are_rejected(
    oracle, layout, serving, reason, error_type, message, request
):
    case = f"parser/{request.node.callspec.id}"
    lay = oracle["plans"][case]
    assert lay["verdict"] == "invalid", f"the planner accepts {layout} ({lay['verdict']}): {lay['reasons']}"
    assert any(re.search(reason, r) for r in lay["reasons"]), lay["reasons"]
    res = oracle["results"][case]
    assert res["verdict"] == "rejected", f"SGLang {_explain(res)} for {lay['flags']}"
    assert res["error_type"] == error_type, _explain(res)
    if message:
        assert re.search(message, res["message"]), res["message"]


@pytest.mark.parametrize("name, message", [(n, m) for n, _, m in ARGPARSE], ids=[n for n, _, _ in ARGPARSE])
def test_argparse_errors_exit_2(oracle, name, message):
    res = oracle["results"][f"argparse/{name}"]
    assert res["verdict"] == "argparse_error", _explain(res)
    assert res["exit_code"] == 2
    assert re.search(message, res["message"]), res["message"]


def test_the_api_key_file_reaches_sglang_as_its_api_key(oracle):
    """The role's --config file (secrets.api_key_config) is what SGLang's own ConfigArgumentMerger
    reads as --api-key. A key spelled `api_key:` was refused by real SGLang 0.5.16 on the H200
    (`unrecognized arguments: --api_key`), which the simulator used to accept."""
    res = oracle["results"]["api-key/config-file"]
    assert res["verdict"] == "accepted", _explain(res)
    assert res["resolved"]["api_key"] == ORACLE_API_KEY


def test_kimi_config_needs_repo_code_only_under_trust_remote_code(oracle):
    """Why conftest.sglang_model_dir writes configuration_kimi_k25.py next to config.json.

    SGLang 0.5.23 registers KimiK25Config for model_type kimi_k25: config.json alone loads
    without --trust-remote-code. With it, transformers follows auto_map to the repo's
    configuration_kimi_k25.py, which ships with the weights on a real host, not here.
    If a future pin loads it without the file, this test says so and the stub can go.
    SGLang 0.5.16 (transformers 5.12.1) loads it under --trust-remote-code without the file: the
    stub is harmless there, and this test is about the pin."""
    if oracle["sglang_version"] != _pin():
        pytest.skip(f"about the pin's config loading; the oracle is SGLang {oracle['sglang_version']}")
    bare_trust = oracle["results"]["kimi/config-only+trust-remote-code"]
    assert bare_trust["verdict"] == "rejected", _explain(bare_trust)
    assert bare_trust["error_type"] == "OSError" and "configuration_kimi_k25.py" in bare_trust["message"]
    bare = oracle["results"]["kimi/config-only"]
    assert bare["verdict"] == "accepted", _explain(bare)


def test_rendered_flags_exist_in_the_oracle(oracle, demo_plan):
    """Every flag the planner renders is a canonical flag of the oracle SGLang's parser."""
    flags = oracle["flags_now"]["flags"]
    rendered = {a for lay in demo_plan for a in lay["flags"] if a.startswith("--")}
    missing = sorted(rendered - set(flags))
    assert not missing, f"not canonical flags of SGLang {oracle['sglang_version']}: {missing}"


def test_the_oracle_is_the_release_asked_for(oracle):
    """SGLANG_ORACLE_VERSION (make conformance SGLANG_VERSION=...) or else the pin."""
    want = os.environ.get("SGLANG_ORACLE_VERSION") or _pin()
    assert oracle["sglang_version"] == want, (
        f"the oracle venv is SGLang {oracle['sglang_version']}, not {want}: run `make oracle SGLANG_VERSION={want}`"
    )


def _pin() -> str:
    return re.search(r'^sglang_version:\s*"?([^"\s]+)"?', ENGINE_YML.read_text(), re.M).group(1)


def test_the_flag_table_is_current(oracle):
    version = oracle["sglang_version"]
    make = f"`make flags SGLANG_VERSION={version}`"
    table = FLAG_TABLES / f"{version}.json"
    assert table.is_file(), f"SGLang {version} has no flag table {table.relative_to(REPO)}: run {make}"
    committed = json.loads(table.read_text())
    assert committed["sglang_version"] == version, f"{table.name} is for another SGLang: run {make}"
    assert committed == oracle["flags_now"], (
        f"{table.relative_to(REPO)} differs from SGLang {version}'s parser: run {make}"
    )
