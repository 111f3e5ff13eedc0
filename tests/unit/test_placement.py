"""A layout is a list of units: the planner's units and placement, the stop order, the nodes' outcome."""

import pytest
from sglang_layouts.plan import placement, planner

SERVING = {
    "mem_fraction_static": 0.88,
    "context_length": 32768,
    "max_running_requests": 64,
    # replicas on another host than the router's must be reachable: a public bind, with the key
    "host": "0.0.0.0",
    "api_key_set": True,
    "base_port": 30000,
}
SEED_BOX = {"gpu_count": 8, "gpu_memory_gib": 94.97, "gpu_interconnect": "pcie"}
LAYOUTS = [
    {"name": "ep8", "tp": 8, "ep": 8},
    {"name": "two-nodes", "tp": 16, "ep": 16, "nnodes": 2},
    {"name": "replicas", "tp": 4, "ep": 4, "replicas": 2, "port": 31000},
    {"name": "spread", "tp": 8, "ep": 8, "replicas": 2, "port": 32000},
]


def plan_of(repo, host, hosts=("a", "b")):
    return planner.plan_host(
        {
            "host": host,
            "model": {"name": "kimi-k2.6", "path": str(repo / "models" / "kimi-k2.6")},
            "layouts": LAYOUTS,
            "hardware": SEED_BOX,
            "serving": SERVING,
            "cluster": {"group": "gpu", "hosts": list(hosts), "addresses": ["10.0.0.1", "10.0.0.2"]},
        }
    )


@pytest.fixture(scope="module")
def plans(repo):
    return {h: {e["name"]: e for e in plan_of(repo, h)["layouts"]} for h in ("a", "b")}


def test_a_plain_layout_is_one_server_unit_on_its_host(plans):
    lp = plans["b"]["ep8"]
    (unit,) = lp["units"]
    assert unit["role"] == "server" and unit["host"] == "b" and unit["gate"] == "ready"
    assert unit["name"] == lp["unit_name"] and unit["port"] == lp["port"] and unit["argv"] == lp["argv"]
    assert unit["gpu_ids"] == list(range(8))
    assert lp["placement"] == {
        "hosts": ["b"],
        "api_host": "b",
        "record_host": "b",
        "multinode": False,
        "replicated": False,
        "pd": False,
        "spans": False,
        "here": True,
        # bound to every address (0.0.0.0): probed through loopback
        "api_url": "http://127.0.0.1:30000",
    }
    assert unit["probe_url"] == "http://127.0.0.1:30000"
    assert placement.units_on(lp, "b") == [unit]


@pytest.mark.parametrize(
    "bind, url",
    [
        ("0.0.0.0", "http://127.0.0.1:31000"),
        ("::", "http://127.0.0.1:31000"),
        (None, "http://127.0.0.1:31000"),
        ("10.0.0.1", "http://10.0.0.1:31000"),
        ("::1", "http://[::1]:31000"),
    ],
)
def test_the_planner_says_where_each_unit_and_the_api_are_probed(bind, url):
    lp = {"port": 31000, "units": [{"port": 31001}, {"port": 31000}], "placement": {}}
    placement.add_probe_urls(lp, bind)
    assert lp["placement"]["api_url"] == url
    assert [u["probe_url"] for u in lp["units"]] == [url[:-1] + "1", url]


def test_every_unit_of_a_replica_layout_has_its_probe_url(plans):
    lp = plans["a"]["replicas"]
    assert [u["probe_url"] for u in lp["units"]] == [f"http://127.0.0.1:{u['port']}" for u in lp["units"]]
    assert lp["placement"]["api_url"] == f"http://127.0.0.1:{lp['port']}" == "http://127.0.0.1:31000"


def test_a_multi_node_layout_has_one_unit_per_node_with_its_rank(plans):
    lp = plans["b"]["two-nodes"]
    assert [(u["host"], u["node_rank"], u["gate"]) for u in lp["units"]] == [
        ("a", 0, "ready"),
        ("b", 1, "alive"),
    ]
    ranks = [u["argv"][u["argv"].index("--node-rank") + 1] for u in lp["units"]]
    assert ranks == ["0", "1"]
    # the flags differ only by --node-rank, and host b's own unit is the plan's own argv
    assert lp["units"][1]["argv"] == lp["argv"]
    assert lp["units"][0]["ports"] == [50000]  # rank 0 listens for the rendezvous
    assert lp["placement"]["hosts"] == ["a", "b"] and lp["placement"]["api_host"] == "a"
    assert lp["placement"]["spans"] and lp["placement"]["here"]
    assert [u["host"] for u in placement.units_on(lp, "b")] == ["b"]


