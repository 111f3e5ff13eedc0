"""One rule per kind of value (plan/validate.py, names.py): what the matrix's refusals do not show."""

import pytest
from sglang_layouts.names import layout_name_problem
from sglang_layouts.plan import planner, table
from sglang_layouts.plan.validate import plan_outcome
from sglang_layouts.report import results

from tests.helpers.demo import DEMO_SERVING, SEED_BOX


def _inputs(repo, layouts, serving=DEMO_SERVING, hosts=("a",), **extra):
    return {
        "host": hosts[0],
        "model": {"name": "kimi-k2.6", "path": str(repo / "models" / "kimi-k2.6")},
        "layouts": layouts,
        "hardware": SEED_BOX,
        "serving": serving,
        "cluster": {
            "group": "g",
            "hosts": list(hosts),
            "addresses": [f"10.0.0.{i}" for i in range(len(hosts))],
        },
        **extra,
    }


def test_the_layouts_pp_layer_partition_splits_the_stages_not_the_controllers(repo, monkeypatch):
    monkeypatch.setenv("SGLANG_PP_LAYER_PARTITION", "1,60")  # the controller's: ignored
    layouts = [{"name": "pp2", "tp": 4, "pp": 2, "env": {"SGLANG_PP_LAYER_PARTITION": "20,41"}}]
    entry = planner.plan_host(_inputs(repo, layouts))["layouts"][0]
    stages = sorted({tuple(r["layers"]) for r in entry["ranks"]})
    assert stages == [(0, 19), (20, 60)]
    even = planner.plan_host(_inputs(repo, [{"name": "pp2", "tp": 4, "pp": 2}]))["layouts"][0]
    assert sorted({tuple(r["layers"]) for r in even["ranks"]}) == [(0, 29), (30, 60)]


def test_replicas_over_two_hosts_count_the_gpus_of_both(repo):
    serving = {**DEMO_SERVING, "host": "0.0.0.0", "api_key_set": True}
    doc = planner.plan_host(_inputs(repo, [{"name": "r", "tp": 8, "replicas": 2}], serving, hosts=("a", "b")))
    assert doc["layouts"][0]["gpus_used"] == 16
    row = next(line for line in table.plan_table(doc) if line.startswith("r "))
    assert "16 of 16" in row, row


def test_make_plan_says_which_flags_the_inventory_adds_and_why(repo):
    site = {**DEMO_SERVING, "reason": "the seed box"}
    lines = table.plan_table(planner.plan_host(_inputs(repo, [{"name": "tp8", "tp": 8}], site)))
    assert "--attention-backend triton (sglang_attention_backend)" in lines[1]
    assert "--trust-remote-code (sglang_trust_remote_code)" in lines[1] and lines[2] == "  why: the seed box"
    assert lines[3].startswith("model config: ") and "(sglang_model.path)" in lines[3]
    bare = {"mem_fraction_static": None, "context_length": None}
    lines = table.plan_table(planner.plan_host(_inputs(repo, [{"name": "tp8", "tp": 8}], bare)))
    # the budget the planner checks is always passed; nothing else
    assert lines[1].endswith("every layout: --mem-fraction-static 0.88 (sglang_mem_fraction_static)")


def test_a_new_site_gets_sglangs_defaults(repo):
    """group_vars/all/serving.yml leaves the seed box's flags to inventory/demo."""
    import yaml

    shared = yaml.safe_load((repo / "group_vars" / "all" / "serving.yml").read_text())
    demo = yaml.safe_load((repo / "inventory" / "demo" / "group_vars" / "sglang_hosts.yml").read_text())
    seed = {
        "sglang_attention_backend": "triton",
        "sglang_grammar_backend": "none",
        "sglang_trust_remote_code": True,
        "sglang_max_running_requests": 64,
    }
    assert all(shared[k] in (None, False) for k in seed)
    assert {k: demo[k] for k in seed} == seed and demo["sglang_serving_reason"]
    entry = planner.plan_host(_inputs(repo, [{"name": "tp8", "tp": 8}], {"host": "127.0.0.1"}))["layouts"][0]
    assert not {
        "--attention-backend",
        "--grammar-backend",
        "--trust-remote-code",
        "--max-running-requests",
    } & set(entry["argv"])


@pytest.mark.parametrize("name", ["all", "latest", "tp8 fp8kv", "../x", "tp%h", "é", "t" * 129, "", 8, None])
def test_the_result_store_refuses_the_names_the_planner_refuses(name):
    assert layout_name_problem(name) is not None
    with pytest.raises(results.ResultError):
        results.check_name("layout", name)


@pytest.mark.parametrize("name", ["tp8", "tp8-fp8kv", "moe_tp4.ep2", "a@b+c", "8", "t" * 128])
def test_names_both_accept(name, repo):
    assert layout_name_problem(name) is None and results.check_name("layout", name) == name
    assert "plan" in plan_outcome(_inputs(repo, [{"name": name, "tp": 8}]))


def test_a_public_bind_with_the_key_plans_and_the_replicas_reach_the_router(repo):
    serving = {**DEMO_SERVING, "host": "0.0.0.0", "api_key_set": True}
    entry = planner.plan_host(
        _inputs(repo, [{"name": "r", "tp": 8, "replicas": 2}], serving, hosts=("a", "b"))
    )["layouts"][0]
    assert [u["argv"][u["argv"].index("--host") + 1] for u in entry["units"][:2]] == ["0.0.0.0", "0.0.0.0"]
    assert entry["router"]["workers"] == ["http://10.0.0.0:30001", "http://10.0.0.1:30002"]


def test_the_stop_path_knows_only_the_plans_names_and_all(repo):
    from sglang_layouts.plan import placement

    doc = planner.plan_host(_inputs(repo, [{"name": "tp8", "tp": 8}]))
    assert placement.stop_order(doc, "a", "tp8")["all"] == ["sglang-kimi-k2-6-tp8.service"]
    assert placement.stop_order(doc, "a", "all")["all"] == ["sglang-kimi-k2-6-tp8.service"]
    with pytest.raises(
        planner.PlanError, match=r"-e layout=tp9: no layout of the plan has this name \(known: tp8\)"
    ):
        placement.stop_order(doc, "a", "tp9")


def test_a_copy_of_the_same_model_at_path_is_not_another_model(repo, tmp_path):
    """The roles copy hf_config_file to path (the demo, dummy weights): an edit the copy lags behind
    is the same model; a config of another architecture or shape is refused."""
    import json

    from sglang_layouts.estimate.model import load_model

    given = repo / "models" / "kimi-k2.6" / "config.json"
    copy = json.loads(given.read_text())
    copy["_note"] = "copied before an edit"
    (tmp_path / "config.json").write_text(json.dumps(copy))
    spec = load_model({"name": "k", "path": str(tmp_path), "hf_config_file": str(given)})
    assert spec.config_source == f"{given} (sglang_model.hf_config_file)"
    copy["text_config"]["num_hidden_layers"] = 8
    (tmp_path / "config.json").write_text(json.dumps(copy))
    with pytest.raises(planner.PlanError, match="name different models"):
        load_model({"name": "k", "path": str(tmp_path), "hf_config_file": str(given)})
