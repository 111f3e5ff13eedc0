"""sglang_sim's pure parts: command line, cost model, wire formats, OOM arithmetic."""

from __future__ import annotations

import json

import pytest

from sglang_sim import flags
from sglang_sim.cost import DEFAULT_GPU_NAME, from_plan
from sglang_sim.engine import Req, Scheduler, eos_position
from sglang_sim.failures import format_size, oom_figures
from tests.helpers.demo import SEED_BOX, kimi_plan

MIB, GIB = 1 << 20, 1 << 30


def test_seed_flags_and_aliases_parse():
    a = flags.parse_args(
        [
            "--model-path",
            "/m",
            "--tensor-parallel-size",
            "8",
            "--ep",
            "2",
            "--pp-size",
            "1",
            "--enable-dp-attention",
            "--mem-fraction-static",
            "0.9",
            "--port",
            "31000",
        ]
    )
    assert (a.tp_size, a.ep_size, a.pp_size, a.enable_dp_attention) == (8, 2, 1, True)
    assert a.mem_fraction_static == 0.9 and a.port == 31000
    assert flags.parse_args(["--model", "/m"]).tp_size == 1


def test_unknown_flag_is_argparse_exit_2(capsys):
    with pytest.raises(SystemExit) as e:
        flags.parse_args(["--model-path", "/m", "--no-such-flag"])
    assert e.value.code == 2
    assert "error: unrecognized arguments: --no-such-flag" in capsys.readouterr().err


def test_every_flag_of_the_pinned_sglang_is_accepted():
    path = flags.flags_file()
    assert path is not None, (
        "the flag table of the SGLang the simulator stands in for is missing (make flags)"
    )
    dump = json.loads(path.read_text())["flags"]
    argv = []
    for flag, spec in dump.items():
        if flag == "--config":  # reads a YAML file, as SGLang does: test_config_file_keeps_the_key_off_argv
            continue
        if not spec.get("takes_value", True):
            argv.append(flag)
            continue
        choices = spec.get("choices")
        value = str(choices[0]) if choices else {"tp_size": "8", "port": "1234"}.get(spec["dest"], "1")
        argv += [flag, value] if flag != "--model-path" else [flag, "/m"]
    a = flags.parse_args(argv)
    assert a.tp_size == 8 and a.model_path == "/m"


def test_config_file_keeps_the_key_off_argv(tmp_path):
    """SGLang's --config FILE.yaml: each key becomes the flag of that spelling, the command line wins
    over the file. The role writes the file with secrets.api_key_config."""
    cfg = tmp_path / "key.yaml"
    cfg.write_text(json.dumps({"api-key": "s3cret", "tp-size": 4}))  # JSON is YAML
    a = flags.parse_args(["--model-path", "/m", "--config", str(cfg), "--tp-size", "8"])
    assert a.api_key == "s3cret" and a.tp_size == 8
    (tmp_path / "key.json").write_text("{}")
    with pytest.raises(SystemExit):
        flags.parse_args(["--model-path", "/m", "--config", str(tmp_path / "key.json")])


def test_config_file_key_spelled_as_the_dest_is_refused_like_sglang(tmp_path, capsys):
    """Real SGLang 0.5.16 on the H200 refused `{"api_key": ...}`: `unrecognized arguments: --api_key`
    (its ConfigArgumentMerger writes --<key> verbatim). The simulator refuses it the same way."""
    cfg = tmp_path / "key.yaml"
    cfg.write_text(json.dumps({"api_key": "s3cret"}))
    with pytest.raises(SystemExit) as e:
        flags.parse_args(["--model-path", "/m", "--config", str(cfg)])
    assert e.value.code == 2 and "unrecognized arguments: --api_key" in capsys.readouterr().err


def test_the_roles_key_file_is_read_by_the_simulator(tmp_path):
    from sglang_layouts.secrets import api_key_argv, api_key_config

    cfg = tmp_path / "key.yaml"
    cfg.write_text(api_key_config("sim", "s3cret"))
    a = flags.parse_args(["--model-path", "/m", *api_key_argv("sim", str(cfg))])
    assert a.api_key == "s3cret"
    assert api_key_argv("vllm") == ["--api-key", "${SGLANG_API_KEY}"]
    with pytest.raises(ValueError, match="--api-key"):
        api_key_config("vllm", "s3cret")


