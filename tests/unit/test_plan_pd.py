"""pd layouts (prefill/decode disaggregation): each role planned as a layout, its units, the router,
the refusals, one row of the plan table; its units are the layout's, as for replicas behind a router."""

import json

import pytest
from sglang_layouts.estimate.model import PlanError
from sglang_layouts.plan import planner
from sglang_layouts.plan.placement import argv_problems, router_workers, stop_order
from sglang_layouts.plan.table import plan_table

from tests.helpers.demo import DEMO_SERVING, SEED_BOX, plan_host

H200_ONE = {"gpu_count": 1, "gpu_memory_gib": 139.80, "gpu_interconnect": "single"}
# Llama 3.1 8B's published config.json values: a GQA model small enough for half an H200
LLAMA_8B = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 131072,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "torch_dtype": "bfloat16",
    "vocab_size": 128256,
}
OPEN = {**DEMO_SERVING, "host": "0.0.0.0", "api_key_set": True}
SHARED = {
    "name": "pd1",
    "pd": {
        "prefill": {"tp": 1, "mem_fraction_static": 0.4},
        "decode": {"tp": 1, "mem_fraction_static": 0.5},
        "transfer_backend": "mooncake_tcp",
        "share_gpus": True,
        "router": {"prefill_policy": "round_robin", "decode_policy": "cache_aware"},
    },
}


def kimi(repo):
    return {"name": "kimi-k2.6", "path": str(repo / "models" / "kimi-k2.6")}


def llama8b():
    return {"name": "llama-8b", "path": "/models/llama-8b", "hf_config": LLAMA_8B}


def plan(layouts, model, hardware=SEED_BOX, serving=OPEN, hosts=("h",), version="0.5.16"):
    return plan_host(layouts, model, hardware, serving, hosts, sglang_version=version)


def entry(doc, name):
    return next(e for e in doc["layouts"] if e["name"] == name)


def check_server_argv(argv, table):
    """Every flag of a server's argv is one SGLang's parser declares; a choice is one of its choices;
    a switch has no value, a flag with a value has one."""
    assert argv[:3] == ["python3", "-m", "sglang.launch_server"]
    args = argv[3:]
    i = 0
    while i < len(args):
        flag = args[i]
        assert flag in table, flag
        meta = table[flag]
        if meta["takes_value"]:
            value = args[i + 1]
            assert not value.startswith("--"), (flag, value)
            if meta.get("choices"):
                assert value in [str(c) for c in meta["choices"]], (flag, value)
            i += 2
        else:
            i += 1


def flag(argv, name):
    return argv[argv.index(name) + 1]


# -- the demo's seed box (8 x 94.97 GiB) and its hosts -----------------------------------------


@pytest.fixture(scope="module")
def seed(repo):
    layouts = [
        {"name": "tp8", "tp": 8},
        {"name": "pd-8-16", "pd": {"prefill": {"tp": 8}, "decode": {"tp": 8, "replicas": 2}}},
    ]
    return plan(layouts, kimi(repo), hosts=("h", "h2", "h3"))


def test_seed_pd_plans_each_role_like_a_layout(seed):
    tp8, pd = entry(seed, "tp8"), entry(seed, "pd-8-16")
    assert pd["verdict"] == "fits" and pd["failure"] is None and pd["reasons"] == []
    for role in ("prefill", "decode"):
        r = pd["pd"][role]
        assert r["verdict"] == "fits"
        # the same memory and KV arithmetic as the plain tp8 layout of the same model and card
        assert r["weights_gib_per_gpu"] == tp8["weights_gib_per_gpu"]
        assert r["kv_tokens"] == tp8["kv_tokens"] > 0
    assert pd["pd"]["decode"]["kv_tokens_total"] == 2 * tp8["kv_tokens"]
    assert pd["kv_tokens"] == pd["pd"]["decode"]["kv_tokens"]
    assert "conversations" in pd["pd"]["decode"]["holds"] and "in flight" in pd["pd"]["prefill"]["holds"]
    assert pd["gpus_used"] == 24 and pd["argv"] == []
    # the layout's units: prefill, decode, router in start order (each role's, unchanged)
    units = [*pd["pd"]["prefill"]["units"], *pd["pd"]["decode"]["units"], pd["pd"]["router"]["units"][0]]
    assert [u["name"] for u in pd["units"]] == [u["name"] for u in units]
    assert [u["role"] for u in pd["units"]] == ["prefill", "decode", "decode", "router"]
    # placed as a layout behind a router: the router's host serves and records it
    assert pd["placement"]["replicated"] and pd["placement"]["pd"]
    assert pd["placement"]["api_host"] == "h" and pd["placement"]["hosts"] == ["h", "h2", "h3"]
    assert pd["router"]["unit_name"] == pd["unit_name"] and pd["router"]["port"] == pd["port"] == 30000


