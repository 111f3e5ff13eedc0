"""Does the simulator keep its own schedule at 64 streams x 100 tokens/s?

Starts `python -m sglang_sim` with a fixed 10 ms decode step (SGLANG_SIM_DECODE_STEP_MS=10,
i.e. 100 tokens/s per stream), then a minimal raw-socket client on the same machine keeps
64 streaming /generate requests open back to back for --seconds. Prints:

  * lateness of the simulator against its own schedule (send time - scheduled time of
    every streamed chunk, measured inside the simulator: /sim/stats), median / p99 / max;
  * tokens/s achieved per stream as the client sees them (median, min), and in total.

Usage: make bench-sim   (or .venv/bin/python benchmarks/bench_sim.py --streams 64 --rate 100)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def get_json(url: str):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


async def stream_one(port: int, body: bytes, out: list) -> None:
    """One streaming request; record (first chunk time, last chunk time, tokens)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"POST /generate HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n%b" % (len(body), body)
    )
    await writer.drain()
    first = last = None
    events = 0
    tail = b""
    done = False
    while True:
        data = await reader.read(65536)
        if not data:
            break
        now = time.monotonic()
        chunk = tail + data
        n = chunk.count(b"data: {") - tail.count(b"data: {")
        if n:
            events += n
            if first is None:
                first = now
            last = now
        done = done or b"[DONE]" in chunk
        if done and chunk.endswith(b"\r\n0\r\n\r\n"):
            break
        tail = chunk[-16:]
    writer.close()
    out.append((first, last, events))


async def client(port: int, streams: int, tokens: int, seconds: float) -> list:
    body = json.dumps(
        {
            "input_ids": list(range(1, 33)),
            "sampling_params": {"max_new_tokens": tokens, "ignore_eos": True, "temperature": 0.0},
            "stream": True,
        }
    ).encode()
    results: list = []
    deadline = time.monotonic() + seconds

    async def worker():
        while time.monotonic() < deadline:
            await stream_one(port, body, results)

    await asyncio.gather(*(worker() for _ in range(streams)))
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--rate", type=float, default=100.0, help="tokens/s per stream (decode step = 1/rate)")
    ap.add_argument("--tokens", type=int, default=400, help="output tokens per request")
    ap.add_argument("--seconds", type=float, default=12.0)
    a = ap.parse_args()
    port = free_port()
    load_before = os.getloadavg()[0]
    env = dict(
        os.environ,
        SGLANG_SIM_DECODE_STEP_MS=str(1000.0 / a.rate),
        SGLANG_SIM_PREFILL_MS_PER_TOKEN="0",
        SGLANG_SIM_LOAD_SECONDS="0.2",
        SGLANG_SIM_WARMUP_SECONDS="0",
        PYTHONPATH=str(REPO),
    )
    cmd = [
        sys.executable,
        "-m",
        "sglang_sim",
        "--model-path",
        str(REPO / "models" / "kimi-k2.6"),
        "--tp-size",
        "8",
        "--port",
        str(port),
        "--max-running-requests",
        str(a.streams),
    ]
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(200):
            try:
                get_json(base + "/v1/models")
                break
            except OSError:
                time.sleep(0.05)
        t0 = time.monotonic()
        results = asyncio.run(client(port, a.streams, a.tokens, a.seconds))
        wall = time.monotonic() - t0
        stats = get_json(base + "/sim/stats")
        cpu = cpu_seconds(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    rates = [
        (n - 1) / (last - first) for first, last, n in results if first and last and last > first and n > 1
    ]
    total = sum(n for _, _, n in results)
    lat = stats["lateness_ms"]
    print(
        f"sglang_sim schedule benchmark: {a.streams} streams x {a.rate:g} tok/s target, "
        f"{a.tokens} tokens/request, {wall:.1f} s, {len(results)} requests"
    )
    print(
        f"  host: {os.cpu_count()} CPU cores, load average {load_before:.2f} before / {os.getloadavg()[0]:.2f} "
        "after (other processes compete for the same cores)"
    )
    wake = stats["wake_lateness_ms"]
    print(
        f"  lateness vs own schedule (ms, {lat['n']} chunks): median {lat['median']:.3f}  "
        f"p99 {lat['p99']:.3f}  max {lat['max']:.3f}"
    )
    print(
        f"  of which wake-up lateness (ms, {wake['n']} steps): median {wake['median']:.3f}  p99 {wake['p99']:.3f}"
    )
    print(
        f"  simulator CPU: {cpu:.1f} s over {wall:.1f} s ({100 * cpu / wall:.0f}% of one core); "
        f"client CPU: {time.process_time():.1f} s"
    )
    print(
        f"  achieved tok/s per stream (client side): median {statistics.median(rates):.1f}  "
        f"min {min(rates):.1f}  total {total / wall:.0f} tok/s"
    )
    ok = lat["median"] < 1.0 and statistics.median(rates) >= 0.95 * a.rate
    print(
        f"  target (median lateness < 1 ms, >= 95% of {a.rate:g} tok/s per stream): {'MET' if ok else 'MISSED'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
