"""layout_failure: one class, message and evidence per failed layout, for the record and the console."""

from __future__ import annotations

from sglang_layouts.gate.failure import layout_failure

GATE = {
    "failed": True,
    "msg": "One or more items failed",
    "results": [
        {"failed": False},
        {
            "failed": True,
            "failure_class": "cuda_oom",
            "msg": "CUDA out of memory",
            "evidence": {"line": "OOM"},
        },
    ],
}


def test_a_units_gate_gives_its_class_message_and_evidence():
    out = layout_failure(GATE, "Gate", "box")
    assert out == {
        "failure_class": "cuda_oom",
        "msg": "CUDA out of memory",
        "evidence": {"line": "OOM", "task": "Gate", "host": "box"},
        "bench": {},
    }


def test_the_nodes_verdict_wins_and_names_the_node():
    nodes = {
        "failed": True,
        "failure_class": "rank_died",
        "host": "node1",
        "msg": "rank 1 died",
        "evidence": {"exit_status": 9},
        "nodes": {"node0": "ok", "node1": "rank_died"},
    }
    out = layout_failure(
        GATE, "Gate", "node0", service_failure=nodes, check_failed={"failure_class": "crashed"}
    )
    assert out["failure_class"] == "rank_died" and out["msg"] == "rank 1 died"
    assert out["evidence"] == {
        "exit_status": 9,
        "task": "Gate",
        "host": "node1",
        "nodes": {"node0": "ok", "node1": "rank_died"},
    }
    # a service failure that says it did not fail is no source
    assert (
        layout_failure(GATE, "Gate", "box", service_failure={"failed": False})["failure_class"] == "cuda_oom"
    )


def test_the_check_comes_before_the_failed_loop_item():
    check = {"failure_class": "crashed", "msg": "exit 1"}
    assert layout_failure(GATE, "Gate", "box", check_failed=check)["failure_class"] == "crashed"


def test_a_benchmark_on_a_dead_server_is_bench_unreachable_with_its_levels():
    partial = {
        "summary": {"server_died": {"detail": "connection refused at c=4", "level": 4}},
        "levels": [{}],
    }
    out = layout_failure({"msg": "benchmark failed"}, "Benchmark", "box", bench_partial=partial)
    assert out["failure_class"] == "bench_unreachable"
    assert out["msg"] == "connection refused at c=4: benchmark failed"
    assert out["evidence"]["server_died"] == {"detail": "connection refused at c=4", "level": 4}
    assert out["bench"] is partial
    # the check that found the server dead names its class; the benchmark's levels stay with it
    out = layout_failure(
        {"msg": "x"},
        "Benchmark",
        "box",
        check_failed={"failure_class": "crashed", "msg": "exit 1"},
        bench_partial=partial,
    )
    assert (out["failure_class"], out["msg"]) == ("crashed", "connection refused at c=4: exit 1")


def test_otherwise_the_failed_task_and_error_when_nothing_names_a_class():
    out = layout_failure({"msg": "Task failed: boom"}, "Deploy", "box")
    assert out == {
        "failure_class": "error",
        "msg": "Task failed: boom",
        "evidence": {"task": "Deploy", "host": "box"},
        "bench": {},
    }
    assert (
        layout_failure({"failure_class": "port_in_use", "msg": "taken"}, "Gate", "box")["failure_class"]
        == "port_in_use"
    )
    assert layout_failure(None)["failure_class"] == "error"