def test_the_simulator_runs_on_the_planners_speed_model(monkeypatch):
    """sglang_sim/cost.py holds no physics: its step is speed.py's for the same plan and host."""
    from sglang_layouts.speed import model_for

    monkeypatch.delenv("SGLANG_SIM_DECODE_STEP_MS", raising=False)
    monkeypatch.delenv("SGLANG_SIM_PREFILL_MS_PER_TOKEN", raising=False)
    hw = {**SEED_BOX, "gpu_memory_bandwidth_gbs": 1792}
    _, tp8_plan = kimi_plan(hw, tp=8)
    tp8 = from_plan(tp8_plan, hw)
    model, why = model_for(tp8_plan, {**hw, "gpu_name": DEFAULT_GPU_NAME})
    assert why is None
    for b in (1, 8, 64):
        assert tp8.decode_step(b, 1000) == model.decode_step(b, 1000)
    assert tp8.prefill(4096, 16) == model.prefill(4096, 16)
    pp8 = from_plan(kimi_plan(hw, pp=8)[1], hw)
    assert pp8.pp == 8 and tp8.pp == 1
    assert pp8.decode_step(1) > tp8.decode_step(1)  # PP is serial at batch 1
    nv = from_plan(tp8_plan, {**hw, "gpu_interconnect": "nvlink"})
    assert nv.decode_step(1) < tp8.decode_step(1)
    monkeypatch.setenv("SGLANG_SIM_DECODE_STEP_MS", "7")
    assert from_plan(tp8_plan, hw).decode_step(3) == 0.007


def test_generate_chunk_bytes_are_sglang_shaped():
    r = Req(
        rid='a"b',
        kind="generate",
        conn=None,
        stream=True,
        prompt_tokens=3,
        max_new=2,
        eos_at=None,
        seed=1,
        model="m",
        include_usage=False,
        arrival=10.0,
    )
    first = r.advance(10.5)
    second = r.advance(10.6)
    size, _, rest = first.partition(b"\r\n")
    body = rest[: int(size, 16)]
    ev = json.loads(body.decode().removeprefix("data: "))
    assert ev["meta_info"]["id"] == 'a"b' and ev["meta_info"]["completion_tokens"] == 1
    assert ev["meta_info"]["finish_reason"] is None and "e2e_latency" not in ev["meta_info"]
    size, _, rest = second.partition(b"\r\n")
    body = rest[: int(size, 16)].decode()
    events = [e.removeprefix("data: ") for e in body.split("\n\n") if e]
    assert events[-1] == "[DONE]"
    last = json.loads(events[0])
    assert last["meta_info"]["finish_reason"] == {"type": "length", "length": 2}
    assert last["meta_info"]["e2e_latency"] == pytest.approx(0.6)
    assert last["text"].startswith(ev["text"]) and r.token_times == [10.5, 10.6]


def test_eos_position_deterministic():
    assert eos_position(123, 50, ignore_eos=True) is None
    draws = [eos_position(s, 10_000, ignore_eos=False) for s in range(400)]
    assert draws == [eos_position(s, 10_000, ignore_eos=False) for s in range(400)]
    finite = [d for d in draws if d is not None]
    assert 150 < sum(finite) / len(finite) < 400  # geometric, mean 256


def test_format_size_and_oom_walk():
    assert format_size(672 * MIB) == "672.00 MiB" and format_size(94.97 * GIB) == "94.97 GiB"
    assert format_size(1000) == "1000 bytes"
    seq = [("a", 40 * GIB), ("b", 40 * GIB), ("c", 15 * GIB)]
    name, tried, allocated, free, reserved = oom_figures(seq, 94.97, 0.5)
    assert name == "c" and tried == 15 * GIB and allocated == 80 * GIB
    assert free + reserved == pytest.approx((94.97 - 0.5 - 80) * GIB)
    assert oom_figures(seq[:2], 94.97, 0.5) is None


def test_attn_dp_size_means_dp_attention():
    a = flags.parse_args(["--model-path", "/m", "--tp-size", "8", "--attn-dp-size", "2"])
    assert (a.dp_size, a.enable_dp_attention) == (2, True)


def test_seed_flags_without_the_dump(monkeypatch, capsys):
    monkeypatch.setattr(flags, "flags_file", lambda: None)
    a = flags.parse_args(["--model-path", "/m", "--tp", "4", "--ep-size", "2", "--grammar-backend", "none"])
    assert (a.tp_size, a.ep_size, a.grammar_backend) == (4, 2, "none")
    with pytest.raises(SystemExit) as e:
        flags.parse_args(
            ["--model-path", "/m", "--cuda-graph-max-bs", "8"]
        )  # real SGLang flag, not a seed one
    assert e.value.code == 2 and "unrecognized arguments" in capsys.readouterr().err


# -- multi-node rendezvous (sglang_sim/dist.py) ------------------------------------------------
def test_dist_init_addr_forms():
    from sglang_sim.dist import split_addr

    assert split_addr("10.0.0.1:20000") == ("10.0.0.1", 20000)
    assert split_addr("node1:50000") == ("node1", 50000)
    assert split_addr("[fd00::1]:50000") == ("fd00::1", 50000)
    assert split_addr("node1") == ("node1", 50000)
    assert split_addr(None) == ("127.0.0.1", 50000)


