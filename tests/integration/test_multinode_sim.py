"""Multi-node SGLang acted out by two simulator processes on loopback (docs/sglang.md 2, 3.4, 3.5).

Same command on both but --node-rank and --port; rank 0 hosts the rendezvous at --dist-init-addr.
"""

from __future__ import annotations

import json
import signal
import socket
import time
import urllib.error
import urllib.request

import pytest
from sglang_layouts.gate import logclass

from sglang_sim.launcher import SimProcess, free_port

# A timeout under test is short only where nothing races it (the other node is never started);
# where the nodes must meet, the rendezvous timeout is a ceiling that only a hang reaches.
TIMEOUT = 3  # the rendezvous or collective timeout a test waits out
MEET = 120  # SGLANG_SIM_DIST_TIMEOUT where every node is started and must join


def common(dist_port: int, *extra: str) -> list[str]:
    return ["--tp-size", "16", "--nnodes", "2", "--dist-init-addr", f"127.0.0.1:{dist_port}", *extra]


def node(rank: int, dist_port: int, *extra: str, env: dict | None = None) -> SimProcess:
    """A node that meets its peers: the rendezvous waits up to MEET s; a lost peer's collectives
    time out after TIMEOUT s (the NCCL watchdog)."""
    return SimProcess(
        [*common(dist_port, *extra), "--node-rank", str(rank)],
        env={
            "SGLANG_SIM_DIST_TIMEOUT": str(MEET),
            "SGLANG_SIM_NCCL_TIMEOUT_SECONDS": str(TIMEOUT),
            **(env or {}),
        },
    )


def alone(rank: int, dist_port: int, *extra: str, env: dict | None = None) -> SimProcess:
    """A node whose peers are never started: its rendezvous times out after TIMEOUT s."""
    return node(rank, dist_port, *extra, env={"SGLANG_SIM_DIST_TIMEOUT": str(TIMEOUT), **(env or {})})


def get(url: str, timeout: float = 60.0) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def classify(text: str) -> str | None:
    m = logclass.classify(text.splitlines())
    return m.cls if m else None


def test_ready_only_after_every_node_joined():
    d = free_port()
    with node(0, d) as r0:
        r0.wait_for_line("Init torch distributed begin.")
        r0.wait_listening(d)  # the store is up: rank 0 waits at the rendezvous, API port closed
        assert "Init torch distributed ends" not in r0.text
        assert "Load weight begin" not in r0.text
        assert not port_open(r0.port)
        with node(1, d) as r1:
            r0.wait_ready()
            r0.wait_for_line("Init torch distributed ends")
            # rank 0 logs its own ranks only, and the TP0 summary line
            assert "[" in r0.text and " TP7]" in r0.text and " TP8]" not in r0.text
            assert "max_total_num_tokens=" in r0.text
            # rank 1: its ranks, no API, no ready line, no uvicorn INFO lines (dummy server at warning level)
            r1.wait_for_line(" TP15] Capture cuda graph end")
            r1.wait_listening()
            assert " TP0]" not in r1.text and "max_total_num_tokens=" not in r1.text
            assert "fired up" not in r1.text and "Uvicorn running" not in r1.text
            for path in ("/health", "/health_generate", "/ping"):
                assert get(r1.url(path)) == 200, path
            assert get(r1.url("/generate")) == 404
            assert get(r1.url("/v1/models")) == 404
            assert get(r0.url("/health")) == 200
            body = json.dumps(
                {"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 4, "ignore_eos": True}}
            )
            with urllib.request.urlopen(
                urllib.request.Request(r0.url("/generate"), data=body.encode()), timeout=120
            ) as r:
                assert json.loads(r.read())["meta_info"]["completion_tokens"] == 4


def test_rank1_never_started_times_out_on_rank0():
    d = free_port()
    with alone(0, d) as r0:
        rc = r0.wait_exit()
        elapsed = time.monotonic() - r0.started_at
        text = r0.text
    assert rc == -9  # Scheduler hit an exception -> SIGQUIT -> kill_process_tree: SIGKILL of itself
    assert elapsed >= TIMEOUT  # it waited the timeout out (how much longer is the host's speed)
    assert "Scheduler hit an exception: Traceback (most recent call last):" in text
    assert (
        f"torch.distributed.DistStoreError: Timed out after {TIMEOUT + 1} seconds waiting for clients. "
        "8/16 clients joined." in text
    )
    assert "Received sigquit from a child process. It usually means the child failed." in text
    assert "Load weight begin" not in text and "fired up" not in text
    assert classify(text) == "nccl_timeout"


def test_dist_timeout_flag_overrides_the_sim_default():
    d = free_port()
    with node(0, d, "--dist-timeout", "1", env={"SGLANG_SIM_DIST_TIMEOUT": "60"}) as r0:
        rc = r0.wait_exit()
    assert rc == -9
    # the timeout it waited is in its message: torch's store says timeout + 1 (61 had 60 won)
    assert "Timed out after 2 seconds waiting for clients. 8/16 clients joined." in r0.text


def test_rank1_without_rank0_times_out_connecting():
    d = free_port()
    with alone(1, d) as r1:
        rc = r1.wait_exit()
    assert rc == -9
    assert (
        f"torch.distributed.DistNetworkError: The client socket has timed out after {TIMEOUT * 1000}ms "
        f"while trying to connect to (127.0.0.1, {d})." in r1.text
    )
    assert not port_open(r1.port)


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM"])
def test_rank1_dies_after_ready_rank0_logs_nccl_timeout_and_exits(how):
    d = free_port()
    with node(0, d) as r0, node(1, d) as r1:
        r0.wait_ready()
        r1.wait_listening()
        assert get(r1.url("/health")) == 200
        t_kill = time.monotonic()
        if how == "SIGKILL":
            r1.proc.kill()
        else:
            r1.proc.send_signal(signal.SIGTERM)
        rc1 = r1.wait_exit()
        rc0 = r0.wait_exit()
        t_line, line = r0.wait_for_line("Watchdog caught collective operation timeout")
        text = r0.text
    if how == "SIGTERM":
        # 0.5.23 on node_rank >= 1: a warning; under systemd the schedulers die of the SIGTERM too
        assert rc1 == 0
        assert "SIGTERM received on node_rank 1; waiting for the rank-0 ShutdownReq broadcast" in r1.text
        assert "Scheduler or DataParallelController" in r1.text and "terminated with -15" in r1.text
    else:
        assert rc1 == -9
    assert rc0 == -9
    assert t_line - t_kill >= TIMEOUT  # the watchdog waited the collective timeout out after the loss
    assert f"Timeout(ms)={TIMEOUT * 1000})" in line and "OpType=ALLREDUCE" in line
    assert "Subprocess scheduler_0 (pid=" in text and "crashed with exit code -6" in text
    assert "SIGQUIT received" in text
    assert classify(text) == "nccl_timeout"


def test_requests_stall_while_the_peer_is_gone():
    """A request sent after rank 1 is gone is never answered: rank 0 dies of the watchdog first.

    Rank 1's socket is closed before it can be reaped, so rank 0's loop reads that close before
    the request's bytes: no race. The request's own timeout is a ceiling that only a hang reaches."""
    d = free_port()
    with node(0, d) as r0, node(1, d) as r1:
        r0.wait_ready()
        r1.proc.kill()
        r1.wait_exit()
        body = json.dumps({"input_ids": [1], "sampling_params": {"max_new_tokens": 4, "ignore_eos": True}})
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)) as ei:
            urllib.request.urlopen(
                urllib.request.Request(r0.url("/generate"), data=body.encode()), timeout=120
            )
        assert not isinstance(ei.value, TimeoutError)
        assert r0.wait_exit() == -9
        r0.wait_for_line("Watchdog caught collective operation timeout")