def test_seed_pd_router_counts_every_server_and_stops_first(seed):
    pd = entry(seed, "pd-8-16")
    workers = router_workers(pd)
    assert workers["count"] == 3
    assert workers["by_role"] == {
        "prefill": ["http://127.0.0.1:30001"],
        "decode": ["http://h2:30002", "http://h3:30003"],
    }
    order = stop_order({"layouts": [pd]}, "h", "pd-8-16")
    router = pd["pd"]["router"]["units"][0]["name"]
    assert order["first"] == [router] and order["then"] == [pd["pd"]["prefill"]["units"][0]["name"]]
    # another layout on the same GPUs conflicts with the pd layout's units on this host
    tp8 = entry(seed, "tp8")
    assert router in tp8["conflicts"] and pd["pd"]["prefill"]["units"][0]["name"] in tp8["conflicts"]


def test_seed_pd_units_ports_and_hosts(seed):
    pd = entry(seed, "pd-8-16")["pd"]
    (p,) = pd["prefill"]["units"]
    d0, d1 = pd["decode"]["units"]
    assert [(u["host"], u["gpu_ids"], u["port"]) for u in (p, d0, d1)] == [
        ("h", list(range(8)), 30001),
        ("h2", list(range(8)), 30002),
        ("h3", list(range(8)), 30003),
    ]
    assert p["ports"] == [8998] and flag(p["argv"], "--disaggregation-bootstrap-port") == "8998"
    assert [u["role"] for u in (p, d0, d1, pd["router"])] == ["prefill", "decode", "decode", "router"]
    assert d0["env"]["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
    assert pd["router"]["argv"][:3] == ["python3", "-m", "sglang_router.launch_router"]
    router = pd["router"]["argv"][3:]
    assert router[:8] == [
        "--pd-disaggregation",
        "--prefill",
        "http://127.0.0.1:30001",
        "8998",
        "--decode",
        "http://h2:30002",
        "--decode",
        "http://h3:30003",
    ]
    assert flag(router, "--port") == "30000" and flag(router, "--prometheus-port") == "31000"


def test_seed_pd_argv_against_sglang_0_5_16(seed):
    table = planner.sglang_flags("0.5.16")["flags"]
    pd = entry(seed, "pd-8-16")["pd"]
    for role in ("prefill", "decode"):
        for unit in pd[role]["units"]:
            check_server_argv(unit["argv"], table)
            assert flag(unit["argv"], "--disaggregation-mode") == role
            assert flag(unit["argv"], "--disaggregation-transfer-backend") == "mooncake"
            assert flag(unit["argv"], "--port") == str(unit["port"])
    assert "--disaggregation-bootstrap-port" not in pd["decode"]["units"][0]["argv"]
    assert "--disaggregation-ib-device" not in pd["prefill"]["units"][0]["argv"]


def test_seed_pd_is_one_row_of_the_plan_table(seed):
    lines = plan_table(seed)
    row = next(line for line in lines if line.startswith("pd-8-16 "))
    assert "P8+D16 of 24" in row and "165,228/165,228" in row and "fits" in row
    assert sum(line.startswith("pd-8-16 ") for line in lines) == 1


def test_seed_pd_does_not_change_the_other_layouts(repo, seed):
    alone = plan([{"name": "tp8", "tp": 8}], kimi(repo), hosts=("h", "h2", "h3"))
    # the same plan but for the conflicts: the pd layout shares GPUs 0-7 of host h with tp8
    mine, theirs = entry(alone, "tp8"), entry(seed, "tp8")
    assert {k: v for k, v in mine.items() if k != "conflicts"} == {
        k: v for k, v in theirs.items() if k != "conflicts"
    }


def test_seed_pd_that_does_not_fit_is_oom_per_role(repo):
    doc = plan([{"name": "pd44", "pd": {"prefill": {"tp": 4}, "decode": {"tp": 4}}}], kimi(repo))
    pd = entry(doc, "pd44")
    assert pd["verdict"] == "oom" and pd["failure"] == "oom_at_load"
    assert pd["pd"]["prefill"]["units"][0]["gpu_ids"] == [0, 1, 2, 3]
    assert pd["pd"]["decode"]["units"][0]["gpu_ids"] == [4, 5, 6, 7]
    assert pd["reasons"][0].startswith("pd44: prefill: 4 GPUs, about")


def test_mla_model_may_differ_in_tp(repo):
    doc = plan(
        [
            {
                "name": "pd",
                "pd": {
                    "prefill": {"tp": 8},
                    "decode": {"tp": 8, "ep": 8, "dp": 8, "enable_dp_attention": True},
                },
            }
        ],
        kimi(repo),
        hosts=("h", "h2"),
    )
    assert entry(doc, "pd")["verdict"] == "fits"
    doc = plan(
        [{"name": "pd", "pd": {"prefill": {"tp": 8}, "decode": {"tp": 4, "pp": 2}}}],
        kimi(repo),
        hosts=("h", "h2"),
    )
    assert entry(doc, "pd")["verdict"] == "fits"


# -- one H200, both roles on its GPU (pd.share_gpus) -------------------------------------------


@pytest.fixture(scope="module")
def one_gpu():
    return plan([SHARED], llama8b(), hardware=H200_ONE, serving=DEMO_SERVING)


def test_one_h200_shared_gpu(one_gpu):
    pd = entry(one_gpu, "pd1")
    assert pd["verdict"] == "fits", pd["reasons"]
    p, d = pd["pd"]["prefill"], pd["pd"]["decode"]
    assert p["units"][0]["gpu_ids"] == d["units"][0]["gpu_ids"] == [0] and pd["gpus_used"] == 1
    assert p["mem_fraction_static"] == 0.4 and d["mem_fraction_static"] == 0.5
    # decode starts second and sizes its pool from what prefill's CUDA context and static pool leave
    assert p["gpu_memory_gib"] == 139.8 and d["gpu_memory_gib"] == pytest.approx(
        (139.8 - 1.0) * 0.6, abs=0.01
    )
    assert p["budget_gib"] == pytest.approx(0.4 * 139.8, abs=0.01)
    assert d["budget_gib"] == pytest.approx(0.5 * (139.8 - 1.0) * 0.6, abs=0.01)
    # Llama 3.1 8B: 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes = 128 KiB per token
    assert p["kv_bytes_per_token"] == d["kv_bytes_per_token"] == 131072
    for r in (p, d):
        free = r["budget_gib"] - r["weights_gib_per_gpu"] - r["mem_fraction_static"] * 1.0
        assert r["kv_tokens"] == pytest.approx(free * 2**30 / 131072, rel=0.01)
    assert any("starts after it" in n for n in pd["notes"])


def test_one_h200_argv_and_router(one_gpu):
    table = planner.sglang_flags("0.5.16")["flags"]
    pd = entry(one_gpu, "pd1")["pd"]
    p, d = pd["prefill"]["units"][0], pd["decode"]["units"][0]
    for unit in (p, d):
        check_server_argv(unit["argv"], table)
        assert flag(unit["argv"], "--disaggregation-transfer-backend") == "mooncake_tcp"
        assert flag(unit["argv"], "--host") == "127.0.0.1"
    assert (
        flag(p["argv"], "--mem-fraction-static") == "0.4"
        and flag(d["argv"], "--mem-fraction-static") == "0.5"
    )
    router = pd["router"]["argv"]
    assert "--prefill" in router and router[
        router.index("--prefill") + 1 : router.index("--prefill") + 3
    ] == [
        "http://127.0.0.1:30001",
        "8998",
    ]
    assert flag(router, "--decode") == "http://127.0.0.1:30002"
    assert (
        flag(router, "--prefill-policy") == "round_robin" and flag(router, "--decode-policy") == "cache_aware"
    )
    assert "--policy" not in router


def test_ib_device_is_rendered_when_named():
    lay = json.loads(json.dumps(SHARED))
    lay["pd"]["ib_device"] = "mlx5_0"
    pd = entry(plan([lay], llama8b(), hardware=H200_ONE, serving=DEMO_SERVING), "pd1")["pd"]
    for role in ("prefill", "decode"):
        assert flag(pd[role]["units"][0]["argv"], "--disaggregation-ib-device") == "mlx5_0"


@pytest.mark.parametrize(
    "backend, engine, imports",
    [
        ("mooncake_tcp", "sglang", [("mooncake.engine", "mooncake-transfer-engine")]),
        ("mooncake", "sglang", [("mooncake.engine", "mooncake-transfer-engine")]),
        ("nixl", "sglang", [("nixl._api", "nixl")]),
        # the simulator moves its KV itself: nothing to import
        ("mooncake_tcp", "sim", []),
    ],
)
def test_each_server_names_what_its_transfer_backend_imports(backend, engine, imports):
    lay = json.loads(json.dumps(SHARED))
    lay["pd"]["transfer_backend"] = backend
    doc = plan([lay], llama8b(), hardware=H200_ONE, serving={**DEMO_SERVING, "engine": engine})
    pd = entry(doc, "pd1")
    for unit in pd["units"]:
        got = [(i["module"], i["package"]) for i in unit.get("imports") or []]
        assert got == ([] if unit["role"] == "router" else imports), unit["name"]
        for i in unit.get("imports") or []:
            assert i["for"] == f"pd.transfer_backend {backend}"


def test_plan_json_carries_units_and_kv_per_role(one_gpu):
    doc = json.loads(json.dumps(one_gpu))
    pd = entry(doc, "pd1")["pd"]
    for role in ("prefill", "decode", "router"):
        assert pd[role]["units"]
    assert pd["prefill"]["kv_tokens"] > 0 and pd["decode"]["kv_tokens"] > 0


# -- refusals ----------------------------------------------------------------------------------


def shared(**pd):
    lay = json.loads(json.dumps(SHARED))
    lay["pd"].update(pd)
    return lay


def test_refuses_tp_mismatch_on_a_gqa_model():
    two = {**H200_ONE, "gpu_count": 8, "gpu_interconnect": "nvlink"}
    lay = {"name": "pd", "pd": {"prefill": {"tp": 2}, "decode": {"tp": 4}}}
    pd = entry(plan([lay], llama8b(), hardware=two, serving=DEMO_SERVING), "pd")
    assert pd["verdict"] == "invalid"
    assert "prefill tp 2 and decode tp 4 differ on LlamaForCausalLM" in pd["reasons"][0]
    assert "same tp" in pd["reasons"][0]


def test_refuses_a_transfer_backend_sglang_does_not_have():
    with pytest.raises(
        PlanError, match=r"pd.transfer_backend 'rdma' is not one SGLang 0.5.16 accepts .*mooncake_tcp"
    ):
        plan([shared(transfer_backend="rdma")], llama8b(), hardware=H200_ONE, serving=DEMO_SERVING)


def test_refuses_colliding_ports():
    lay = shared()
    lay["pd"]["decode"]["port"] = 30001  # prefill 0's HTTP port
    with pytest.raises(
        PlanError, match=r"port 30001 on h is both the HTTP port of prefill 0 and the HTTP port of decode 0"
    ):
        plan([lay], llama8b(), hardware=H200_ONE, serving=DEMO_SERVING)
    lay = shared()
    lay["pd"]["prefill"]["bootstrap_port"] = 30002  # decode 0's HTTP port
    with pytest.raises(
        PlanError, match=r"port 30002 on h is both the bootstrap port of prefill 0 and the HTTP port"
    ):
        plan([lay], llama8b(), hardware=H200_ONE, serving=DEMO_SERVING)


def test_refuses_shared_gpus_unless_allowed():
    pd = entry(plan([shared(share_gpus=False)], llama8b(), hardware=H200_ONE, serving=DEMO_SERVING), "pd1")
    assert pd["verdict"] == "invalid" and "do not fit on 1 host(s) of 1 GPUs" in pd["reasons"][0]
    lay = shared(share_gpus=False)
    lay["pd"]["prefill"]["gpus"] = [0]
    lay["pd"]["decode"]["gpus"] = [0]
    two = {**H200_ONE, "gpu_count": 2}
    pd = entry(plan([lay], llama8b(), hardware=two, serving=DEMO_SERVING), "pd1")
    assert pd["verdict"] == "invalid"
    assert "GPU 0 of h is used by prefill 0 and decode 0" in pd["reasons"][0]
    assert "pd.share_gpus: true" in pd["reasons"][0]


def test_a_shared_gpu_is_refused_only_when_both_pools_leave_no_room_outside_them():
    # SGLang's decode server, started second, takes its fraction of what prefill left: 0.4 + 0.7 fits
    # (139.8 x 0.6 x 0.3 = 25.2 GiB outside both pools), 0.4 + 0.99 does not (0.8 GiB)
    lay = shared()
    lay["pd"]["decode"]["mem_fraction_static"] = 0.7
    pd = entry(plan([lay], llama8b(), hardware=H200_ONE, serving=DEMO_SERVING), "pd1")
    assert pd["verdict"] == "fits", pd["reasons"]
    lay["pd"]["decode"]["mem_fraction_static"] = 0.99
    pd = entry(plan([lay], llama8b(), hardware=H200_ONE, serving=DEMO_SERVING), "pd1")
    assert pd["verdict"] == "invalid"
    assert "so 0.8 GiB stay outside both pools" in pd["reasons"][0], pd["reasons"]


@pytest.mark.parametrize(
    "change,needle",
    [
        ({"tp": 2}, "unknown key(s) tp"),
        ({"pd": {"prefill": {"tp": 1}}}, "pd.decode must be a mapping"),
        (
            {"pd": {"prefill": {"tp": 1}, "decode": {"tp": 1, "bootstrap_port": 9000}}},
            "unknown key(s) bootstrap_port",
        ),
        (
            {"pd": {"prefill": {"tp": 1, "args": {"disaggregation_mode": "decode"}}, "decode": {"tp": 1}}},
            "set it with the role",
        ),
        (
            {"pd": {"prefill": {}, "decode": {}, "router": {"policy": "fastest"}}},
            "pd.router.policy must be one of",
        ),
    ],
)
def test_refuses_bad_shapes(change, needle):
    lay = {"name": "pd1", "pd": {"prefill": {}, "decode": {}}, **change}
    with pytest.raises(PlanError) as e:
        plan([lay], llama8b(), hardware=H200_ONE, serving=DEMO_SERVING)
    assert needle in str(e.value)


def test_a_plain_layout_and_a_pd_layout_share_no_port():
    lay = shared()
    other = {"name": "tp1", "tp": 1, "gpus": [1], "port": 8998}
    two = {**H200_ONE, "gpu_count": 2}
    with pytest.raises(PlanError, match=r"both listen on port 8998 \(prefill bootstrap of pd1"):
        plan([lay, other], llama8b(), hardware=two, serving=DEMO_SERVING)


# Values of every type at every key of a pd layout: it plans or refuses with a message, never a
# raw Python error (KeyError, TypeError, ...).
ODD_VALUES = [None, "", "x", 0, -1, 1.5, True, [], [1], {}, {"a": 1}, "a\nb"]
ROLE_KEYS = ("tp", "pp", "ep", "dp", "enable_dp_attention", "nnodes", "replicas", "mem_fraction_static")
ROLE_KEYS += ("gpus", "port", "bootstrap_port", "args", "env")


def _pd_paths():
    yield ("pd",)
    for key in ("prefill", "decode", "transfer_backend", "ib_device", "router", "share_gpus"):
        yield ("pd", key)
    for role in ("prefill", "decode"):
        for key in ROLE_KEYS:
            yield ("pd", role, key)
    for key in ("policy", "prefill_policy", "decode_policy"):
        yield ("pd", "router", key)


def test_no_raw_python_error_for_pd_values_of_any_type():
    from sglang_layouts.plan.validate import plan_outcome

    raw = []
    for path in _pd_paths():
        for value in ODD_VALUES:
            lay = json.loads(json.dumps(SHARED))
            node = lay
            for step in path[:-1]:
                node = node[step]
            node[path[-1]] = value
            inputs = {
                "host": "h",
                "model": llama8b(),
                "layouts": [lay],
                "hardware": H200_ONE,
                "serving": DEMO_SERVING,
                "sglang_version": "0.5.16",
            }
            try:
                plan_outcome(inputs)
            except Exception as e:  # anything but a PlanError (which plan_outcome turns into data)
                raw.append(f"{'.'.join(path)} = {value!r}: {type(e).__name__}: {e}")
    assert not raw, "\n".join(raw[:20])


def test_a_prefill_fraction_out_of_range_is_the_prefill_roles_reason():
    lay = shared()
    lay["pd"]["prefill"]["mem_fraction_static"] = 1.5
    pd = entry(plan([lay], llama8b(), hardware=H200_ONE, serving=DEMO_SERVING), "pd1")
    assert pd["verdict"] == "invalid"
    assert "pd1: prefill: mem_fraction_static must be between 0 and 1, not 1.5." in pd["reasons"]
    assert pd["pd"]["decode"]["gpu_memory_gib"] == 139.8  # not planned on what a bad fraction leaves


def test_a_pd_unit_name_taken_by_another_layout_is_refused():
    other = {"name": "pd1-router", "tp": 1, "gpus": [1], "port": 31500}
    with pytest.raises(
        PlanError, match=r"layouts 'pd1' and 'pd1-router' both map to the unit sglang-llama-8b-pd1-router"
    ):
        plan([shared(), other], llama8b(), hardware={**H200_ONE, "gpu_count": 2}, serving=DEMO_SERVING)


def test_servers_on_other_hosts_need_a_public_bind(repo):
    lay = {"name": "pd", "pd": {"prefill": {"tp": 8}, "decode": {"tp": 8}}}
    with pytest.raises(PlanError, match=r"its servers on h2 bind 127.0.0.1, but the router on h calls them"):
        plan([lay], kimi(repo), serving=DEMO_SERVING, hosts=("h", "h2"))


def test_every_unit_of_a_pd_layout_can_start_even_a_forced_one(repo, seed):
    """The service role's check before anything starts (placement.argv_problems): every unit runs an
    engine's server or sglang-router; an oom pd layout (started with sglang_force) has its units too."""
    assert argv_problems(entry(seed, "pd-8-16")) == []
    doc = plan([{"name": "pd44", "pd": {"prefill": {"tp": 4}, "decode": {"tp": 4}}}], kimi(repo))
    oom = entry(doc, "pd44")
    assert oom["verdict"] == "oom" and argv_problems(oom) == []
    assert [u["role"] for u in oom["units"]] == ["prefill", "decode", "router"]
    # a plan without units, or a unit that is no engine: said in words, with what to do
    (msg,) = argv_problems({**oom, "units": []})
    assert "no unit to start" in msg and "make plan" in msg
    bad = {**oom, "units": [{**oom["units"][0], "argv": ["python3", "-m", "http.server"]}]}
    (msg,) = argv_problems(bad)
    assert "pd44-prefill0" in msg and "python3 -m sglang.launch_server" in msg
