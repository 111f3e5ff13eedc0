"""Telemetry of a benchmark level: the server's /metrics (Prometheus text) and the GPUs (an ``nvidia-smi``
query loop), sampled in background threads while the level runs (FORMULAS["telemetry"])."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import threading
import urllib.error

from .client import http_json

TELEMETRY_INTERVAL_S = 1.0
# /metrics names (Prometheus text) -> the telemetry key, and how the per-rank series of one sample combine.
SERVER_METRICS = {
    "num_running_reqs": (("sglang:num_running_reqs", "vllm:num_requests_running"), "sum"),
    "num_queue_reqs": (("sglang:num_queue_reqs", "vllm:num_requests_waiting"), "sum"),
    "token_usage": (("sglang:token_usage", "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"), "max"),
    "cache_hit_rate": (("sglang:cache_hit_rate",), "mean"),
    "gen_throughput": (("sglang:gen_throughput",), "sum"),
}


GPU_QUERY = ("index", "memory.used", "utilization.gpu", "power.draw")
GPU_FIELDS = ("memory_used_mib", "utilization_pct", "power_w")


def parse_prometheus(text):
    """Prometheus text exposition -> {metric name: [(labels dict, float value)]} (comments skipped)."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        labels = {}
        if "{" in line:
            name, rest = line.split("{", 1)
            i, body = 0, rest
            # labels: k="v" pairs, values may hold escaped quotes, commas and braces
            while i < len(body) and body[i] != "}":
                eq = body.index("=", i)
                key = body[i:eq].strip().lstrip(",").strip()
                j = eq + 2  # past ="
                val = []
                while body[j] != '"':
                    if body[j] == "\\" and j + 1 < len(body):
                        val.append({"n": "\n"}.get(body[j + 1], body[j + 1]))
                        j += 2
                        continue
                    val.append(body[j])
                    j += 1
                labels[key] = "".join(val)
                i = j + 1
                while i < len(body) and body[i] in ", ":
                    i += 1
            value_part = body[i + 1 :].split()
        else:
            name, *value_part = line.split()
        if not value_part:
            continue
        try:
            value = float(value_part[0])
        except ValueError:
            continue
        out.setdefault(name.strip(), []).append((labels, value))
    return out


def server_sample(parsed):
    """One /metrics sample -> {telemetry key: value or None}, the ranks' series combined (SERVER_METRICS)."""
    sample = {}
    for key, (names, how) in SERVER_METRICS.items():
        values = None
        for name in names:
            if name in parsed:
                values = [v for _labels, v in parsed[name] if not math.isnan(v)]
                break
        if not values:
            sample[key] = None
        elif how == "sum":
            sample[key] = float(sum(values))
        elif how == "max":
            sample[key] = float(max(values))
        else:
            sample[key] = float(sum(values) / len(values))
    return sample


def parse_gpu_line(line):
    """One `nvidia-smi --query-gpu=index,memory.used,utilization.gpu,power.draw` csv line -> dict or None."""
    cells = [c.strip() for c in line.split(",")]
    if len(cells) != len(GPU_QUERY) or not cells[0].isdigit():
        return None

    def num(c):
        try:
            return float(c)
        except ValueError:
            return None  # [N/A], [Not Supported]: not measured, not zero

    return {"index": int(cells[0]), **{k: num(c) for k, c in zip(GPU_FIELDS, cells[1:])}}  # noqa: B905


def _mean_max(values):
    vs = [v for v in values if v is not None]
    if not vs:
        return {"mean": None, "max": None}
    return {"mean": float(sum(vs) / len(vs)), "max": float(max(vs))}


class Telemetry:
    """Samples the server's /metrics and the GPUs in background threads while a level runs.

    The GPU part is an `nvidia-smi --query-gpu=... --format=csv,noheader,nounits -lms N` loop (one process per
    level); where nvidia-smi is missing the GPUs are recorded as "absent". The binary can be named with
    SGLANG_BENCH_NVIDIA_SMI (tests, hosts with it off PATH)."""

    def __init__(self, url, api_key=None, interval=TELEMETRY_INTERVAL_S):
        self.url = url.rstrip("/") + "/metrics"
        self.api_key = api_key
        self.interval = interval
        self.samples = []
        self.gpu_rows = []
        self.server_error = None
        self._stop = threading.Event()
        self._threads = []
        self._proc = None
        self.gpu_tool = os.environ.get("SGLANG_BENCH_NVIDIA_SMI") or shutil.which("nvidia-smi")

    def _poll_server(self):
        while True:
            try:
                status, body = http_json(self.url, api_key=self.api_key, timeout=max(self.interval, 2.0))
                if status == 200 and isinstance(body, str):
                    self.samples.append(server_sample(parse_prometheus(body)))
                    self.server_error = None
                else:
                    self.server_error = (
                        f"GET /metrics answered HTTP {status} (start SGLang with --enable-metrics)"
                    )
                    if status == 404:
                        return
            except (OSError, urllib.error.URLError, ValueError) as exc:
                self.server_error = f"GET /metrics failed: {exc}"
            if self._stop.wait(self.interval):
                return

    def _read_gpu(self):
        for line in self._proc.stdout:
            row = parse_gpu_line(line)
            if row is not None:
                self.gpu_rows.append(row)

    def start(self):
        t = threading.Thread(target=self._poll_server, name="bench-metrics", daemon=True)
        t.start()
        self._threads.append(t)
        if self.gpu_tool:
            try:
                self._proc = subprocess.Popen(
                    [
                        self.gpu_tool,
                        "--query-gpu=" + ",".join(GPU_QUERY),
                        "--format=csv,noheader,nounits",
                        f"-lms={max(int(self.interval * 1000), 50)}",
                    ],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    text=True,
                )
            except OSError:
                self._proc = None
            else:
                g = threading.Thread(target=self._read_gpu, name="bench-gpu", daemon=True)
                g.start()
                self._threads.append(g)
        return self

    def stop(self):
        self._stop.set()
        if self._proc is not None:
            # nvidia-smi sleeps through SIGTERM until its next -lms sample (on the H200 every stop waited
            # out a 0.2 s grace, the tool's time between two levels). The rows it printed stay in the pipe
            # for the reader thread, so it is killed at once: a query tool holds no state to clean up.
            self._proc.kill()
            self._proc.wait(timeout=5)
        for t in self._threads:
            t.join(timeout=5)
        return self.summary()

    def summary(self):
        server = {
            "source": self.url,
            "available": bool(self.samples),
            "samples": len(self.samples),
            "error": None if self.samples else self.server_error,
            "metrics": {k: _mean_max([s.get(k) for s in self.samples]) for k in SERVER_METRICS},
        }
        if not self.gpu_tool or self._proc is None:
            gpu = "absent"
        else:
            by_gpu = {}
            for row in self.gpu_rows:
                by_gpu.setdefault(row["index"], []).append(row)
            gpu = {
                "source": "nvidia-smi",
                "samples": len(self.gpu_rows),
                "gpus": [
                    {"index": i, **{f: _mean_max([r[f] for r in rows]) for f in GPU_FIELDS}}
                    for i, rows in sorted(by_gpu.items())
                ]
                or "absent",
            }
            if gpu["gpus"] == "absent":
                gpu = "absent"
        return {"interval_s": self.interval, "server": server, "gpu": gpu}