def test_rank0_dies_rank1_logs_the_lost_peer_and_exits():
    d = free_port()
    with node(0, d) as r0, node(1, d) as r1:
        r0.wait_ready()
        r0.proc.kill()
        rc1 = r1.wait_exit()
        text = r1.text
    assert rc1 == -9
    assert "Scheduler hit an exception: Traceback" in text
    assert "Connection closed by peer [127.0.0.1]:" in text
    assert "Received sigquit from a child process" in text
    assert classify(text) is not None


def test_rank0_graceful_stop_stops_rank1_cleanly():
    d = free_port()
    with node(0, d) as r0, node(1, d) as r1:
        r0.wait_ready()
        r1.wait_for_line(" TP15] Capture cuda graph end")
        r0.proc.send_signal(signal.SIGTERM)
        rc0 = r0.wait_exit()
        rc1 = r1.wait_exit()
        text = r1.text
    assert rc0 == -9  # SGLang's SIGTERM path ends in SIGKILL of itself
    assert rc1 == 0  # ShutdownReq: the schedulers leave their loops
    assert "terminated with 0" in text and "Scheduler hit an exception" not in text
    assert classify(text) is None


def test_rank1_joins_late_within_the_timeout():
    """Rank 1 started once rank 0 already waits at its store (not at the same time) still joins."""
    d = free_port()
    with node(0, d) as r0:
        r0.wait_listening(d)
        with node(1, d):
            r0.wait_ready()


def test_a_fatal_message_from_a_node_counts_as_its_death():
    """The rendezvous protocol itself: HELLO, READY, then FATAL from the other end."""
    d = free_port()
    with node(0, d) as r0:
        r0.wait_listening(d)
        with socket.create_connection(("127.0.0.1", d), timeout=60) as peer:
            peer.sendall(b"SGLANG_SIM HELLO 1 2\n")
            assert peer.makefile("rb").readline() == b"SGLANG_SIM READY\n"
            r0.wait_ready()
            t = time.monotonic()
            peer.sendall(b"SGLANG_SIM FATAL scheduler died\n")
            assert r0.wait_exit() == -9
            t_line, _ = r0.wait_for_line("Watchdog caught collective operation timeout")
            assert t_line - t >= TIMEOUT