def test_dist_timeout_flag_beats_the_sim_variable():
    from types import SimpleNamespace

    from sglang_sim.dist import DEFAULT_TIMEOUT_S, dist_timeout_s

    assert dist_timeout_s(SimpleNamespace(dist_timeout=None), {}) == DEFAULT_TIMEOUT_S
    assert dist_timeout_s(SimpleNamespace(dist_timeout=None), {"SGLANG_SIM_DIST_TIMEOUT": "7"}) == 7
    assert dist_timeout_s(SimpleNamespace(dist_timeout=3), {"SGLANG_SIM_DIST_TIMEOUT": "7"}) == 3


def test_rendezvous_failure_lines_as_torch_writes_them():
    from sglang_sim import failures

    store = failures.store_timeout_traceback(600, 8, 16).splitlines()
    assert store[0] == "Traceback (most recent call last):"
    assert store[-1] == (
        "torch.distributed.DistStoreError: Timed out after 601 seconds waiting for clients. 8/16 clients joined."
    )
    client = failures.client_timeout_traceback(20, "node1", 50000, connected=False).splitlines()[-1]
    assert client == (
        "torch.distributed.DistNetworkError: The client socket has timed out after 20000ms while trying to "
        "connect to (node1, 50000)."
    )
    gloo = failures.peer_closed_traceback("node1", 51001).splitlines()[-1]
    assert gloo.endswith("Connection closed by peer [node1]:51001")


def test_rank0_rendezvous_and_watchdog_lines_classify_as_nccl_timeout():
    from sglang_layouts.gate import logclass

    from sglang_sim import failures

    text = "[2026-11-29 16:00:00 TP0] Scheduler hit an exception: " + failures.store_timeout_traceback(
        20, 8, 16
    )
    m = logclass.classify(text.splitlines())
    assert m is not None and m.cls == "nccl_timeout" and m.definitive


def test_prefix_cache_counts_leading_blocks_seen_since_the_last_flush():
    from sglang_sim.server import PrefixCache

    pc = PrefixCache()
    system = list(range(100, 164))  # 64 tokens = 4 blocks
    assert pc.lookup_insert(system + [1] * 20) == 0
    assert pc.lookup_insert(system + [2] * 20) == 64  # the shared system prompt
    assert pc.lookup_insert([9] * 84) == 0
    assert pc.hit_rate() == pytest.approx(64 / (3 * 84))
    pc.flush()
    assert pc.hit_rate() == 0.0 and pc.lookup_insert(system) == 0


def test_dp_attention_groups_step_at_the_batch_of_all_groups():
    """speed.py predicts a DP-attention step from the global batch (the MoE gathers every group's
    tokens); the simulator's groups must cost their steps the same way, or its peak drifts from the
    plan's (the demo's dp-attention: 812 simulated against 503 predicted)."""

    class Sim:
        schedulers = ()

        class args:
            enable_dp_attention = True

    class Running:
        def __init__(self, prompt, done):
            self.prompt_tokens, self.done = prompt, done

    sim = Sim()
    groups = [
        Scheduler(sim, dp_rank=d, max_running=8, kv_tokens=10_000, cost=None, log_prefix="") for d in range(2)
    ]
    sim.schedulers = groups
    groups[0].running = [Running(100, 1)] * 3
    groups[1].running = [Running(50, 2)] * 5
    assert groups[0].step_batch() == groups[1].step_batch() == (8, 3 * 101 + 5 * 52)
    sim.args.enable_dp_attention = False  # plain DP: independent engines, each its own batch
    assert groups[0].step_batch() == (3, 303) and groups[1].step_batch() == (5, 260)


def test_a_rendezvous_on_sglangs_default_port_is_planned_against_the_servers_own_port(repo):
    """A test's port picker may hand out 30000 (SGLang's default --port) as the rendezvous port: the
    simulator plans with the server's own --port, as real SGLang binds it, so only a real clash is
    refused."""
    from sglang_layouts.estimate.model import PlanError

    from sglang_sim.plan import make_plan

    model = str(repo / "models" / "qwen3-30b-a3b")
    hardware = {"gpu_count": 8, "gpu_memory_gib": 80.0, "gpu_interconnect": "nvlink"}

    def argv(port):
        return ["--model-path", model, "--tp-size", "16", "--nnodes", "2", "--node-rank", "0",
                "--dist-init-addr", "127.0.0.1:30000", "--port", str(port)]  # fmt: skip

    _planner, _spec, plan = make_plan(flags.parse_args(argv(31234)), hardware)
    assert plan["port"] == 31234
    assert plan["parallel"]["dist_init_addr"].endswith(":30000")
    with pytest.raises(
        PlanError, match="rendezvous port sglang_dist_init_port 30000 is also node rank 0's HTTP"
    ):
        make_plan(flags.parse_args(argv(30000)), hardware)