def test_replicas_then_their_router_in_start_order(plans):
    lp = plans["a"]["replicas"]
    roles = [(u["role"], u["host"], u["port"], u["gpu_ids"]) for u in lp["units"]]
    assert roles == [
        ("replica", "a", 31001, [0, 1, 2, 3]),
        ("replica", "a", 31002, [4, 5, 6, 7]),
        ("router", "a", 31000, []),
    ]
    router = lp["units"][-1]
    assert router["gate"] == "router" and router["ports"] == [31000 + 1000]  # its Prometheus port
    assert router["argv"][:3] == ["python3", "-m", "sglang_router.launch_router"]
    assert lp["units"][0]["argv"][:3] == ["python3", "-m", "sglang.launch_server"]
    assert "--port" in lp["units"][0]["argv"] and "31001" in lp["units"][0]["argv"]
    assert lp["placement"]["replicated"] and not lp["placement"]["spans"]
    # host b takes no part in a layout whose replicas all fit on a
    assert plans["b"]["replicas"]["placement"]["here"] is False
    assert placement.units_on(plans["b"]["replicas"], "b") == []


def test_replicas_over_two_hosts_span_them_and_the_router_host_records(plans):
    lp = plans["b"]["spread"]
    assert [(u["role"], u["host"]) for u in lp["units"]] == [
        ("replica", "a"),
        ("replica", "b"),
        ("router", "a"),
    ]
    assert lp["placement"]["hosts"] == ["a", "b"] and lp["placement"]["record_host"] == "a"
    assert lp["placement"]["spans"] and lp["placement"]["here"]
    assert [u["role"] for u in placement.units_on(lp, "b")] == ["replica"]
    assert [u["role"] for u in placement.units_on(lp, "a")] == ["replica", "router"]


def test_stop_order_rank_0_and_routers_first(repo):
    doc = plan_of(repo, "a")
    order = placement.stop_order(
        doc, "a", installed=["sglang-old-layout.service", "ssh.service", "vllm-x.service"]
    )
    names = {e["name"]: e for e in doc["layouts"]}
    first, then = order["first"], order["then"]
    assert names["ep8"]["unit_name"] in first and names["two-nodes"]["unit_name"] in first
    assert names["replicas"]["router"]["unit_name"] in first
    assert {r["unit_name"] for r in names["replicas"]["replicas"]} <= set(then)
    # units of ours that no layout names any more go too; nobody else's
    assert "sglang-old-layout.service" in first and "vllm-x.service" in first and "ssh.service" not in first
    assert order["all"] == first + then
    on_b = placement.stop_order(plan_of(repo, "b"), "b", layout="two-nodes")
    assert on_b == {
        "first": [],
        "then": [names["two-nodes"]["unit_name"]],
        "all": [names["two-nodes"]["unit_name"]],
    }


def test_first_failure_names_the_step_and_the_unit():
    ok = {"changed": False}
    bad = {
        "failure_class": "cuda_oom",
        "msg": "x",
        "evidence": {"line": "OOM"},
        "__sglang_service_unit": {"name": "u1"},
    }
    assert placement.first_failure([ok, ok], "gate") == {}
    assert placement.first_failure([ok, bad], "gate") == {
        "failure_class": "cuda_oom",
        "msg": "x",
        "evidence": {"line": "OOM"},
        "step": "gate",
        "unit": "u1",
    }


