"""The bad-input matrix (tests/bad_inputs.py) through the planner: the error or the verdict, and its words."""

import json

import pytest
from bad_inputs import CASES, SECRET, materialise, planner_inputs
from sglang_layouts.plan import planner
from sglang_layouts.plan.validate import plan_outcome


def _write_like_plan_yml(outcome, folder):
    """What plan.yml does with the outcome: the plan JSON only when there is a plan."""
    if "plan" in outcome:
        folder.mkdir()
        (folder / "host.json").write_text(json.dumps(outcome["plan"]))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case, tmp_path, repo):
    (tmp_path / "files").mkdir()
    inputs = planner_inputs(materialise(case, tmp_path / "files", repo), repo)
    outcome = plan_outcome(inputs)
    _write_like_plan_yml(outcome, tmp_path / "plan")
    if case.expect == "error":
        assert "refused" in outcome, f"{case.id}: planned, not refused"
        message = outcome["refused"]
        for needle in case.needles:
            assert needle in message, message
        # one or two lines, the secret never in them, nothing written
        assert len(message.splitlines()) <= 2 and len(message) <= 2 * 200, message
        assert SECRET not in message
        assert not (tmp_path / "plan").exists()
        return
    assert "plan" in outcome, outcome.get("refused")
    doc = outcome["plan"]
    assert SECRET not in json.dumps(doc)
    if case.expect == "invalid":
        bad = [e for e in doc["layouts"] if e["verdict"] == "invalid"]
        assert bad, [e["verdict"] for e in doc["layouts"]]
        reasons = " ".join(r for e in bad for r in e["reasons"])
        for needle in case.needles:
            assert needle in reasons, reasons
        return
    entry = doc["layouts"][0]
    if case.expect == "accepted":
        want = case.check.get("argv_has") or []
        argv = entry["argv"]
        assert any(argv[i : i + len(want)] == want for i in range(len(argv))), argv
        return
    assert case.expect == "sanitised"
    name = case.check["masked"]
    assert entry["env"][name] == "***" and name in entry["secret_env"]
    assert case.check["absent"] not in json.dumps(doc)
    # the real value is there for the EnvironmentFile, and only there
    secrets = planner.layout_secret_env(inputs, entry["name"])
    assert secrets == {name: case.check.get("value", case.check["absent"])}


def test_matrix_is_large_enough():
    assert len(CASES) >= 120 and len({c.id for c in CASES}) == len(CASES)


# Values of every type, put in turn at every key the planner reads: it plans or refuses with a
# message, never a raw Python error (KeyError, TypeError, ZeroDivisionError, ...).
ODD_VALUES = [None, "", "x", "0", 0, -1, 1.5, True, [], [1], ["a", {"b": 1}], {}, {"a": 1}, "a\nb"]


def _paths(inputs):
    yield ()
    for key in (
        "host",
        "model",
        "layouts",
        "hardware",
        "serving",
        "cluster",
        "service_env",
        "sglang_version",
    ):
        yield (key,)
    for key in ("name", "path", "hf_config", "hf_config_file", "load_format"):
        yield ("model", key)
    for key in (
        "name",
        "tp",
        "pp",
        "ep",
        "dp",
        "nnodes",
        "gpus",
        "port",
        "args",
        "env",
        "replicas",
        "engine",
    ):
        yield ("layouts", 0, key)
    for key in ("enable_dp_attention", "force"):
        yield ("layouts", 0, key)
    for key in inputs["hardware"]:
        yield ("hardware", key)
    for key in inputs["serving"]:
        yield ("serving", key)
    for key in ("group", "hosts", "addresses", "dist_init_port"):
        yield ("cluster", key)
    for key in ("context_length", "host", "served_model_name", "cuda_graph_bs_decode", "api_key"):
        yield ("layouts", 0, "args", key)
    for key in ("HF_TOKEN", "SGLANG_PP_LAYER_PARTITION"):
        yield ("layouts", 0, "env", key)


