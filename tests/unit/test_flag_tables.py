"""One SGLang flag table per release, picked by the host's sglang_version.

The tables are dumps of each release's own parser (make flags SGLANG_VERSION=...); the
differences asserted here are real ones between SGLang 0.5.16 and 0.5.23.
"""

import json

import pytest
import yaml
from sglang_layouts import engines
from sglang_layouts.estimate.model import PlanError
from sglang_layouts.plan import planner
from test_planner import DEMO_SERVING, SEED_BOX

TABLES = engines.sglang_flag_tables()


def plan(repo, layouts, sglang_version):
    inputs = {
        "host": "h",
        "model": {"name": "kimi-k2.6", "path": str(repo / "models" / "kimi-k2.6")},
        "layouts": layouts,
        "hardware": SEED_BOX,
        "serving": DEMO_SERVING,
    }
    if sglang_version is not None:
        inputs["sglang_version"] = sglang_version
    return planner.plan_host(inputs)


def test_tables_for_both_known_releases_each_named_by_its_version(repo):
    assert {"0.5.16", "0.5.23"} <= set(TABLES)
    for version in TABLES:
        path = repo / "module_utils" / "sglang_layouts" / "data" / "sglang_flags" / f"{version}.json"
        assert json.loads(path.read_text())["sglang_version"] == version


@pytest.mark.parametrize("version", ["0.5.16", "0.5.23"])
def test_the_plan_uses_the_table_of_the_hosts_sglang_version(repo, version):
    doc = plan(repo, [{"name": "ep8", "tp": 8, "ep": 8}], version)
    assert doc["sglang_version"] == version
    assert planner.sglang_flags(version)["sglang_version"] == version


def test_without_a_version_the_newest_table(repo):
    assert plan(repo, [{"name": "ep8", "tp": 8, "ep": 8}], None)["sglang_version"] == TABLES[-1]


# Each pair: a flag (or value) one release's parser has and the other's has not.
ONLY_0523 = {"enable_layernorm_sp": True}  # 0.5.23 adds --enable-layernorm-sp
ONLY_0516 = {"torchao_config": "int8wo"}  # 0.5.23 drops --torchao-config


def test_a_flag_only_0_5_23_has(repo):
    assert "--enable-layernorm-sp" in planner.sglang_flags("0.5.23")["flags"]
    assert "--enable-layernorm-sp" not in planner.sglang_flags("0.5.16")["flags"]
    lay = {"name": "ep8", "tp": 8, "ep": 8, "args": ONLY_0523}
    assert "--enable-layernorm-sp" in by_name(plan(repo, [lay], "0.5.23"))["ep8"]["flags"]
    with pytest.raises(PlanError, match=r"layout ep8: SGLang 0\.5\.16 has no flag --enable-layernorm-sp"):
        plan(repo, [lay], "0.5.16")


def test_a_flag_only_0_5_16_has(repo):
    lay = {"name": "ep8", "tp": 8, "ep": 8, "args": ONLY_0516}
    assert "--torchao-config" in by_name(plan(repo, [lay], "0.5.16"))["ep8"]["flags"]
    with pytest.raises(PlanError, match=r"SGLang 0\.5\.23 has no flag --torchao-config"):
        plan(repo, [lay], "0.5.23")


def test_a_choice_only_0_5_16_has(repo):
    lay = {"name": "ep8", "tp": 8, "ep": 8, "args": {"kv_cache_dtype": "fp4_e2m1"}}
    assert by_name(plan(repo, [lay], "0.5.16"))["ep8"]["verdict"] != "invalid"
    with pytest.raises(PlanError, match=r"--kv-cache-dtype must be one of .*not 'fp4_e2m1'"):
        plan(repo, [lay], "0.5.23")


def test_a_version_without_a_table_names_the_command_that_makes_one(repo):
    with pytest.raises(PlanError) as e:
        plan(repo, [{"name": "ep8", "tp": 8, "ep": 8}], "0.5.17")
    msg = str(e.value)
    assert "SGLang 0.5.17 has no flag table" in msg
    assert "module_utils/sglang_layouts/data/sglang_flags/0.5.17.json" in msg
    assert "`make flags SGLANG_VERSION=0.5.17`" in msg
    assert "0.5.16, 0.5.23" in msg


@pytest.mark.parametrize("bad", ["../0.5.23", "latest", "0.5.23/x"])
def test_a_version_that_is_no_version_never_names_a_file(repo, bad):
    with pytest.raises(PlanError, match="is not an SGLang version"):
        plan(repo, [{"name": "ep8", "tp": 8, "ep": 8}], bad)


# Rendered only where the release has it (render.dp_attention_flags); refused under args: where it does.
ONLY_WHERE_PRESENT = {"--attn-dp-size"}


@pytest.mark.parametrize("version", TABLES)
def test_every_flag_the_planner_renders_exists_in_every_table(version):
    flags = planner.sglang_flags(version)["flags"]
    rendered = [
        *engines.SGLANG.structural_flags,
        *engines.SGLANG.serving_flags.values(),
        "--trust-remote-code",
    ]
    assert [f for f in rendered if f not in flags and f not in ONLY_WHERE_PRESENT] == []


def test_attn_dp_size_is_structural_where_the_release_has_it(repo):
    lay = {"name": "ep8", "tp": 8, "ep": 8, "args": {"attn_dp_size": 2}}
    with pytest.raises(PlanError, match=r"set --attn-dp-size with dp: with enable_dp_attention: true"):
        plan(repo, [lay], "0.5.23")


def test_an_empty_table_says_how_to_remake_it(tmp_path, monkeypatch):
    # `python ci/dump_sglang_flags.py > .../<version>.json` leaves an empty file when sglang does not import.
    (tmp_path / "sglang_flags").mkdir()
    (tmp_path / "sglang_flags" / "9.9.9.json").write_text("")
    monkeypatch.setattr(engines, "DATA", str(tmp_path))
    with pytest.raises(PlanError, match=r"not a flag table .*make flags SGLANG_VERSION=9\.9\.9"):
        engines.engine_flags(engines.SGLANG, "9.9.9")


def test_every_release_with_a_flag_table_has_a_torch_pin(repo):
    shared = yaml.safe_load((repo / "group_vars" / "all" / "engine.yml").read_text())
    pins = shared["sglang_torch_pins"]
    assert pins["0.5.16"] == "2.11.0" and pins["0.5.23"] == "2.14.1"  # the wheels' torch==
    assert sorted(pins, key=engines._version_key) == TABLES
    assert shared["sglang_version"] in pins


def by_name(doc):
    return {e["name"]: e for e in doc["layouts"]}


def test_the_simulator_takes_the_flags_of_the_release_it_stands_in_for(monkeypatch, capsys):
    from sglang_sim import flags as sim_flags

    argv = ["--model-path", "/m", "--torchao-config", "int8wo"]
    monkeypatch.setattr(sim_flags, "SGLANG_VERSION", "0.5.16")
    assert sim_flags.parse_args(argv).torchao_config == "int8wo"
    monkeypatch.setattr(sim_flags, "SGLANG_VERSION", "0.5.23")
    with pytest.raises(SystemExit) as e:
        sim_flags.parse_args(argv)
    assert e.value.code == 2
    assert "unrecognized arguments: --torchao-config" in capsys.readouterr().err