def test_nodes_outcome_blames_the_lost_rank_not_rank_0():
    rank0 = {"failure_class": "nccl_timeout", "msg": "watchdog", "evidence": {}, "step": "check"}
    rank1 = {"failure_class": "crashed", "msg": "exit 137", "evidence": {"exit_status": 137}, "step": "check"}
    out = placement.nodes_outcome([rank0, rank1], ["a", "b"], ["a", "b"], "two-nodes", "check")
    assert (
        out["failed"] and out["failure_class"] == "rank_died" and out["host"] == "b" and out["node_rank"] == 1
    )
    assert [n["host"] for n in out["nodes"]] == ["a", "b"]
    gone = placement.nodes_outcome([{}, {}], ["a", "b"], ["a"], "two-nodes", "gate")
    assert gone["failure_class"] == "rank_died" and gone["host"] == "b" and "left the play" in gone["msg"]
    assert placement.nodes_outcome([{}, {}], ["a", "b"], ["a", "b"]) == {"failed": False, "nodes": []}
    # replicas: no rank rule, the first failed host decides
    rep = placement.nodes_outcome([{}, rank1], ["a", "b"], ["a", "b"], "spread", "gate", multinode=False)
    assert rep["failure_class"] == "crashed" and rep["host"] == "b"


def _router_results(healthy=2, readiness=200, e2e=None, alive_failure=None, e2e_alive_failure=None):
    unit = {"__sglang_service_unit": {"name": "sglang-m-pd.router.service"}}
    workers = [{"url": f"http://127.0.0.1:3000{i}", "is_healthy": i < healthy} for i in range(2)]
    return {
        "alive": [{**unit, **(alive_failure or {"ok": True})}],
        "workers": [] if alive_failure else [{**unit, "status": 200, "json": {"workers": workers}}],
        "readiness": [{**unit, "status": readiness}],
        "e2e": [{**unit, **e2e}] if e2e else [{**unit, "skipped": True}],
        "e2e_alive": [{**unit, **(e2e_alive_failure or {"ok": True})}] if e2e else [],
    }


def test_the_router_host_is_ready_once_every_server_counts_and_one_request_went_through():
    url = "http://127.0.0.1:30000"
    assert placement.router_outcome(_router_results(), 2, url, 120) == {}
    assert placement.router_outcome(_router_results(e2e={"status": 200}), 2, url, 120) == {}
    # a host of the layout without the router: no readiness result, nothing to decide
    assert placement.router_outcome({"alive": [], "readiness": []}, 2, url, 120) == {}


def test_the_router_hosts_failures_name_their_step_and_what_was_counted():
    url = "http://127.0.0.1:30000"
    crashed = {"failure_class": "crashed", "msg": "router exited 1", "evidence": {"line": "ImportError"}}
    out = placement.router_outcome(_router_results(alive_failure=crashed), 2, url, 120)
    assert out["step"] == "router" and out["failure_class"] == "crashed"
    assert out["unit"] == "sglang-m-pd.router.service"

    short = placement.router_outcome(_router_results(healthy=1), 2, url, 120)
    assert short["failure_class"] == "ready_timeout" and short["step"] == "router"
    assert "counts 1 healthy workers of 2 after 120 s (/readiness 200)" in short["msg"]
    assert short["evidence"]["workers"]["workers"][1]["is_healthy"] is False
    assert "(/readiness 503)" in placement.router_outcome(_router_results(readiness=503), 2, url, 120)["msg"]

    refused = placement.router_outcome(
        _router_results(e2e={"status": 500, "content": "x" * 500}), 2, url, 120
    )
    assert refused["step"] == "router end to end" and "HTTP 500 " + "x" * 300 in refused["msg"]
    assert not refused["msg"].endswith("x" * 301)
    transfer = {
        "failure_class": "kv_transfer_failed",
        "msg": "KV transfer failed",
        "evidence": {"line": "..."},
    }
    out = placement.router_outcome(
        _router_results(e2e={"status": 500}, e2e_alive_failure=transfer), 2, url, 120
    )
    # the servers' own failure line says more than the router's HTTP status
    assert (out["failure_class"], out["step"]) == ("kv_transfer_failed", "router end to end")


def test_the_routers_worker_list_counts_healthy_workers_and_names_every_registered_one():
    answer = {
        "workers": [
            {"url": "http://127.0.0.1:30001", "is_healthy": True, "worker_type": "prefill"},
            {"url": "http://127.0.0.1:30002", "is_healthy": False, "worker_type": "decode"},
        ],
        "total": 2,
    }
    assert placement.router_registered(answer) == {
        "healthy": 1,
        "urls": ["http://127.0.0.1:30001", "http://127.0.0.1:30002"],
    }
    # no answer yet, or an error page instead of the list: nothing counts
    for nothing in (None, {}, {"error": "not ready"}, "503 Service Unavailable", {"workers": None}):
        assert placement.router_registered(nothing) == {"healthy": 0, "urls": []}