def _put(inputs, path, value):
    if not path:
        return value
    node = inputs
    for step in path[:-1]:
        if isinstance(node, dict) and not isinstance(node.get(step), dict | list):
            node[step] = {}
        node = node[step]
    node[path[-1]] = value
    return inputs


def test_no_raw_python_error_for_inputs_of_any_type(repo):
    base = planner_inputs({"sglang_layouts": [{"name": "tp8", "tp": 8, "args": {}, "env": {}}]}, repo)
    raw = []
    for path in list(_paths(base)):
        for value in ODD_VALUES:
            inputs = _put(json.loads(json.dumps(base)), path, value)
            try:
                plan_outcome(inputs)
            except Exception as e:  # anything but a PlanError (which plan_outcome turns into data)
                raw.append(f"{'.'.join(map(str, path)) or 'inputs'} = {value!r}: {type(e).__name__}: {e}")
    assert not raw, "\n".join(raw[:20])


@pytest.mark.parametrize(
    "config",
    [
        {"architectures": ["LlamaForCausalLM"]},
        {"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 8},
        {"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2},
        {"architectures": []},
        {"architectures": None},
        {},
    ],
)
def test_malformed_configs_are_refused_with_a_message(config, repo):
    inputs = planner_inputs(
        {"sglang_model": {"name": "m", "path": "/models/m", "hf_config": config or {"x": 1}}}, repo
    )
    outcome = plan_outcome(inputs)
    assert "refused" in outcome and "Error" not in outcome["refused"], outcome.get("refused")


def test_secret_value_with_a_newline_is_not_echoed(tmp_path, repo):
    layouts = [{"name": "tp8", "tp": 8, "env": {"HF_TOKEN": "hf_abc\ndef"}}]
    with pytest.raises(planner.PlanError) as err:
        planner.plan_host(planner_inputs({"sglang_layouts": layouts}, repo))
    assert "hf_abc" not in str(err.value) and "env.HF_TOKEN" in str(err.value)


def test_api_key_name_is_always_secret():
    from sglang_layouts import secrets

    assert secrets.is_secret("SGLANG_API_KEY", []) and not secrets.is_secret("OMP_NUM_THREADS")
    assert secrets.mask_text("key=abc abcd", ["abc", "abcd"]) == "key=*** ***"


def test_a_sites_secret_list_adds_to_the_default_patterns():
    from sglang_layouts import secrets

    assert secrets.is_secret("HF_TOKEN", ["MY_CRED"]) and secrets.is_secret("MY_CRED", ["MY_CRED"])
    assert secrets.is_secret("HF_ENDPOINT", [], "https://u:pw@mirror.example/")
    assert not secrets.is_secret("HF_ENDPOINT", [], "https://mirror.example/")


def test_secret_flags_come_from_the_flag_tables():
    """Every flag of every table that takes a key, a password or a token is a credential; no other."""
    from sglang_layouts.engines import SGLANG, VLLM, engine_flags, sglang_flag_tables
    from sglang_layouts.plan.validate import secret_flag

    found = set()
    for table in [engine_flags(SGLANG, v) for v in sglang_flag_tables()] + [engine_flags(VLLM)]:
        found |= {flag for flag, meta in table["flags"].items() if secret_flag(flag, meta)}
    assert {"--api-key", "--admin-api-key", "--ssl-keyfile-password", "--hf-token"} <= found
    assert not found & {
        "--ssl-keyfile",
        "--bucket-time-to-first-token",
        "--max-total-tokens",
        "--tokenizer-path",
    }


def test_reliability_doc_lists_every_case_and_only_tests_that_exist(repo):
    """docs/reliability.md is written from this table (ci/reliability.py --write); its tests exist."""
    import re

    from bad_inputs import OTHER_CASES

    doc = (repo / "docs" / "reliability.md").read_text()
    for cid in [c.id for c in CASES] + [c[0] for c in OTHER_CASES]:
        assert f"| {cid} |" in doc, f"{cid} missing: run ci/reliability.py --write"
    for node in set(re.findall(r"`(tests/[^`]+::[^`]+)`", doc)):
        path, name = node.split("::")
        assert f"def {name.split('[')[0]}(" in (repo / path).read_text(), node