# A pd layout's prefill servers: SGLang (0.5.16, --enable-metrics) observes per request the time of
# its prefill forward and of its KV transfer to the decode server in the histogram
# sglang:per_stage_req_latency_seconds, one series per stage (observability/req_time_stats.py:
# RequestStage.PREFILL_FORWARD, PREFILL_TRANSFER_KV_CACHE); the simulator exports the same series.
PD_STAGE_METRIC = "sglang:per_stage_req_latency_seconds"
PD_STAGES = {"prefill": "prefill_forward", "transfer": "prefill_transfer_kv_cache"}


def pd_counters(urls, api_key=None, timeout=10.0, before_first=False):
    """The prefill servers' stage sums and counts, summed over the servers:
    ({prefill_s, prefill_n, transfer_s, transfer_n}, None) or (None, why).

    A histogram's series for a stage appears at the stage's first observation (prometheus_client
    makes a labelled child when it is first used): read before a level (`before_first`), a server
    that has not yet served a pd request counts 0; read after it, a missing series means the server
    does not export the split."""
    total = {f"{k}_{x}": 0.0 for k in PD_STAGES for x in ("s", "n")}
    for url in urls:
        try:
            status, body = http_json(url.rstrip("/") + "/metrics", api_key=api_key, timeout=timeout)
        except (OSError, urllib.error.URLError, ValueError) as exc:
            return None, f"GET {url}/metrics failed: {exc}"
        if status != 200 or not isinstance(body, str):
            return (
                None,
                f"GET {url}/metrics answered HTTP {status} (start the prefill servers with --enable-metrics)",
            )
        parsed = parse_prometheus(body)
        for key, stage in PD_STAGES.items():
            for suffix, part in (("_sum", "s"), ("_count", "n")):
                values = [
                    v
                    for labels, v in parsed.get(PD_STAGE_METRIC + suffix, [])
                    if labels.get("stage") == stage
                ]
                if not values and before_first:
                    continue
                if not values:
                    return None, (
                        f'{url}/metrics has no {PD_STAGE_METRIC}{suffix}{{stage="{stage}"}} (SGLang 0.5.16 observes it '
                        "with --enable-metrics): the level's TTFT is not split"
                    )
                total[f"{key}_{part}"] += sum(v for v in values if not math.isnan(v))
    return total, None


def ttft_split(before, after, why=None):
    """A level's mean prefill and KV-transfer parts of TTFT from the prefill servers' stage sums before
    and after it: {ttft_prefill_ms, ttft_transfer_ms, ttft_split: {measured, requests, source | why}};
    the two figures are null when not measured (never estimated)."""
    if why is None and (before is None or after is None):
        why = "the prefill servers' metrics could not be read"
    n = 0 if why else after["transfer_n"] - before["transfer_n"]
    prefills = 0 if why else after["prefill_n"] - before["prefill_n"]
    if not why and (n <= 0 or prefills <= 0):
        why = "no request of the level was prefilled and sent to a decode server"
    if why:
        return {
            "ttft_prefill_ms": None,
            "ttft_transfer_ms": None,
            "ttft_split": {"measured": False, "why": why},
        }
    return {
        "ttft_prefill_ms": round((after["prefill_s"] - before["prefill_s"]) / prefills * 1e3, 3),
        "ttft_transfer_ms": round((after["transfer_s"] - before["transfer_s"]) / n * 1e3, 3),
        "ttft_split": {
            "measured": True,
            "requests": int(n),
            "source": "prefill servers' /metrics: "
            + ", ".join(f'{PD_STAGE_METRIC}{{stage="{stage}"}}' for stage in PD_STAGES.values()),
        },
    }
