"""How fast does the readiness gate give its verdict after a fatal line or a process exit?

`make bench-health` (or: .venv/bin/python benchmarks/bench_health.py [--runs N] [--json FILE])
`make bench-health-replay` (benchmarks/bench_health.py --replay): the real SGLang logs instead.

Each run starts the simulated engine (sglang_sim, SGLang's log lines and exit paths) under the
process supervisor (module_utils/sglang_layouts/serve/supervisor.py) with a fault, and runs the same
gate as library/sglang_health.py (health.wait_ready, poll 0.2 s, grace 30 s) on its log file.
An independent watcher polls the log file and the process group every 5 ms and records the
first moment the fatal line is on disk or the process has exited, and the last moment a
traceback's exception line reached the file (the final exception: the gate reads a traceback
whole). The latencies printed are verdict time minus those moments (median, p90, max over N runs
per fault; `exc s`: seconds from the final exception line to the verdict):

  oom_at_load      tp4ep2 on 8 x 94.97 GiB: torch.OutOfMemoryError at load, then SIGKILL of itself
  crash            SGLANG_SIM_FAULT=crash_after:6: scheduler exception (generic lines), SIGKILL
  nccl_timeout     SGLANG_SIM_FAULT=nccl_timeout_after:5: torch's NCCL watchdog lines, abort
  exit_only        a process that exits with status 1 and logs nothing fatal
  bad_args         an unknown flag: argparse's error, exit status 2
  jit_missing      SGLANG_SIM_FAULT=jit_missing:ninja: the first graph capture's JIT build cannot
                   run ninja (FileNotFoundError, re-raised as `Capture cuda graph failed`), SIGKILL
  gpu_unavailable  tp16 on the 8-GPU host: a rank's `CUDA error: invalid device ordinal`, SIGKILL

For crash/nccl_timeout the server first becomes ready, then the gate watches (its HTTP probe
points at a closed port so only the log and the process can end the wait) while the
benchmark sends the requests that trigger the fault. Target: every verdict within 2 s.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "module_utils"))

from sglang_layouts.gate import health, logclass  # noqa: E402
from sglang_layouts.serve import supervisor  # noqa: E402

MODEL = REPO / "models" / "kimi-k2.6"
LAYOUT_FLAGS = {
    "tp8": ["--tp-size", "8"],
    "tp4ep2": ["--tp-size", "4", "--ep-size", "2"],
    "tp16": ["--tp-size", "16"],
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sim_argv(port: int, layout: str, extra=()) -> list[str]:
    return [
        sys.executable,
        "-m",
        "sglang_sim",
        "--model-path",
        str(MODEL),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *LAYOUT_FLAGS[layout],
        "--mem-fraction-static",
        "0.88",
        "--context-length",
        "32768",
        "--trust-remote-code",
        *extra,
    ]


def sim_env(**extra) -> dict:
    return {
        "PYTHONPATH": f"{REPO}:{REPO / 'module_utils'}",
        "SGLANG_SIM_GPUS": "8",
        "SGLANG_SIM_GPU_MEMORY_GIB": "94.97",
        "SGLANG_SIM_INTERCONNECT": "pcie",
        "SGLANG_SIM_LOAD_SECONDS": "0.3",
        **extra,
    }


class Watcher(threading.Thread):
    """Ground truth: first time a fatal line is in the file, first time the process group is gone,
    and the last time a traceback's exception line arrived (the final exception, as the
    classifier reads tracebacks). Runs until stopped, after the verdict."""

    def __init__(self, log_path: str, offset: int, pgid: int):
        super().__init__(daemon=True)
        self.log_path, self.offset, self.pgid = log_path, offset, pgid
        self.t_line = None
        self.t_exit = None
        self.t_exception = None
        self.stop = threading.Event()

    def run(self):
        follower = health.FileFollower(self.log_path, self.offset)
        reader = logclass.LogClassifier()
        while not self.stop.is_set():
            now = time.monotonic()
            for line in follower.read():
                before = reader.exception_line
                if reader.feed(line) is not None and self.t_line is None:
                    self.t_line = now
                if reader.exception_line is not before:
                    self.t_exception = now
            if self.t_exit is None and not supervisor.group_members(self.pgid):
                self.t_exit = now
            time.sleep(0.005)

    @property
    def t_event(self):
        ts = [t for t in (self.t_line, self.t_exit) if t is not None]
        return min(ts) if ts else None


def wait_http_ready(url: str, timeout=60.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if health.probe(url, timeout=2) == "ready":
            return
        time.sleep(0.05)
    raise RuntimeError(f"{url} never became ready")


def generate(url: str):
    req = urllib.request.Request(
        url + "/generate",
        data=json.dumps({"text": "hi", "sampling_params": {"max_new_tokens": 4}}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with contextlib.suppress(OSError):
        urllib.request.urlopen(req, timeout=5).read()


def one_run(kind: str, run_dir: str, i: int) -> dict:
    name = f"bench-{kind}-{i}"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    gate_url = url
    trigger = None
    env = sim_env()
    if kind == "oom_at_load":
        argv = sim_argv(port, "tp4ep2")
    elif kind == "bad_args":
        argv = sim_argv(port, "tp8", ["--enable-ep-moe"])
    elif kind == "exit_only":
        argv = [
            sys.executable,
            "-c",
            "import time, sys; print('loading', flush=True); time.sleep(0.5); sys.exit(1)",
        ]
    elif kind == "crash":
        argv = sim_argv(port, "tp8")
        env = sim_env(SGLANG_SIM_FAULT="crash_after:6")
        trigger = 8
    elif kind == "nccl_timeout":
        argv = sim_argv(port, "tp8")
        env = sim_env(SGLANG_SIM_FAULT="nccl_timeout_after:5", SGLANG_SIM_NCCL_TIMEOUT_SECONDS="0.5")
        trigger = 6
    elif kind == "jit_missing":
        argv = sim_argv(port, "tp8")
        env = sim_env(SGLANG_SIM_FAULT="jit_missing:ninja")
    elif kind == "gpu_unavailable":
        argv = sim_argv(port, "tp16")
    else:
        raise ValueError(kind)
    st = supervisor.start(run_dir, name, argv, env=env, cwd=run_dir)
    pgid = st["pid"]
    offset = st["log_offset"]
    try:
        if trigger is not None:
            wait_http_ready(url)
            offset = os.path.getsize(st["log"])
            gate_url = f"http://127.0.0.1:{free_port()}"  # closed: only the log and the process end the wait
        watcher = Watcher(st["log"], offset, pgid)
        watcher.start()
        result = {}

        def gate():
            try:
                health.wait_ready(
                    gate_url,
                    health.FileFollower(st["log"], offset),
                    lambda: health.process_state(run_dir, name),
                    timeout=120,
                    poll=0.2,
                    grace=30.0,
                )
                result["cls"] = "ready"
            except health.HealthFailure as exc:
                result["cls"] = exc.failure_class
                result["line"] = exc.evidence["line"]
            result["t"] = time.monotonic()

        g = threading.Thread(target=gate)
        g.start()
        if trigger is not None:
            time.sleep(0.3)
            for _ in range(trigger):
                generate(url)
        g.join(150)
        watcher.stop.set()
        watcher.join(5)
        t_event, t_exc = watcher.t_event, watcher.t_exception
        return {
            "kind": kind,
            "class": result.get("cls"),
            "latency_s": round(result["t"] - t_event, 3) if t_event and "t" in result else None,
            "after_exception_s": round(result["t"] - t_exc, 3) if t_exc and "t" in result else None,
            "from": "line" if watcher.t_line is not None and watcher.t_line == t_event else "exit",
            "line": (result.get("line") or "")[:100],
        }
    finally:
        supervisor.stop(run_dir, name, timeout=2, kill_timeout=5)


REPLAYS = {
    "fail-oom-at-load.kimi-k2.6-cut18.log": "cuda_oom",
    "fail-kv-no-memory.kimi-k2.6-cut8-mfs045.log": "kv_cache_no_memory",
    "fail-flashinfer-jit-no-data.kimi-k2.6-cut8.log": "jit_build_failed",
    # the two failures of issue 28, captured on the H200 (fixtures README)
    "fail-jit-no-ninja.qwen3-30b-a3b.log": "jit_build_failed",
    "fail-gpu-unavailable-tp2.qwen3-30b-a3b.log": "gpu_unavailable",
    "qwen3-30b-a3b.log": None,
    "kimi-k2.6-cut8.warm.log": None,
}


def replay_main(args) -> int:
    """Real SGLang 0.5.16 logs (tests/fixtures/sglang-0.5.16) replayed with their own timing through
    the gate (poll 0.2 s, as the module's default): seconds from the fatal line's write to the
    verdict and from the final exception line's write to the verdict (the gate reads a traceback
    whole), and for the healthy logs that they are ready with no failure. Pauses longer than
    --max-gap are shortened (the timing around the fatal line is kept: it is within one second)."""
    sys.path.insert(0, str(REPO))
    from tests.helpers.log_replay import Replay, gate

    fixtures = REPO / "tests" / "fixtures" / "sglang-0.5.16"
    ok = True
    per_class: dict[str, list[float]] = {}
    print(
        f"{'log':<48} {'expected':<19} {'got':<19} {'n':>3} {'median s':>9} {'max s':>7} "
        f"{'exc med s':>9} {'exc max s':>9}"
    )
    for name, expected in REPLAYS.items():
        got, lat, after_exc = set(), [], []
        for _ in range(args.runs):
            with tempfile.TemporaryDirectory(prefix="bench-replay-") as tmp:
                # a healthy log's stop after its ready line is no part of its start
                r = Replay(
                    fixtures / name, Path(tmp) / "engine.log", max_gap=args.max_gap, hold_after_ready=True
                ).start()
                try:
                    _, failure, t_verdict = gate(r, poll=0.2, timeout=600, grace=30)
                finally:
                    r.close()
                got.add(failure.failure_class if failure else None)
                first = r.first_definitive()
                if failure and first and first[0] in r.written:
                    lat.append(t_verdict - r.written[first[0]])
                final = r.final_exception()
                if failure and final and final[0] in r.written:
                    after_exc.append(t_verdict - r.written[final[0]])
        if expected is not None:
            per_class.setdefault(expected, []).extend(after_exc)
        good = got == {expected} and (expected is None or (len(lat) == args.runs and max(lat) <= 0.5))
        ok &= good

        def cell(xs, fn, width):
            return f"{fn(xs):{width}.3f}" if xs else f"{'-':>{width}}"

        print(
            f"{name:<48} {expected or 'ready':<19} {','.join(str(g or 'ready') for g in got):<19} {args.runs:>3} "
            f"{cell(lat, statistics.median, 9)} {cell(lat, max, 7)} "
            f"{cell(after_exc, statistics.median, 9)} {cell(after_exc, max, 9)}"
            + ("" if good else "   <-- MISSED (class, or over 0.5 s)")
        )
    print()
    print("seconds from final exception line to verdict, per failure class (all runs of its logs):")
    for cls, xs in sorted(per_class.items()):
        if xs:
            print(f"  {cls:<20} n={len(xs):<3} median {statistics.median(xs):.3f}  max {max(xs):.3f}")
        else:
            print(f"  {cls:<20} no traceback exception line")
    print("every replayed verdict right and within 0.5 s of its fatal line" if ok else "TARGET MISSED")
    return 0 if ok else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10, help="runs per fault (default 10)")
    ap.add_argument(
        "--kinds", default="oom_at_load,crash,nccl_timeout,exit_only,bad_args,jit_missing,gpu_unavailable"
    )
    ap.add_argument("--json", help="also write the raw runs here")
    ap.add_argument(
        "--replay",
        action="store_true",
        help="replay the real SGLang 0.5.16 logs instead of running the simulator",
    )
    ap.add_argument("--max-gap", type=float, default=1.0, help="replay: shorten pauses longer than this (s)")
    args = ap.parse_args(argv)
    if args.replay:
        return replay_main(args)
    expected = {
        "oom_at_load": "cuda_oom",
        "crash": "crashed",
        "nccl_timeout": "nccl_timeout",
        "exit_only": "crashed",
        "bad_args": "bad_args",
        "jit_missing": "jit_build_failed",
        "gpu_unavailable": "gpu_unavailable",
    }
    runs = []
    ok = True
    # Interrupted (Ctrl-C, a timeout's SIGTERM): unwind through one_run's finally, which stops the engine.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with tempfile.TemporaryDirectory(prefix="bench-health-") as run_dir:
        os.chmod(run_dir, 0o755)
        print(
            f"{'fault':<16} {'class':<17} {'n':>3} {'median s':>9} {'p90 s':>7} {'max s':>7} "
            f"{'exc med s':>9} {'exc max s':>9}  from"
        )
        for kind in args.kinds.split(","):
            rs = [one_run(kind, run_dir, i) for i in range(args.runs)]
            runs += rs
            lat = sorted(r["latency_s"] for r in rs if r["latency_s"] is not None)
            exc = sorted(r["after_exception_s"] for r in rs if r["after_exception_s"] is not None)
            classes = sorted({r["class"] for r in rs})
            good = classes == [expected[kind]] and len(lat) == len(rs) and max(lat) < 2.0
            ok &= good
            p90 = lat[min(len(lat) - 1, round(0.9 * (len(lat) - 1)))] if lat else float("nan")
            exc_cells = f"{statistics.median(exc):>9.3f} {max(exc):>9.3f}" if exc else f"{'-':>9} {'-':>9}"
            print(
                f"{kind:<16} {','.join(map(str, classes)):<17} {len(rs):>3} "
                f"{statistics.median(lat) if lat else float('nan'):>9.3f} {p90:>7.3f} {max(lat) if lat else float('nan'):>7.3f} "
                f"{exc_cells}"
                f"  {'/'.join(sorted({r['from'] for r in rs}))}{'' if good else '   <-- FAILS the 2 s / class target'}"
            )
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1))
    print("all verdicts within 2 s with the expected class" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
