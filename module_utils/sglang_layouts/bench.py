"""Closed-loop load generator for one running SGLang server (standard library only).

It runs on a bare host ``python3`` (no aiohttp): an asyncio HTTP/1.1 client built on
``asyncio.BufferedProtocol`` timestamps every byte it receives with ``time.perf_counter()`` in
its read callback (``buffer_updated``), decodes chunked transfer encoding and Server-Sent Events itself, and
keeps the JSON decoding of the events out of the measured path (events are parsed
after the level ends). Per concurrency level: warmup requests (not counted), then
``POST /flush_cache``, then ``num_prompts`` requests issued by ``concurrency`` workers,
each of which sends its next request as soon as its previous one ends, so exactly
``concurrency`` requests are in flight until the queue drains.

Every figure is defined in ``FORMULAS``; the module's RETURN docs and every result
record carry the same text.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import os
import random
import re
import shutil
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from urllib.parse import urlsplit

APIS = ("generate", "completions", "chat")
API_PATHS = {"generate": "/generate", "completions": "/v1/completions", "chat": "/v1/chat/completions"}
DEFAULT_CONCURRENCY = (1, 2, 4, 8, 16, 32, 64)
NUM_PROMPTS_MIN = 8
NUM_PROMPTS_MAX = 1024
KNEE_FRACTION = 0.9
ACHIEVED_CONCURRENCY_WARN = 0.9
STAT_KEYS = ("mean", "p50", "p90", "p99")
DATASETS = ("random", "random-range", "sharegpt", "shared-prefix")
# Generators of the arrival schedule: ours (random.Random seeded per level) or bench_serving's own draws.
ARRIVAL_RNGS = ("python", "bench_serving")
# Options each dataset takes (besides name); anything else is refused.
DATASET_OPTIONS = {
    "random": ("input_len", "output_len"),
    "random-range": ("input_len", "output_len", "range_ratio"),
    "sharegpt": ("path", "output_len", "max_conversations"),
    "shared-prefix": ("input_len", "output_len", "num_groups", "prefix_len"),
}
SLO_METRICS = ("ttft", "itl", "tpot", "e2e")
_SLO_KEY = re.compile(r"^(ttft|itl|tpot|e2e)_(?:p([0-9]{1,2}(?:\.[0-9]+)?)_)?ms$")
SLO_OPTIONS = (
    "percentile",
    "max_error_rate",
    "search",
    "search_min_rate",
    "search_max_rate",
    "search_steps",
    "search_tolerance",
)
SLO_SEARCH_STEPS = 6
RATE_LEVEL_S = 30.0  # a rate level without num_prompts / duration_s sends about this many seconds of arrivals
RATE_LEVEL_MAX_REQUESTS = 100000
RATE_POOL_PREOPEN = 64  # connections opened before a rate level starts (more are opened on demand)
LATE_SEND_WARN_MS = 5.0
ACHIEVED_RATE_WARN = 0.95
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

FORMULAS = {
    "clock": "time.perf_counter() on the client (monotonic, CLOCK_MONOTONIC on Linux); each stream keeps one HTTP/1.1 "
    "keep-alive connection, opened before the level starts; t_start is taken just before the request is written "
    "(before the TCP connect when a connection has to be reopened); arrival times are taken in "
    "the read callback (asyncio.BufferedProtocol.buffer_updated, recv_into a 64 KiB buffer) before any parsing; "
    "parsing runs in the next loop pass, after every socket readable at that moment has been read and stamped",
    "completed": "requests that returned HTTP 200, streamed to [DONE] (or a finish_reason) without an error event, "
    "and produced at least one output token; everything else is failed",
    "failed": "requests with a non-200 status, a connection error, an error event, a timeout (request_timeout) "
    "or no output token; counted here and excluded from every latency and token figure",
    "duration_s": "t_last_end - t_first_start over the measured requests of the level (warmup excluded)",
    "request_s": "completed / duration_s",
    "output_tok_s": "sum(completion_tokens of completed requests) / duration_s",
    "tokens": "completion_tokens and prompt_tokens as the server counted them: meta_info of the last /generate "
    "chunk, or the usage chunk of the OpenAI routes (stream_options.include_usage); never the requested length",
    "ttft_ms": "t_first_token - t_start, where t_first_token is the arrival of the first chunk that carries "
    "output (meta_info.completion_tokens > 0 or non-empty text / delta)",
    "itl_ms": "gaps between the arrivals of consecutive output-carrying chunks of one request "
    "(chunk-gap ITL: a chunk with k tokens counts as one gap); all gaps of all completed requests pooled",
    "tpot_ms": "(e2e - ttft) / (completion_tokens - 1) per completed request with completion_tokens > 1",
    "e2e_ms": "t_end - t_start, t_end = arrival of the last chunk ([DONE] included)",
    "decode_tok_s": "(completion_tokens - 1) / (e2e - ttft) per completed request whose tokens arrived over time (not all in one chunk) = 1000 / tpot_ms",
    "achieved_concurrency": "Little's law: sum(e2e of every measured request, failed included) / duration_s",
    "stats": "mean = arithmetic mean; pXX = linear interpolation between closest ranks "
    "(numpy.percentile's default): x[floor(h)] + (h - floor(h)) * (x[floor(h)+1] - x[floor(h)]), h = (n-1) * XX/100",
    "single_request_tok_s": "mean decode_tok_s at concurrency 1 (null when 1 is not a level)",
    "peak_output_tok_s": "max over levels of output_tok_s; peak_concurrency is the level where it was reached",
    "knee_concurrency": "smallest concurrency whose output_tok_s >= knee_fraction x peak_output_tok_s "
    "(knee_fraction 0.9): past it, more streams buy less than 10 % more throughput",
    "tok_s_per_user": "mean decode_tok_s of the level (what one stream sees)",
    "request_rate": "open-loop level: requests are sent at scheduled times t0 + offset_i whatever the server does; "
    "offset_0 = 0, offset_i = offset_(i-1) + gap, gap ~ Gamma(shape=burstiness, scale=1/(request_rate x burstiness)) "
    "(mean 1/request_rate; burstiness 1 = Poisson arrivals, < 1 burstier, > 1 more regular), drawn from "
    "random.Random(schedule.seed) (arrival_rng python, the default) or, with arrival_rng bench_serving, the gaps "
    "`python -m sglang.bench_serving --seed <seed> --num-prompts <n> --request-rate <rate>` (0.5.23, dataset "
    "random-ids) draws: numpy's legacy global generator (np.random.seed(seed), MT19937), first the draws of its "
    "dataset sampling (random / random-range: np.random.randint for the n input and the n output lengths, "
    "range ratio 1 for random, then n ids in [0, vocab_size); sharegpt, shared-prefix: none), then "
    "np.random.exponential(1 / rate) per gap (np.random.gamma(burstiness, 1 / (rate x burstiness)) when "
    "burstiness is not 1), reproduced to the float with the standard library (NumpyLegacyRandom); inf = every "
    "request at offset 0; with max_concurrency a scheduled request "
    "waits for a free slot (the wait counts in send_lag_ms, not in TTFT)",
    "send_lag_ms": "t_start - (t0 + offset_i) per request: how late it was sent against its schedule "
    "(includes the wait for a max_concurrency slot); client_lag_ms = t_dispatch - (t0 + offset_i), the "
    "generator's own lateness before any slot wait: a client that cannot keep up shows here and is warned",
    "achieved_request_rate": "(sent - 1) / (t_start of the last request - t_start of the first); "
    "scheduled_request_rate = (sent - 1) / (offset_last - offset_first), the rate the drawn schedule asked for",
    "slo": "a request meets the SLO when its ttft_ms, tpot_ms and e2e_ms are <= their thresholds and the pXX of its "
    "own chunk gaps (itl) is <= the itl threshold (a threshold not set is not checked; undefined figures pass); "
    "failed requests never meet it",
    "goodput_req_s": "requests meeting the SLO / duration_s (null without an SLO)",
    "goodput_tok_s": "sum(completion_tokens of requests meeting the SLO) / duration_s (null without an SLO)",
    "slo_met": "every SLO key's percentile over the level (ttft/tpot/e2e over completed requests, itl over all "
    "chunk gaps pooled) <= its threshold, at least one request completed, and failed / sent <= max_error_rate",
    "slo_max_rate": "highest request rate whose level met the SLO: from the rate ladder, then refined by the SLO "
    "search (bisection between the highest met and the lowest missed rate; doubling from search_min_rate or the "
    "highest met rate while nothing is missed, capped at search_max_rate; at most search_steps levels); null "
    "when no rate met it",
    "telemetry": "sampled every telemetry_interval seconds during the measured requests of a level: the "
    "server's /metrics (Prometheus text; per sample the ranks' series combine: running and queued requests and "
    "gen_throughput summed, token_usage max, cache_hit_rate mean) and per GPU memory.used (MiB), "
    "utilization.gpu (%) and power.draw (W) from an `nvidia-smi --query-gpu ... -lms` loop; each summarised as "
    'mean and max over samples; a metric the server does not export is null, no GPU tool = "absent" (never 0)',
    "dataset": "random: input_len / output_len fixed; random-range: lengths uniform in "
    "[max(1, int(len x range_ratio)), len] (bench_serving's --random-range-ratio); sharegpt: first human turn "
    "as the prompt text, the reply's whitespace-separated word count (or output_len) as the output length; "
    "shared-prefix: num_groups system prompts of prefix_len token ids, request i uses group i mod num_groups "
    "followed by input_len random ids; prompt token counts are the server's (meta_info / usage)",
}


class BenchError(Exception):
    """The benchmark could not run (bad arguments, server unreachable)."""


# ---------------------------------------------------------------- statistics


def percentile(values, q):
    """Linear interpolation between closest ranks (numpy.percentile's default method)."""
    if not values:
        return None
    xs = sorted(values)
    if len(xs) == 1:
        return float(xs[0])
    h = (len(xs) - 1) * (q / 100.0)
    lo = math.floor(h)
    hi = min(lo + 1, len(xs) - 1)
    return float(xs[lo] + (h - lo) * (xs[hi] - xs[lo]))


def stats(values):
    """{"mean", "p50", "p90", "p99"} of a list (None for each when it is empty)."""
    if not values:
        return {k: None for k in STAT_KEYS}
    return {
        "mean": float(sum(values) / len(values)),
        "p50": percentile(values, 50),
        "p90": percentile(values, 90),
        "p99": percentile(values, 99),
    }


def default_num_prompts(concurrency, per_stream=4, minimum=NUM_PROMPTS_MIN, maximum=NUM_PROMPTS_MAX):
    """Requests per level when num_prompts is not given: per_stream x concurrency (4), at least
    `minimum` (8), at most `maximum` (1024)."""
    return max(minimum, min(per_stream * concurrency, maximum))


# ---------------------------------------------------------------- configuration


def make_config(
    url,
    api="generate",
    concurrency=None,
    num_prompts=None,
    input_len=1024,
    output_len=256,
    warmup=1,
    seed=1,
    flush_cache=True,
    request_timeout=600.0,
    api_key=None,
    model=None,
    vocab_size=32000,
    knee_fraction=KNEE_FRACTION,
    rid_prefix=None,
    prompts_per_stream=4,
    min_prompts=NUM_PROMPTS_MIN,
    request_rates=None,
    burstiness=1.0,
    max_concurrency=None,
    duration_s=None,
    dataset=None,
    slo=None,
    context_length=None,
    telemetry=True,
    telemetry_interval=TELEMETRY_INTERVAL_S,
    arrival_rng="python",
):
    """Validate the arguments and return the normalised configuration mapping.

    Everything that can be wrong with the input is refused here, before any request is sent."""
    if api not in APIS:
        raise BenchError(f"api must be one of {', '.join(APIS)}, not {api!r}")
    parts = urlsplit(url or "")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BenchError(f"url must be http(s)://host:port, not {url!r}")
    rates = [parse_rate(r) for r in (request_rates or [])]
    levels = ([] if rates else list(DEFAULT_CONCURRENCY)) if concurrency is None else list(concurrency)
    if any((not isinstance(c, int)) or isinstance(c, bool) or c < 1 for c in levels) or not (levels or rates):
        raise BenchError(
            f"concurrency must be a list of integers >= 1 (empty only beside request_rates), not {concurrency!r}"
        )
    if num_prompts is not None and (not isinstance(num_prompts, int) or num_prompts < 1):
        raise BenchError(f"num_prompts must be an integer >= 1, not {num_prompts!r}")
    for name, value in (("input_len", input_len), ("output_len", output_len)):
        if not isinstance(value, int) or value < 1:
            raise BenchError(f"{name} must be an integer >= 1, not {value!r}")
    for name, value in (("prompts_per_stream", prompts_per_stream), ("min_prompts", min_prompts)):
        if not isinstance(value, int) or value < 1:
            raise BenchError(f"{name} must be an integer >= 1, not {value!r}")
    if not isinstance(warmup, int) or warmup < 0:
        raise BenchError(f"warmup must be an integer >= 0, not {warmup!r}")
    if not request_timeout or request_timeout <= 0:
        raise BenchError(f"request_timeout must be > 0 seconds, not {request_timeout!r}")
    if not 0 < knee_fraction <= 1:
        raise BenchError(f"knee_fraction must be in (0, 1], not {knee_fraction!r}")
    if not _is_number(burstiness) or not 0 < burstiness < math.inf:
        raise BenchError(f"burstiness must be a number > 0 (1 = Poisson), not {burstiness!r}")
    if max_concurrency is not None and (
        not isinstance(max_concurrency, int) or isinstance(max_concurrency, bool) or max_concurrency < 1
    ):
        raise BenchError(f"max_concurrency must be an integer >= 1 (or null), not {max_concurrency!r}")
    if duration_s is not None and (not _is_number(duration_s) or not 0 < duration_s < math.inf):
        raise BenchError(f"duration_s must be a number of seconds > 0 (or null), not {duration_s!r}")
    if context_length is not None and (not isinstance(context_length, int) or context_length < 2):
        raise BenchError(f"context_length must be an integer >= 2 (or null), not {context_length!r}")
    if not _is_number(telemetry_interval) or not 0.05 <= telemetry_interval <= 3600:
        raise BenchError(f"telemetry_interval must be in [0.05, 3600] seconds, not {telemetry_interval!r}")
    if arrival_rng not in ARRIVAL_RNGS:
        raise BenchError(f"arrival_rng must be one of {', '.join(ARRIVAL_RNGS)}, not {arrival_rng!r}")
    if arrival_rng == "bench_serving":
        if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed <= 0xFFFFFFFF:
            raise BenchError(
                f"arrival_rng bench_serving: seed must be an integer in [0, 2**32 - 1] (numpy's), not {seed!r}"
            )
        if rates and num_prompts is None and duration_s is not None:
            raise BenchError(
                "arrival_rng bench_serving draws a schedule for a request count (bench_serving's --num-prompts): "
                "give num_prompts, not duration_s"
            )
        if (
            not isinstance(vocab_size, int)
            or isinstance(vocab_size, bool)
            or not 1 <= vocab_size <= 0xFFFFFFFF
        ):
            raise BenchError(f"vocab_size must be an integer in [1, 2**32 - 1], not {vocab_size!r}")
    ds, pairs = make_dataset(dataset, input_len, output_len, context_length)
    slo_cfg = make_slo(slo)
    rate_specs = []
    for r in rates:
        if math.isinf(r) and num_prompts is None and duration_s is not None:
            raise BenchError("request rate inf sends every request at once: give num_prompts, not duration_s")
        rate_specs.append(rate_level_spec(r, num_prompts, duration_s, max_concurrency, min_prompts))
    cfg = {
        "url": url.rstrip("/"),
        "api": api,
        "path": API_PATHS[api],
        "concurrency": levels,
        "num_prompts": [
            num_prompts
            if num_prompts is not None
            else default_num_prompts(c, prompts_per_stream, min_prompts)
            for c in levels
        ],
        "prompts_per_stream": prompts_per_stream,
        "min_prompts": min_prompts,
        "input_len": ds.get("input_len", input_len),
        "output_len": ds.get("output_len", output_len),
        "warmup": warmup,
        "seed": seed,
        "flush_cache": bool(flush_cache),
        "request_timeout": float(request_timeout),
        "api_key_set": bool(api_key),
        "model": model,
        "vocab_size": int(vocab_size),
        "knee_fraction": float(knee_fraction),
        "rid_prefix": rid_prefix or f"bench-{int(time.time() * 1000):x}-{random.randrange(16**4):04x}",
        "ignore_eos": True,
        "stream": True,
        "temperature": 0.0,
        "request_rates": [rate_json(r) for r in rates],
        "burstiness": float(burstiness),
        "max_concurrency": max_concurrency,
        "duration_s": None if duration_s is None else float(duration_s),
        "rate_levels": rate_specs,
        "rate_num_prompts": num_prompts,
        "dataset": ds,
        "slo": slo_cfg,
        "context_length": context_length,
        "telemetry": bool(telemetry),
        "telemetry_interval": float(telemetry_interval),
        "arrival_rng": arrival_rng,
    }
    cfg["_pairs"] = pairs
    return cfg


def _is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v)


def parse_rate(value):
    """A request rate (req/s) from a number or a string; 'inf' = every request at once. Refuses <= 0."""
    r = value
    if isinstance(value, str):
        text = value.strip().lower()
        try:
            r = math.inf if text in ("inf", "infinity", "+inf") else float(text)
        except ValueError:
            r = None
    if not _is_number(r) or r <= 0:
        raise BenchError(
            f"request_rates: every rate must be a number of requests/s > 0 or 'inf', not {value!r}"
        )
    return float(r)


def rate_json(rate):
    """A rate as JSON can hold it: 'inf' for an infinite rate (JSON has no Infinity)."""
    if rate is None:
        return None
    return "inf" if math.isinf(rate) else rate


def rate_label(rate):
    return "inf" if math.isinf(rate) else f"{rate:g}"


def rate_level_spec(rate, num_prompts, duration_s, max_concurrency, min_prompts=NUM_PROMPTS_MIN):
    """One open-loop level: a fixed request count, or arrivals over duration_s, or the default count."""
    if num_prompts is not None:
        n = num_prompts
    elif duration_s is not None:
        n = None  # the schedule decides: every arrival before duration_s
    elif math.isinf(rate):
        n = default_num_prompts(max_concurrency or 16, 4, min_prompts)
    else:
        n = max(min_prompts, min(math.ceil(rate * RATE_LEVEL_S), NUM_PROMPTS_MAX))
    return {
        "request_rate": rate_json(rate),
        "num_prompts": n,
        "duration_s": None if num_prompts is not None else duration_s,
        "max_concurrency": max_concurrency,
    }


def _opt_int(ds, key, default, minimum=1):
    v = ds.get(key, default)
    if not isinstance(v, int) or isinstance(v, bool) or v < minimum:
        raise BenchError(f"dataset {ds.get('name')!r}: {key} must be an integer >= {minimum}, not {v!r}")
    return v


def make_dataset(spec, input_len, output_len, context_length=None):
    """Normalise the dataset mapping; returns (public description, [(prompt text, reply words)] or None)."""
    spec = dict(spec or {"name": "random"})
    name = spec.get("name", "random")
    if name not in DATASETS:
        raise BenchError(f"dataset name must be one of {', '.join(DATASETS)}, not {name!r}")
    unknown = sorted(set(spec) - {"name", *DATASET_OPTIONS[name]})
    if unknown:
        raise BenchError(
            f"dataset {name!r} has no option {', '.join(unknown)}; it takes {', '.join(DATASET_OPTIONS[name])}"
        )
    ds = {"name": name}
    pairs = None
    if name in ("random", "random-range", "shared-prefix"):
        ds["input_len"] = _opt_int(spec, "input_len", input_len)
        ds["output_len"] = _opt_int(spec, "output_len", output_len)
    if name == "random-range":
        ratio = spec.get("range_ratio", 0.0)
        if not _is_number(ratio) or not 0 <= ratio <= 1:
            raise BenchError(f"dataset 'random-range': range_ratio must be in [0, 1], not {ratio!r}")
        ds["range_ratio"] = float(ratio)
    if name == "shared-prefix":
        ds["num_groups"] = _opt_int(spec, "num_groups", 4)
        ds["prefix_len"] = _opt_int(spec, "prefix_len", 512)
    if name == "sharegpt":
        if spec.get("output_len") is not None:
            ds["output_len"] = _opt_int(spec, "output_len", None)
        if spec.get("max_conversations") is not None:
            ds["max_conversations"] = _opt_int(spec, "max_conversations", None)
        ds["path"] = spec.get("path")
        pairs, ds["digest"] = load_sharegpt(ds["path"], ds.get("max_conversations"))
        ds["conversations"] = len(pairs)
    if context_length is not None and name != "sharegpt":
        need = ds.get("prefix_len", 0) + ds["input_len"] + ds["output_len"]
        if need > context_length:
            what = "shared prefix + question + output" if name == "shared-prefix" else "input + output"
            raise BenchError(
                f"dataset {name!r}: {what} = {need} tokens is longer than the context ({context_length} tokens)"
            )
    return ds, pairs


def load_sharegpt(path, max_conversations=None):
    """[(first human turn, word count of the reply)] from a ShareGPT-format JSON file, and its sha256."""
    if not path or not isinstance(path, str):
        raise BenchError("dataset 'sharegpt' needs path: a ShareGPT-format JSON file")
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise BenchError(f"dataset 'sharegpt': cannot read {path}: {exc.strerror or exc}") from exc
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise BenchError(f"dataset 'sharegpt': {path} is not valid JSON: {exc}") from exc
    if not isinstance(doc, list):
        raise BenchError(f"dataset 'sharegpt': {path} must hold a JSON list of conversations")
    pairs = []
    for item in doc:
        turns = item.get("conversations", item.get("conversation")) if isinstance(item, dict) else None
        if not isinstance(turns, list) or len(turns) < 2:
            continue
        first, second = turns[0], turns[1]
        if not (isinstance(first, dict) and isinstance(second, dict)):
            continue
        prompt, reply = first.get("value"), second.get("value")
        if not (isinstance(prompt, str) and prompt.strip() and isinstance(reply, str) and reply.strip()):
            continue
        pairs.append((prompt, max(1, len(reply.split()))))
        if max_conversations and len(pairs) >= max_conversations:
            break
    if not pairs:
        raise BenchError(
            f"dataset 'sharegpt': {path} holds no usable conversation (need items with 'conversations': "
            "[{from, value}, {from, value}, ...], a non-empty prompt and reply)"
        )
    return pairs, "sha256:" + hashlib.sha256(raw).hexdigest()


def make_slo(spec):
    """Normalise the SLO mapping: {"thresholds": {key: ms}, "checks": [[metric, q, ms, key]], ...} or None."""
    if not spec:
        return None
    if not isinstance(spec, dict):
        raise BenchError(f"slo must be a mapping such as {{ttft_p99_ms: 2000, itl_p99_ms: 50}}, not {spec!r}")
    default_q = spec.get("percentile", 99)
    if not _is_number(default_q) or not 0 < default_q <= 100:
        raise BenchError(f"slo percentile must be in (0, 100], not {default_q!r}")
    checks, thresholds = [], {}
    for key, value in spec.items():
        if key in SLO_OPTIONS:
            continue
        m = _SLO_KEY.match(str(key))
        if not m:
            raise BenchError(
                f"slo key {key!r} does not exist: use ttft_pNN_ms, itl_pNN_ms, tpot_pNN_ms or e2e_pNN_ms "
                f"(NN a percentile, e.g. ttft_p99_ms), <metric>_ms with percentile, or {', '.join(SLO_OPTIONS)}"
            )
        q = float(m.group(2)) if m.group(2) else float(default_q)
        if not 0 < q <= 100:
            raise BenchError(f"slo key {key!r}: the percentile must be in (0, 100]")
        if not _is_number(value) or value <= 0:
            raise BenchError(f"slo {key} must be a number of milliseconds > 0, not {value!r}")
        checks.append([m.group(1), q, float(value), key])
        thresholds[key] = float(value)
    if not checks:
        raise BenchError(
            "slo has no threshold: give at least one of ttft_p99_ms, itl_p99_ms, tpot_p99_ms, e2e_p99_ms"
        )
    max_err = spec.get("max_error_rate", 0.0)
    if not _is_number(max_err) or not 0 <= max_err < 1:
        raise BenchError(f"slo max_error_rate must be in [0, 1), not {max_err!r}")
    out = {"thresholds": thresholds, "checks": checks, "max_error_rate": float(max_err), "search": None}
    if spec.get("search"):
        steps = spec.get("search_steps", SLO_SEARCH_STEPS)
        if not isinstance(steps, int) or isinstance(steps, bool) or not 1 <= steps <= 30:
            raise BenchError(f"slo search_steps must be an integer in [1, 30], not {steps!r}")
        lo = parse_rate(spec.get("search_min_rate", 1.0))
        hi = spec.get("search_max_rate")
        hi = None if hi is None else parse_rate(hi)
        tol = spec.get("search_tolerance", 0.05)
        if math.isinf(lo) or (hi is not None and (math.isinf(hi) or hi < lo)):
            raise BenchError("slo search_min_rate / search_max_rate must be finite, min <= max")
        if not _is_number(tol) or not 0 < tol < 1:
            raise BenchError(f"slo search_tolerance must be in (0, 1), not {tol!r}")
        out["search"] = {"steps": steps, "min_rate": lo, "max_rate": hi, "tolerance": float(tol)}
    elif "search" not in spec and any(k.startswith("search_") for k in spec):
        raise BenchError("slo search_* options need search: true")
    return out


# ---------------------------------------------------------------- plain HTTP (set-up calls)


def _ssl_context(url):
    return ssl.create_default_context() if url.startswith("https:") else None


def http_json(url, method="GET", body=None, api_key=None, timeout=30.0):
    """One plain request (no streaming); returns (status, parsed JSON or text)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=_ssl_context(url)) as resp:
            raw = resp.read()
            status = resp.status
    except urllib.error.HTTPError as exc:
        raw, status = exc.read(), exc.code
    text = raw.decode("utf-8", "replace")
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


# ---------------------------------------------------------------- streaming client


class _Response:
    """Parser of one HTTP/1.1 response whose body is an SSE stream; records (arrival, payload) per event."""

    def __init__(self, done):
        self.done = done
        self.head = b""
        self.status = None
        self.headers = {}
        self.in_body = False
        self.chunked = False
        self.remaining = None  # Content-Length left, or None (read to EOF)
        self.chunk_left = 0  # bytes of the current chunk (plus its CRLF) still to come
        self.raw = b""  # undecoded chunked framing
        self.sse = b""  # decoded body not yet split into events
        self.cr_pending = False
        self.events = []  # [(t, payload bytes)]
        self.t_done = None
        self.body = b""
        self.complete = False  # the body ended where HTTP framing says it ends
        self.t_complete = None
        self.keep_alive = True

    def feed(self, data, t):
        if not self.in_body:
            self.head += data
            self.head = self.head.lstrip(b"\r\n")
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                return
            self._parse_head(self.head[:end].decode("latin-1"))
            data = self.head[end + 4 :]
            self.head = b""
            self.in_body = True
            if self.complete:
                return
        if data:
            self._body(data, t)

    def finish(self, exc):
        if not self.done.done():
            self.done.set_result(exc)

    def _parse_head(self, head):
        lines = head.split("\r\n")
        parts = lines[0].split(" ", 2)
        self.status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
        for line in lines[1:]:
            k, _, v = line.partition(":")
            self.headers[k.strip().lower()] = v.strip()
        self.keep_alive = (
            lines[0].startswith("HTTP/1.1") and self.headers.get("connection", "").lower() != "close"
        )
        self.chunked = "chunked" in self.headers.get("transfer-encoding", "").lower()
        if not self.chunked:
            if "content-length" in self.headers:
                self.remaining = int(self.headers["content-length"])
                if self.remaining == 0:
                    self._end()
            else:
                self.keep_alive = False

    def _end(self):
        self.t_complete = time.perf_counter()
        self.complete = True
        self.finish(None)

    def _body(self, data, t):
        if self.chunked:
            self.raw += data
            while self.raw and not self.complete:
                if self.chunk_left == 0:
                    nl = self.raw.find(b"\r\n")
                    if nl < 0:
                        return
                    size = int(self.raw[:nl].split(b";", 1)[0] or b"0", 16)
                    self.raw = self.raw[nl + 2 :]
                    if size == 0:
                        self._end()  # a trailing CRLF (no trailers) is stripped by the next response
                        return
                    self.chunk_left = size + 2
                take = self.raw[: self.chunk_left]
                self.raw = self.raw[len(take) :]
                self.chunk_left -= len(take)
                payload = take if self.chunk_left >= 2 else take[: len(take) - (2 - self.chunk_left)]
                if payload:
                    self._sse(payload, t)
        else:
            if self.remaining is not None:
                data = data[: self.remaining]
                self.remaining -= len(data)
            self._sse(data, t)
            if self.remaining == 0:
                self._end()

    def _sse(self, data, t):
        if self.status != 200:
            self.body += data
            return
        if self.cr_pending:
            data = b"\r" + data
            self.cr_pending = False
        if data.endswith(b"\r"):
            data = data[:-1]
            self.cr_pending = True
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n")
        self.sse += data
        while True:
            end = self.sse.find(b"\n\n")
            if end < 0:
                return
            event = self.sse[:end]
            self.sse = self.sse[end + 2 :]
            for line in event.split(b"\n"):
                if line.startswith(b"data:"):
                    payload = line[5:].strip()
                    if payload == b"[DONE]":
                        self.t_done = t
                    else:
                        self.events.append((t, payload))


_RECV_BUFFER = 65536


class _Conn(asyncio.BufferedProtocol):
    """One persistent HTTP/1.1 connection; every read is timestamped in buffer_updated.

    A BufferedProtocol: the transport reads with recv_into() into this connection's 64 KiB buffer.
    A plain Protocol gets sock.recv(256 KiB) from asyncio, whose 256 KiB allocation (above glibc's
    mmap threshold) cost ~14 us per read, i.e. ~1 ms of client time per decode step of 64 streams."""

    def __init__(self, response=None):
        self.transport = None
        self.response = response  # set before the request leaves: the answer may come at once
        self.closed = False
        self.lost = None
        self.buf = memoryview(bytearray(_RECV_BUFFER))
        self.pending = []  # [(response, bytes, t)] read but not yet parsed

    def connection_made(self, transport):
        self.transport = transport

    def get_buffer(self, sizehint):
        return self.buf

    def buffer_updated(self, nbytes):
        self._received(self.buf[:nbytes].tobytes(), time.perf_counter())

    def data_received(self, data):  # transports that do not use the buffer (older SSL paths)
        self._received(data, time.perf_counter())

    def _received(self, data, t):
        # Only timestamped here; parsed in the next loop pass, so that every socket that is readable
        # at once (64 streams served by one decode step) is read and stamped before any is parsed.
        if self.response is not None:
            if not self.pending:
                asyncio.get_running_loop().call_soon(self._feed)
            self.pending.append((self.response, data, t))

    def _feed(self):
        pending, self.pending = self.pending, []
        for response, data, t in pending:
            response.feed(data, t)

    def eof_received(self):
        self._feed()
        self.closed = True
        if self.response is not None:
            self.response.finish(None)
        return False

    def connection_lost(self, exc):
        self._feed()
        self.closed = True
        self.lost = exc
        if self.response is not None:
            self.response.finish(exc)


class Endpoint:
    """Where the streamed requests go (address resolved once)."""

    def __init__(self, url, api_key=None):
        parts = urlsplit(url)
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.ssl = _ssl_context(url)
        self.base = parts.path.rstrip("/")
        self.host_header = self.host if parts.port is None else f"{self.host}:{self.port}"
        self.api_key = api_key
        self.addrinfo = None

    def resolve(self):
        if self.addrinfo is None:
            infos = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
            if not infos:
                raise OSError(f"cannot resolve {self.host}")
            self.addrinfo = infos[0]
        return self.addrinfo

    def request_bytes(self, path, body: bytes) -> bytes:
        head = (
            f"POST {self.base}{path} HTTP/1.1\r\n"
            f"Host: {self.host_header}\r\n"
            "User-Agent: sglang-layouts-bench\r\n"
            "Content-Type: application/json\r\n"
            "Accept: text/event-stream\r\n"
            f"Content-Length: {len(body)}\r\n"
        )
        if self.api_key:
            head += f"Authorization: Bearer {self.api_key}\r\n"
        return (head + "\r\n").encode("latin-1") + body


def _expire(done):
    if not done.done():
        done.set_exception(asyncio.TimeoutError())


class Client:
    """One worker's connection: reused across its requests (keep-alive), reopened when the server closes it.

    A new connection is opened with a non-blocking connect and the request is sent on the raw socket
    at once, before the asyncio transport is set up, so no loop iteration sits between t_start and
    the request leaving."""

    def __init__(self, endpoint: Endpoint):
        self.endpoint = endpoint
        self.conn = None

    def close(self):
        if self.conn is not None and self.conn.transport is not None:
            self.conn.transport.close()
        self.conn = None

    async def _open_and_send(self, request, response):
        loop = asyncio.get_running_loop()
        ep = self.endpoint
        if ep.ssl is not None:
            _, conn = await loop.create_connection(lambda: _Conn(response), ep.host, ep.port, ssl=ep.ssl)
            conn.transport.write(request)
            return conn
        family, type_, proto, _, addr = ep.resolve()
        sock = socket.socket(family, type_, proto)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await loop.sock_connect(sock, addr)
            try:
                sent = sock.send(request)
            except BlockingIOError:
                sent = 0
            _, conn = await loop.create_connection(lambda: _Conn(response), sock=sock)
        except BaseException:
            sock.close()
            raise
        if sent < len(request):
            conn.transport.write(request[sent:])
        return conn

    async def connect(self, timeout):
        """Open the connection ahead of the first request (so a burst of requests pays no TCP set-up)."""
        loop = asyncio.get_running_loop()
        ep = self.endpoint
        try:
            if ep.ssl is not None:
                _, self.conn = await asyncio.wait_for(
                    loop.create_connection(_Conn, ep.host, ep.port, ssl=ep.ssl), timeout
                )
                return
            family, type_, proto, _, addr = ep.resolve()
            sock = socket.socket(family, type_, proto)
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                await asyncio.wait_for(loop.sock_connect(sock, addr), timeout)
                _, self.conn = await loop.create_connection(_Conn, sock=sock)
            except BaseException:
                sock.close()
                raise
        except (OSError, asyncio.TimeoutError):
            self.conn = None  # the first request will try again and report the error

    async def request(self, path, body: bytes, timeout):
        reused = self.conn is not None and not self.conn.closed
        out = await self._request(path, body, timeout)
        if (
            reused
            and out["status"] is None
            and not out["events"]
            and out["error"]
            and "timeout" not in out["error"]
        ):
            # the server closed the idle keep-alive connection as we sent: once more on a new one
            out = await self._request(path, body, timeout)
        return out

    async def _request(self, path, body: bytes, timeout):
        loop = asyncio.get_running_loop()
        request = self.endpoint.request_bytes(path, body)
        done = loop.create_future()
        response = _Response(done)
        out = {
            "t_start": None,
            "status": None,
            "events": [],
            "t_end": None,
            "error": None,
            "done_seen": False,
        }
        reuse = self.conn is not None and not self.conn.closed
        out["t_start"] = time.perf_counter()
        try:
            if reuse:
                self.conn.response = response
                self.conn.transport.write(request)
            else:
                self.close()
                self.conn = await asyncio.wait_for(self._open_and_send(request, response), timeout)
                if self.conn.closed:
                    response.finish(self.conn.lost)
            remaining = timeout - (time.perf_counter() - out["t_start"])
            # A timer instead of wait_for(shield(...)): the task resumes one loop iteration after the
            # answer ends, so the stream's next request leaves at once.
            timer = loop.call_later(max(remaining, 0.001), _expire, done)
            try:
                exc = await done
            finally:
                timer.cancel()
        except asyncio.TimeoutError:
            out["error"] = f"timeout after {timeout:g} s"
            out["t_end"] = time.perf_counter()
            out["events"], out["status"] = response.events, response.status
            if self.conn is not None and self.conn.transport is not None:
                self.conn.transport.abort()
            self.conn = None
            return out
        except OSError as exc:
            out["error"] = f"connection error: {exc}"
            out["t_end"] = time.perf_counter()
            self.close()
            return out
        out["status"] = response.status
        out["events"] = response.events
        out["done_seen"] = response.t_done is not None
        out["t_complete"] = response.t_complete
        out["t_end"] = response.t_done or (response.events[-1][0] if response.events else time.perf_counter())
        if response.status is None:
            out["error"] = f"connection closed before a response: {exc or 'EOF'}"
        elif response.status != 200:
            out["error"] = f"HTTP {response.status}: {response.body[:300].decode('utf-8', 'replace').strip()}"
        elif exc is not None and not response.complete:
            out["error"] = f"connection lost: {exc}"
        if not (response.complete and response.keep_alive) or self.conn.closed:
            self.close()
        else:
            self.conn.response = None
        return out


# ---------------------------------------------------------------- requests and their outcome


def make_prompt(rng, input_len, vocab_size):
    return [rng.randrange(100, max(vocab_size, 101)) for _ in range(input_len)]


_WORDS = tuple(
    [
        "time",
        "person",
        "year",
        "way",
        "day",
        "thing",
        "man",
        "world",
        "life",
        "hand",
        "part",
        "child",
        "eye",
        "woman",
        "place",
        "work",
        "week",
        "case",
        "point",
        "number",
        "group",
        "problem",
        "fact",
        "river",
        "stone",
        "light",
        "water",
        "field",
        "table",
        "paper",
        "window",
        "garden",
        "music",
        "letter",
    ]
)


def make_workload(cfg, rng, n):
    """n (prompt, output_len) pairs of the configured dataset; prompt = token ids or text (sharegpt)."""
    ds = cfg.get("dataset") or {"name": "random"}
    name = ds["name"]
    vocab = cfg["vocab_size"]
    out = []
    if name == "sharegpt":
        pairs = cfg.get("_pairs") or []
        order = list(range(len(pairs)))
        rng.shuffle(order)
        for i in range(n):
            prompt, words = pairs[order[i % len(order)]]
            out.append((prompt, ds.get("output_len") or words))
        return out
    in_len, out_len = ds.get("input_len", cfg["input_len"]), ds.get("output_len", cfg["output_len"])
    if name == "shared-prefix":
        # the same system prompts at every level (flush_cache runs between levels), one per group
        prefixes = [
            make_prompt(random.Random(f"{cfg['seed']}:prefix:{g}"), ds["prefix_len"], vocab)
            for g in range(ds["num_groups"])
        ]
        return [(prefixes[i % len(prefixes)] + make_prompt(rng, in_len, vocab), out_len) for i in range(n)]
    for _ in range(n):
        if name == "random-range":
            ratio = ds["range_ratio"]
            a = rng.randint(max(int(in_len * ratio), 1), in_len)
            b = rng.randint(max(int(out_len * ratio), 1), out_len)
        else:
            a, b = in_len, out_len
        out.append((make_prompt(rng, a, vocab), b))
    return out


def request_body(cfg, rid, prompt_ids, output_len, rng):
    """The JSON body for one request of the configured api (bytes); prompt_ids: token ids or text."""
    api = cfg["api"]
    text_prompt = isinstance(prompt_ids, str)
    if api == "generate":
        body = {
            ("text" if text_prompt else "input_ids"): prompt_ids,
            "sampling_params": {
                "temperature": cfg["temperature"],
                "max_new_tokens": output_len,
                "ignore_eos": True,
            },
            "stream": True,
            "rid": rid,
        }
    elif api == "completions":
        body = {
            "model": cfg["model"],
            "prompt": prompt_ids,
            "max_tokens": output_len,
            "temperature": cfg["temperature"],
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
            "rid": rid,
        }
    else:
        # Chat takes text: random common words, about one token each; the server's
        # prompt_tokens (usage) says what it really was.
        # (word i follows token id i, so a shared prefix of ids stays a shared prefix of text)
        text = prompt_ids if text_prompt else " ".join(_WORDS[t % len(_WORDS)] for t in prompt_ids)
        body = {
            "model": cfg["model"],
            "messages": [{"role": "user", "content": text}],
            "max_tokens": output_len,
            "temperature": cfg["temperature"],
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
            "rid": rid,
        }
    return json.dumps(body, separators=(",", ":")).encode()


def analyse(api, raw):
    """Decode one raw outcome into per-request figures (seconds) or a failure."""
    res = {
        "ok": False,
        "error": raw.get("error"),
        "t_start": raw["t_start"],
        "t_end": raw["t_end"],
        "worker": raw.get("worker"),
        "t_complete": raw.get("t_complete"),
        "e2e": raw["t_end"] - raw["t_start"],
        "ttft": None,
        "itl": [],
        "completion_tokens": None,
        "prompt_tokens": None,
        "token_source": None,
        "finish_reason": None,
    }
    if res["error"]:
        return res
    content_times = []
    chunk_count = 0
    for t, payload in raw["events"]:
        try:
            ev = json.loads(payload)
        except ValueError:
            res["error"] = f"undecodable event: {payload[:200]!r}"
            return res
        if not isinstance(ev, dict):
            continue
        if ev.get("error"):
            err = ev["error"]
            res["error"] = "server error: " + (err.get("message") if isinstance(err, dict) else str(err))
            return res
        if api == "generate":
            meta = ev.get("meta_info") or {}
            ct = meta.get("completion_tokens")
            if ct is not None:
                res["completion_tokens"] = ct
                res["token_source"] = "server"
            if meta.get("prompt_tokens") is not None:
                res["prompt_tokens"] = meta["prompt_tokens"]
            if meta.get("finish_reason"):
                res["finish_reason"] = meta["finish_reason"]
            has_output = (ct or 0) > 0 if ct is not None else bool(ev.get("text") or ev.get("output_ids"))
            # cumulative output: a chunk carries output when the count grew
            if has_output and (not content_times or ct is None or ct > content_times[-1][1]):
                content_times.append((t, ct))
        else:
            usage = ev.get("usage")
            if usage:
                if usage.get("completion_tokens") is not None:
                    res["completion_tokens"] = usage["completion_tokens"]
                    res["token_source"] = "server"
                if usage.get("prompt_tokens") is not None:
                    res["prompt_tokens"] = usage["prompt_tokens"]
            for choice in ev.get("choices") or []:
                if choice.get("finish_reason"):
                    res["finish_reason"] = choice["finish_reason"]
                if api == "completions":
                    piece = choice.get("text")
                else:
                    delta = choice.get("delta") or {}
                    piece = delta.get("content") or delta.get("reasoning_content")
                if piece:
                    chunk_count += 1
                    content_times.append((t, chunk_count))
                    break
    if not raw.get("done_seen") and res["finish_reason"] is None:
        res["error"] = "stream ended before [DONE]"
        return res
    if not content_times:
        res["error"] = "no output token received"
        return res
    if res["completion_tokens"] is None:
        res["completion_tokens"] = chunk_count
        res["token_source"] = "chunks"
    if not res["completion_tokens"]:
        res["error"] = "server reported 0 completion tokens"
        return res
    res["ttft"] = content_times[0][0] - raw["t_start"]
    # (no itertools.pairwise / zip(strict=): hosts may run Python 3.8)
    res["itl"] = [content_times[i][0] - content_times[i - 1][0] for i in range(1, len(content_times))]
    res["ok"] = True
    return res


# ---------------------------------------------------------------- telemetry


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
                values = [v for _, v in parsed[name] if not math.isnan(v)]
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
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
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


# ---------------------------------------------------------------- one level


async def _run_requests(clients, cfg, bodies):
    """len(clients) workers (one connection each) drain the bodies in order; returns raw outcomes."""
    queue = list(enumerate(bodies))
    queue.reverse()
    outcomes = [None] * len(bodies)

    async def worker(w, client):
        while queue:
            i, body = queue.pop()
            outcomes[i] = await client.request(cfg["path"], body, cfg["request_timeout"])
            outcomes[i]["worker"] = w

    await asyncio.gather(*(worker(w, cl) for w, cl in enumerate(clients[: len(bodies)])))
    return outcomes


async def _run_open_loop(endpoint, clients, cfg, bodies, offsets, cap):
    """Send body i at t0 + offsets[i] whatever the server does (open loop); at most `cap` in flight when set.

    Idle keep-alive connections are reused; a request that finds none opens a new one (its TCP connect then
    counts in its TTFT, as in bench_serving). Returns raw outcomes with t_sched and t_dispatch."""
    loop = asyncio.get_running_loop()
    sem = asyncio.Semaphore(cap) if cap else None
    idle = list(clients)
    outcomes = [None] * len(bodies)

    async def one(i, body, t_sched, t_dispatch):
        if sem is not None:
            await sem.acquire()
        try:
            if idle:
                client = idle.pop()
            else:
                client = Client(endpoint)
                clients.append(client)  # closed with the others when the level ends
            out = await client.request(cfg["path"], body, cfg["request_timeout"])
            idle.append(client)
        finally:
            if sem is not None:
                sem.release()
        out.update(t_sched=t_sched, t_dispatch=t_dispatch, worker=None)
        outcomes[i] = out

    tasks = []
    t0 = time.perf_counter()
    for i, body in enumerate(bodies):
        due = t0 + offsets[i]
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(loop.create_task(one(i, body, due, time.perf_counter())))
    await asyncio.gather(*tasks)
    return outcomes


def arrival_offsets(rate, burstiness, seed, num_prompts=None, duration_s=None):
    """Seconds after the level's t0 at which each request is due (see FORMULAS["request_rate"])."""
    if math.isinf(rate):
        return [0.0] * num_prompts
    rng = random.Random(seed)
    scale = 1.0 / (rate * burstiness)
    offsets, t = [], 0.0
    while True:
        if num_prompts is not None and len(offsets) >= num_prompts:
            break
        if duration_s is not None and (t >= duration_s or len(offsets) >= RATE_LEVEL_MAX_REQUESTS):
            break
        offsets.append(t)
        t += rng.gammavariate(burstiness, scale)
    return offsets or [0.0]


class NumpyLegacyRandom:
    """numpy's legacy generator (``numpy.random.RandomState(seed)``, what ``np.random.seed(seed)`` resets),
    the draws that bench_serving makes, in the standard library only, equal to the float.

    Both are MT19937: RandomState.seed(int) is the reference ``init_genrand(seed)`` (numpy's
    ``mt19937_seed``), loaded into ``random.Random`` through setstate (624 words, position 624);
    ``random_sample`` is genrand_res53, which is ``random.Random.random``. The rest follows numpy's
    legacy C code (``distributions/legacy/legacy-distributions.c``, ``distributions.c``): bounded
    integers by masked rejection on 32-bit words, the standard exponential as -log(1 - u), the polar
    Gauss with its cached second value, and the standard gamma (shape 1: the exponential; < 1: the
    Ahrens-Dieter/Johnk rejection; > 1: Marsaglia-Tsang over the legacy Gauss)."""

    def __init__(self, seed):
        if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed <= 0xFFFFFFFF:
            raise BenchError(f"numpy's legacy seed must be an integer in [0, 2**32 - 1], not {seed!r}")
        mt = [seed]
        for i in range(1, 624):
            prev = mt[-1]
            mt.append((1812433253 * (prev ^ (prev >> 30)) + i) & 0xFFFFFFFF)
        self._mt = random.Random()
        self._mt.setstate((3, (*mt, 624), None))
        self._gauss = None

    def random_sample(self):
        """np.random.random_sample(): a double in [0, 1) from two 32-bit words (genrand_res53)."""
        return self._mt.random()

    def randint(self, low, high):
        """One np.random.randint(low, high) (int64, high exclusive): masked rejection, no draw when high = low + 1."""
        rng = high - 1 - low
        if rng < 0 or rng > 0xFFFFFFFE:
            raise ValueError(f"randint: range [{low}, {high}) is empty or wider than 2**32 - 1")
        if rng == 0:
            return low
        mask = rng
        for shift in (1, 2, 4, 8, 16):
            mask |= mask >> shift
        while True:
            value = self._mt.getrandbits(32) & mask
            if value <= rng:
                return low + value

    def standard_exponential(self):
        return -math.log(1.0 - self._mt.random())

    def exponential(self, scale):
        """np.random.exponential(scale)."""
        return scale * self.standard_exponential()

    def gauss(self):
        """The legacy standard normal (polar method; every second call returns the cached value)."""
        if self._gauss is not None:
            value, self._gauss = self._gauss, None
            return value
        while True:
            x1 = 2.0 * self._mt.random() - 1.0
            x2 = 2.0 * self._mt.random() - 1.0
            r2 = x1 * x1 + x2 * x2
            if r2 < 1.0 and r2 != 0.0:
                break
        f = math.sqrt(-2.0 * math.log(r2) / r2)
        self._gauss = f * x1
        return f * x2

    def standard_gamma(self, shape):
        if shape == 1.0:
            return self.standard_exponential()
        if shape == 0.0:
            return 0.0
        if shape < 1.0:
            while True:
                u = self._mt.random()
                v = self.standard_exponential()
                if u <= 1.0 - shape:
                    x = math.pow(u, 1.0 / shape)
                    if x <= v:
                        return x
                else:
                    y = -math.log((1 - u) / shape)
                    x = math.pow(1.0 - shape + shape * y, 1.0 / shape)
                    if x <= v + y:
                        return x
        b = shape - 1.0 / 3.0
        c = 1.0 / math.sqrt(9 * b)
        while True:
            while True:
                x = self.gauss()
                v = 1.0 + c * x
                if v > 0.0:
                    break
            v = v * v * v
            u = self._mt.random()
            if u < 1.0 - 0.0331 * (x * x) * (x * x):
                return b * v
            if math.log(u) < 0.5 * x * x + b * (1.0 - v + math.log(v)):
                return b * v

    def gamma(self, shape, scale):
        """np.random.gamma(shape, scale)."""
        return scale * self.standard_gamma(shape)


def bench_serving_dataset_draws(rng, dataset, num_prompts, vocab_size):
    """The np.random draws bench_serving 0.5.23 makes while it samples its dataset, before the schedule.

    random / random-range are its random-ids dataset (datasets/random.py sample_random_requests):
    compute_random_lens for the input, then for the output lengths (np.random.randint(max(int(len x ratio), 1),
    len + 1, size=n); ratio 1 for fixed lengths: no draw at all), then np.random.randint(0, vocab_size, size=n)
    for the prompts' first ids. Its sharegpt and generated-shared-prefix datasets use Python's random and
    np.random.default_rng: no draw from the global generator."""
    ds = dataset or {"name": "random"}
    if ds["name"] not in ("random", "random-range"):
        return
    ratio = ds.get("range_ratio", 1.0) if ds["name"] == "random-range" else 1.0
    for full_len in (ds["input_len"], ds["output_len"]):
        for _ in range(num_prompts):
            rng.randint(max(int(full_len * ratio), 1), full_len + 1)
    for _ in range(num_prompts):
        rng.randint(0, vocab_size)


def bench_serving_gaps(rate, burstiness, seed, num_prompts, dataset=None, vocab_size=32000):
    """The num_prompts - 1 gaps (s) `python -m sglang.bench_serving --seed seed --request-rate rate` sleeps
    between its requests (FORMULAS["request_rate"], arrival_rng bench_serving); [] at rate inf.

    bench_serving (serving.py get_request) yields a request, then sleeps np.random.exponential(1 / rate);
    burstiness 1 here is np.random.gamma(1, 1 / (rate x 1)), the same float, and other values are the
    np.random.gamma(burstiness, 1 / (rate x burstiness)) of bench_serving's releases with --burstiness."""
    if math.isinf(rate) or num_prompts < 2:
        return []
    rng = NumpyLegacyRandom(seed)
    bench_serving_dataset_draws(rng, dataset, num_prompts, vocab_size)
    theta = 1.0 / (rate * burstiness)
    return [rng.gamma(burstiness, theta) for _ in range(num_prompts - 1)]


def bench_serving_offsets(rate, burstiness, seed, num_prompts, dataset=None, vocab_size=32000):
    """bench_serving's schedule as offsets: offset_0 = 0, offset_i = offset_(i-1) + gap_i (all 0 at rate inf)."""
    if math.isinf(rate):
        return [0.0] * num_prompts
    offsets, t = [0.0], 0.0
    for gap in bench_serving_gaps(rate, burstiness, seed, num_prompts, dataset, vocab_size):
        t += gap
        offsets.append(t)
    return offsets[: max(num_prompts, 1)]


def _request_itl_q(r, q):
    return percentile([1000.0 * g for g in r["itl"]], q) if r["itl"] else None


def evaluate_slo(slo, ok, n_sent, duration, itl_pooled_ms):
    """goodput and slo_met of one level (FORMULAS["slo"], ["goodput_*"], ["slo_met"]); Nones without an SLO."""
    if not slo:
        return {"goodput_req_s": None, "goodput_tok_s": None, "slo_met": None, "slo": None}
    figures = {
        "ttft": lambda r: 1000.0 * r["ttft"],
        "e2e": lambda r: 1000.0 * r["e2e"],
        "tpot": lambda r: (
            1000.0 * (r["e2e"] - r["ttft"]) / (r["completion_tokens"] - 1)
            if r["completion_tokens"] > 1
            else None
        ),
    }
    good = []
    for r in ok:
        fine = True
        for metric, q, limit, _key in slo["checks"]:
            v = _request_itl_q(r, q) if metric == "itl" else figures[metric](r)
            if v is not None and v > limit:
                fine = False
                break
        if fine:
            good.append(r)
    observed, met = {}, {}
    for metric, q, limit, key in slo["checks"]:
        if metric == "itl":
            values = itl_pooled_ms
        else:
            values = [v for v in (figures[metric](r) for r in ok) if v is not None]
        observed[key] = percentile(values, q)
        met[key] = observed[key] is not None and observed[key] <= limit
        if metric in ("tpot", "itl") and observed[key] is None and ok:
            met[key] = True  # single-token outputs: no gap to check
    failed = n_sent - len(ok)
    error_rate = failed / n_sent if n_sent else 0.0
    slo_met = bool(ok) and all(met.values()) and error_rate <= slo["max_error_rate"]
    return {
        "goodput_req_s": len(good) / duration if duration > 0 else 0.0,
        "goodput_tok_s": sum(r["completion_tokens"] for r in good) / duration if duration > 0 else 0.0,
        "slo_met": slo_met,
        "slo": {
            "thresholds": slo["thresholds"],
            "observed": observed,
            "met": met,
            "good": len(good),
            "error_rate": error_rate,
        },
    }


def _level_name(concurrency, rate):
    return f"rate {rate_label(rate)} req/s" if rate is not None else f"concurrency {concurrency}"


def summarize_level(cfg, concurrency, results, duration, n_sent, rate=None):
    ok = [r for r in results if r["ok"]]
    failed = [r for r in results if not r["ok"]]
    tokens = sum(r["completion_tokens"] for r in ok)
    e2e_all = sum(r["e2e"] for r in results)
    # Decode speed needs tokens that arrived after the first one, at a later time: a server that
    # sends everything in one chunk (vLLM on a fast tiny model) gives e2e ~ TTFT and no speed at all.
    streamed = [r for r in ok if r["completion_tokens"] > 1 and r["e2e"] > r["ttft"] and sum(r["itl"]) > 0]
    decode = [(r["completion_tokens"] - 1) / (r["e2e"] - r["ttft"]) for r in streamed]
    tpot = [
        1000.0 * (r["e2e"] - r["ttft"]) / (r["completion_tokens"] - 1)
        for r in ok
        if r["completion_tokens"] > 1
    ]
    itl = [1000.0 * g for r in ok for g in r["itl"]]
    achieved = e2e_all / duration if duration > 0 else 0.0
    errors = {}
    for r in failed:
        errors[r["error"]] = errors.get(r["error"], 0) + 1
    name = _level_name(concurrency, rate)
    warnings = []
    if rate is None and achieved < ACHIEVED_CONCURRENCY_WARN * concurrency:
        why = (
            f"only {n_sent} requests for {concurrency} streams"
            if n_sent < concurrency
            else "requests queued or failed early, or the client could not keep up"
        )
        warnings.append(
            f"concurrency {concurrency}: achieved {achieved:.2f} (Little's law) is below "
            f"{ACHIEVED_CONCURRENCY_WARN:.0%} of the target ({why})"
        )
    if failed:
        warnings.append(f"{name}: {len(failed)} of {len(results)} requests failed")
    short = [r for r in ok if r["completion_tokens"] < r.get("asked_output_len", cfg["output_len"])]
    if short:
        warnings.append(
            f"{name}: {len(short)} requests returned fewer tokens than asked (output_len) although ignore_eos was set"
        )
    unstreamed = len([r for r in ok if r["completion_tokens"] > 1]) - len(streamed)
    if unstreamed:
        warnings.append(
            f"{name}: {unstreamed} requests delivered all their tokens in one chunk; "
            "their decode speed is undefined and left out"
        )
    sources = sorted({r["token_source"] for r in ok})
    level = {
        "mode": "rate" if rate is not None else "concurrency",
        "concurrency": concurrency,
        "request_rate": rate_json(rate),
        "num_prompts": n_sent,
        "completed": len(ok),
        "failed": len(failed),
        "duration_s": duration,
        "request_s": len(ok) / duration if duration > 0 else 0.0,
        "output_tok_s": tokens / duration if duration > 0 else 0.0,
        "output_tokens": tokens,
        "prompt_tokens": sum(r["prompt_tokens"] or 0 for r in ok),
        "token_source": sources[0] if len(sources) == 1 else ("mixed" if sources else None),
        "achieved_concurrency": achieved,
        "ttft_ms": stats([1000.0 * r["ttft"] for r in ok]),
        "itl_ms": stats(itl),
        "tpot_ms": stats(tpot),
        "e2e_ms": stats([1000.0 * r["e2e"] for r in ok]),
        "decode_tok_s": stats(decode),
        "errors": [{"error": k, "count": v} for k, v in sorted(errors.items(), key=lambda kv: -kv[1])][:5],
        "warnings": warnings,
    }
    level.update(evaluate_slo((cfg.get("slo") or None), ok, n_sent, duration, itl))
    level["telemetry"] = None
    return level


def _rid(cfg, level_index, kind, i):
    return f"{cfg['rid_prefix']}-l{level_index}-{kind}{i}"


def _schedule_report(rate, raws, offsets, seed):
    """The recorded arrival schedule and how late each request left against it (FORMULAS["send_lag_ms"])."""
    lag = [1000.0 * (r["t_start"] - r["t_sched"]) for r in raws]
    client_lag = [1000.0 * (r["t_dispatch"] - r["t_sched"]) for r in raws]
    starts = sorted(r["t_start"] for r in raws)
    n = len(raws)
    achieved = (n - 1) / (starts[-1] - starts[0]) if n > 1 and starts[-1] > starts[0] else None
    span = offsets[-1] - offsets[0] if n > 1 else 0.0
    scheduled = (n - 1) / span if span > 0 else None
    return {
        "seed": seed,
        "offsets_s": [round(o, 6) for o in offsets],
        "send_lag_ms": stats(lag),
        "send_lag_ms_max": max(lag) if lag else None,
        "send_lag_ms_each": [round(x, 3) for x in lag],  # request i of the level, in schedule order
        "client_lag_ms": stats(client_lag),
        "client_lag_ms_max": max(client_lag) if client_lag else None,
        "achieved_request_rate": achieved,
        "scheduled_request_rate": scheduled,
        "_rate": rate,
    }


def _schedule_warnings(rate, sched):
    out = []
    if math.isinf(rate):
        return out
    limit = max(LATE_SEND_WARN_MS, 100.0 / rate)  # 5 ms, or 10 % of the mean gap between arrivals
    p99 = sched["client_lag_ms"]["p99"]
    if p99 is not None and p99 > limit:
        out.append(
            f"rate {rate_label(rate)} req/s: the client sent requests late against their schedule (p99 "
            f"{p99:.1f} ms, max {sched['client_lag_ms_max']:.1f} ms > {limit:.1f} ms): it could not keep up, the "
            "level measured a lower load than asked"
        )
    a, want = sched["achieved_request_rate"], sched["scheduled_request_rate"]
    if a is not None and want and a < ACHIEVED_RATE_WARN * want:
        out.append(
            f"rate {rate_label(rate)} req/s: requests left at {a:.2f} req/s, below {ACHIEVED_RATE_WARN:.0%} of the "
            f"schedule's {want:.2f} req/s (a max_concurrency cap or a client that cannot keep up)"
        )
    return out


async def run_level(cfg, spec, index, progress=None, keep_requests=False):
    """One level: spec = {"mode": "concurrency", "concurrency"} or {"mode": "rate", "request_rate", ...}."""
    rate = None if spec["mode"] == "concurrency" else parse_rate(spec["request_rate"])
    concurrency = spec.get("concurrency") if rate is None else spec.get("max_concurrency")
    endpoint = Endpoint(cfg["url"], cfg.get("_api_key"))
    # Distinct prompts for every level and for warmup: no prefix-cache replay between levels.
    if rate is None:
        rng = random.Random(f"{cfg['seed']}:{index}:{concurrency}")
        label = f"c={concurrency}"
        offsets = None
        n = spec["num_prompts"]
    else:
        rng = random.Random(f"{cfg['seed']}:{index}:rate:{rate_label(rate)}")
        label = spec.get("label") or f"r={rate_label(rate)}"
        if cfg.get("arrival_rng") == "bench_serving":
            sched_seed = cfg["seed"]
            offsets = bench_serving_offsets(
                rate,
                cfg["burstiness"],
                sched_seed,
                spec["num_prompts"],
                cfg.get("dataset"),
                cfg["vocab_size"],
            )
        else:
            sched_seed = f"{cfg['seed']}:arrivals:{rate_label(rate)}:{cfg['burstiness']:g}"
            offsets = arrival_offsets(
                rate, cfg["burstiness"], sched_seed, spec.get("num_prompts"), spec.get("duration_s")
            )
        n = len(offsets)
    warm_len = min(cfg["output_len"], 16)
    warm = [
        request_body(cfg, _rid(cfg, index, "w", i), prompt, min(warm_len, out), rng)
        for i, (prompt, out) in enumerate(make_workload(cfg, rng, cfg["warmup"]))
    ]
    rids = [_rid(cfg, index, "r", i) for i in range(n)]
    work = make_workload(cfg, rng, n)
    bodies = [request_body(cfg, rid, prompt, out, rng) for rid, (prompt, out) in zip(rids, work)]  # noqa: B905
    extra = f", {cfg['warmup']} warmup" + ("" if rate is None else f", open loop at {rate_label(rate)} req/s")
    _say(progress, f"level {label} start: {n} requests{extra}")
    if rate is None:
        clients = [Client(endpoint) for _ in range(min(concurrency, n))]
    else:
        clients = [Client(endpoint) for _ in range(min(concurrency or n, n, RATE_POOL_PREOPEN))]
    telemetry = None
    try:
        await asyncio.gather(*(cl.connect(min(cfg["request_timeout"], 30.0)) for cl in clients))
        warm_failed = 0
        if warm:
            for raw in await _run_requests(clients, cfg, warm):
                warm_failed += 0 if analyse(cfg["api"], raw)["ok"] else 1
        flush = None
        if cfg["flush_cache"]:
            flush = await asyncio.get_running_loop().run_in_executor(None, flush_cache, cfg)
        if cfg.get("telemetry"):
            telemetry = Telemetry(cfg["url"], cfg.get("_api_key"), cfg["telemetry_interval"]).start()
        try:
            if rate is None:
                raws = await _run_requests(clients, cfg, bodies)
            else:
                raws = await _run_open_loop(endpoint, clients, cfg, bodies, offsets, concurrency)
        finally:
            tele = telemetry.stop() if telemetry is not None else None
    finally:
        for cl in clients:
            cl.close()
    # duration: first start to last end of the measured requests
    start = min(r["t_start"] for r in raws)
    end = max(r["t_end"] for r in raws)
    results = [analyse(cfg["api"], r) for r in raws]
    for r, (_, out) in zip(results, work):  # noqa: B905
        r["asked_output_len"] = out
    level = summarize_level(cfg, concurrency, results, end - start, n, rate=rate)
    if rate is not None:
        sched = _schedule_report(rate, raws, offsets, sched_seed)
        sched["arrival_rng"] = cfg.get("arrival_rng", "python")
        level["warnings"].extend(_schedule_warnings(rate, sched))
        sched.pop("_rate")
        level["schedule"] = sched
        level["send_lag_ms"] = sched["send_lag_ms"]
        level["achieved_request_rate"] = sched["achieved_request_rate"]
        level["max_concurrency"] = concurrency
    if spec.get("phase"):
        level["phase"] = spec["phase"]
    level["telemetry"] = tele
    level["warmup_failed"] = warm_failed
    level["flush_cache"] = flush
    if flush is not None and not flush["ok"]:
        level["warnings"].append(f"{_level_name(concurrency, rate)}: /flush_cache failed: {flush['detail']}")
    if keep_requests:
        level["requests"] = [
            {
                "rid": rid,
                "ok": r["ok"],
                "t_start": r["t_start"],
                "t_end": r["t_end"],
                "worker": r["worker"],
                "t_complete": r["t_complete"],
                "error": r["error"],
                "ttft_ms": None if r["ttft"] is None else 1000.0 * r["ttft"],
                "e2e_ms": 1000.0 * r["e2e"],
                "itl_ms": [1000.0 * g for g in r["itl"]],
                "completion_tokens": r["completion_tokens"],
                "prompt_tokens": r["prompt_tokens"],
                "send_lag_ms": None
                if raw.get("t_sched") is None
                else 1000.0 * (r["t_start"] - raw["t_sched"]),
            }
            for rid, r, raw in zip(rids, results, raws)  # noqa: B905 (same length; strict= needs Python 3.10)
        ]
    _say(progress, f"level {label} done: {level_line(level)}")
    return level


def level_line(level):
    def f(v, fmt="{:.1f}"):
        return "-" if v is None else fmt.format(v)

    return (
        f"{level['completed']} ok, {level['failed']} failed, {f(level['output_tok_s'])} tok/s, "
        f"{f(level['request_s'], '{:.2f}')} req/s, TTFT p50 {f(level['ttft_ms']['p50'])} ms "
        f"p99 {f(level['ttft_ms']['p99'])} ms, ITL p50 {f(level['itl_ms']['p50'], '{:.2f}')} ms, "
        f"decode {f(level['decode_tok_s']['mean'])} tok/s/user, "
        f"concurrency {f(level['achieved_concurrency'], '{:.2f}')}/{level['concurrency'] or '-'}"
        + (
            ""
            if level.get("mode") != "rate"
            else f", sent at {f(level.get('achieved_request_rate'), '{:.2f}')} req/s, "
            f"send lag p99 {f((level.get('send_lag_ms') or {}).get('p99'), '{:.2f}')} ms"
        )
        + (
            ""
            if level.get("slo_met") is None
            else f", SLO {'met' if level['slo_met'] else 'missed'}, goodput {f(level['goodput_tok_s'])} tok/s"
        )
    )


def flush_cache(cfg):
    try:
        status, body = http_json(cfg["url"] + "/flush_cache", method="POST", api_key=cfg.get("_api_key"))
    except (OSError, urllib.error.URLError) as exc:
        return {"ok": False, "detail": str(exc)}
    return {"ok": status == 200, "detail": f"HTTP {status}: {str(body)[:200].strip()}"}


def _say(progress, line):
    if progress is not None:
        progress(line)


# ---------------------------------------------------------------- summary and the whole run


def _rate_value(lv):
    r = lv.get("request_rate")
    return None if r is None else parse_rate(r)


def summarize(levels, knee_fraction=KNEE_FRACTION, slo_max_rate=None):
    """The figures a layout is compared by (FORMULAS); levels of both modes, old records' levels too."""
    closed = [lv for lv in levels if lv.get("mode", "concurrency") == "concurrency"]
    single = next((lv for lv in closed if lv["concurrency"] == 1), None)
    measured = [lv for lv in levels if lv["completed"] > 0]
    peak = max(measured, key=lambda lv: lv["output_tok_s"], default=None)
    knee = None
    if peak is not None:
        for lv in sorted((lv for lv in measured if lv in closed), key=lambda lv: lv["concurrency"]):
            if lv["output_tok_s"] >= knee_fraction * peak["output_tok_s"]:
                knee = lv
                break
    completed = sum(lv["completed"] for lv in levels)
    failed = sum(lv["failed"] for lv in levels)
    met = [lv for lv in levels if lv.get("slo_met")]
    best = max(met, key=lambda lv: lv["goodput_tok_s"] or 0.0, default=None)
    has_slo = any(lv.get("slo_met") is not None for lv in levels)
    return {
        "single_request_tok_s": single["decode_tok_s"]["mean"] if single else None,
        "single_request_ttft_ms_p50": single["ttft_ms"]["p50"] if single else None,
        "single_request_ttft_ms_p99": single["ttft_ms"]["p99"] if single else None,
        "peak_output_tok_s": peak["output_tok_s"] if peak else None,
        "peak_concurrency": peak["concurrency"] if peak else None,
        "peak_request_rate": peak.get("request_rate") if peak else None,
        "peak_ttft_ms_p50": peak["ttft_ms"]["p50"] if peak else None,
        "peak_ttft_ms_p99": peak["ttft_ms"]["p99"] if peak else None,
        "peak_tok_s_per_user": peak["decode_tok_s"]["mean"] if peak else None,
        "knee_concurrency": knee["concurrency"] if knee else None,
        "knee_output_tok_s": knee["output_tok_s"] if knee else None,
        "knee_fraction": knee_fraction,
        "slo_max_rate": slo_max_rate if slo_max_rate is not None else _max_met_rate(levels),
        "slo_goodput_tok_s": (best["goodput_tok_s"] if best else (0.0 if has_slo else None)),
        "slo_goodput_req_s": (best["goodput_req_s"] if best else (0.0 if has_slo else None)),
        "slo_best_level": (
            None
            if best is None
            else {
                "mode": best.get("mode"),
                "concurrency": best["concurrency"],
                "request_rate": best["request_rate"],
            }
        ),
        "completed": completed,
        "failed": failed,
        "error_rate": failed / (completed + failed) if completed + failed else None,
        "warnings": [w for lv in levels for w in lv["warnings"]],
    }


def _max_met_rate(levels):
    met = [_rate_value(lv) for lv in levels if lv.get("slo_met") and lv.get("request_rate") is not None]
    return rate_json(max(met)) if met else None


def slo_search(cfg, levels, run, progress=None, keep_going=None):
    """Bisection over request rate for the highest rate meeting the SLO (FORMULAS["slo_max_rate"]).

    levels: the ladder's levels (their verdicts bracket the search); run(rate, step) measures one rate level.
    Returns {"slo_max_rate", "bracket", "steps": [rates], "stopped"}; the new levels are appended to levels."""
    search = cfg["slo"]["search"]
    rated = [(_rate_value(lv), lv["slo_met"]) for lv in levels if lv.get("request_rate") is not None]
    met = [r for r, ok in rated if ok]
    lo = max(met) if met else None
    # a missed inf bounds nothing (all at once): the search then doubles from the highest met rate
    missed = [r for r, ok in rated if not ok and not math.isinf(r) and (lo is None or r > lo)]
    hi = min(missed) if missed else None
    tried, stopped = [], "steps"
    if lo is not None and math.isinf(lo):
        stopped = "inf met"  # every request at once met the SLO: no finite rate can miss it
    else:
        for step in range(1, search["steps"] + 1):
            if hi is None:
                r = search["min_rate"] if lo is None else lo * 2
                if search["max_rate"] is not None:
                    if lo is not None and lo >= search["max_rate"]:
                        stopped = "search_max_rate met"
                        break
                    r = min(r, search["max_rate"])
            elif lo is None:
                r = hi / 2
            else:
                if (hi - lo) / hi <= search["tolerance"]:
                    stopped = "tolerance"
                    break
                r = (lo + hi) / 2
            if math.isinf(r) or r in tried:
                break
            tried.append(r)
            lv = run(r, step)
            levels.append(lv)
            if lv["slo_met"]:
                lo = r
            else:
                hi = r
            if keep_going is not None and not keep_going(lv):
                stopped = "stopped between levels"
                break
    out = {
        "slo_max_rate": rate_json(lo),
        "bracket": [rate_json(lo), rate_json(hi)],
        "steps": tried,
        "stopped": stopped,
    }
    _say(progress, f"slo search done: max rate {rate_label(lo) if lo is not None else 'none'} req/s")
    return out


def discover(cfg, api_key=None):
    """Ask the server what it is (best effort): /server_info, and the model id for OpenAI routes."""
    info = {}
    try:
        status, body = http_json(cfg["url"] + "/server_info", api_key=api_key, timeout=15)
        if status == 200 and isinstance(body, dict):
            info = {
                k: body.get(k)
                for k in (
                    "version",
                    "model_path",
                    "tp_size",
                    "pp_size",
                    "ep_size",
                    "dp_size",
                    "max_total_num_tokens",
                    "max_running_requests",
                    "mem_fraction_static",
                    "context_length",
                )
                if k in body
            }
    except (OSError, urllib.error.URLError, ValueError):
        pass
    if cfg["api"] != "generate" and not cfg["model"]:
        try:
            status, body = http_json(cfg["url"] + "/v1/models", api_key=api_key, timeout=15)
        except (OSError, urllib.error.URLError) as exc:
            raise BenchError(f"cannot reach {cfg['url']}/v1/models to learn the model name: {exc}") from exc
        if status != 200 or not isinstance(body, dict) or not body.get("data"):
            raise BenchError(f"{cfg['url']}/v1/models answered HTTP {status}: {str(body)[:200]}")
        cfg["model"] = body["data"][0]["id"]
    return info


def check_reachable(cfg, api_key=None):
    try:
        status, _ = http_json(cfg["url"] + "/health", api_key=api_key, timeout=30)
    except (OSError, urllib.error.URLError) as exc:
        raise BenchError(f"server at {cfg['url']} is not reachable: {exc}") from exc
    if status != 200:
        raise BenchError(f"server at {cfg['url']} is not ready: GET /health answered HTTP {status}")


def level_specs(cfg):
    """The ladder, in the order run: concurrency levels, then request-rate levels."""
    specs = [
        {"mode": "concurrency", "concurrency": c, "num_prompts": n}
        for c, n in zip(cfg["concurrency"], cfg["num_prompts"])  # noqa: B905
    ]
    specs += [dict(spec, mode="rate") for spec in cfg.get("rate_levels") or []]
    return specs


def check_against_server(cfg, server):
    """Refuse, before any request, what the server's own figures rule out (context length)."""
    ctx = server.get("context_length")
    ds = cfg.get("dataset") or {}
    if isinstance(ctx, int) and ctx > 0 and ds.get("name") != "sharegpt":
        need = ds.get("prefix_len", 0) + cfg["input_len"] + cfg["output_len"]
        if need > ctx:
            what = (
                "shared prefix + question + output" if ds.get("name") == "shared-prefix" else "input + output"
            )
            raise BenchError(
                f"dataset {ds.get('name', 'random')!r}: {what} = {need} tokens is longer than the server's "
                f"context ({ctx} tokens, /server_info context_length)"
            )


def keep_going(cfg, level):
    """Whether the ladder (and the SLO search) go on after this level: the one place for checks between
    levels. It stops where the server died (level_server_died), which the level then records."""
    died = level_server_died(cfg, level, cfg.get("_api_key"))
    if died:
        level["server_died"] = died
        return False
    return True


def level_server_died(cfg, level, api_key=None, timeout=5.0):
    """After a level with failed requests: is the server gone? Then the ladder stops there (the
    next levels would only count failures against a dead server). None while GET /health answers."""
    if not level.get("failed"):
        return None
    try:
        status, _ = http_json(cfg["url"] + "/health", api_key=api_key, timeout=timeout)
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        hung = isinstance(reason, TimeoutError) or "timed out" in str(reason)
        what = f"no answer to GET /health within {timeout:g} s (hung)" if hung else f"GET /health: {reason}"
        return {
            "concurrency": level.get("concurrency"),
            "request_rate": level.get("request_rate"),
            "hung": hung,
            "detail": f"the server died during {_level_where(level)} ({what})",
        }
    if status == 200:
        return None
    return {
        "concurrency": level.get("concurrency"),
        "request_rate": level.get("request_rate"),
        "hung": False,
        "detail": f"the server stopped serving during {_level_where(level)} (GET /health: HTTP {status})",
    }


def _level_where(level):
    rate = level.get("request_rate")
    return f"concurrency {level.get('concurrency')}" if rate is None else f"request rate {rate} req/s"


def run_benchmark(cfg, api_key=None, progress=None, keep_requests=False):
    """Run every level of cfg (and the SLO search); returns {"summary", "levels", "config", "server", "formulas"}."""
    cfg = dict(cfg)
    cfg["_api_key"] = api_key
    check_reachable(cfg, api_key)
    server = discover(cfg, api_key)
    check_against_server(cfg, server)
    levels = []
    t0 = time.time()
    for index, spec in enumerate(level_specs(cfg)):
        level = asyncio.run(run_level(cfg, spec, index, progress, keep_requests))
        levels.append(level)
        if not keep_going(cfg, level):
            break
    search = None
    if (cfg.get("slo") or {}).get("search"):
        base = len(levels)

        def run_step(rate, step):
            spec = rate_level_spec(
                rate,
                cfg.get("rate_num_prompts"),
                cfg.get("duration_s"),
                cfg.get("max_concurrency"),
                cfg["min_prompts"],
            )
            spec.update(mode="rate", phase="slo_search", label=f"s{step} r={rate_label(rate)}")
            lv = asyncio.run(run_level(cfg, spec, base + step - 1, progress, keep_requests))
            lv["search_step"] = step
            return lv

        if all(keep_going(cfg, lv) for lv in levels[-1:]):
            search = slo_search(cfg, levels, run_step, progress, keep_going=lambda lv: keep_going(cfg, lv))
    died = next((lv["server_died"] for lv in levels if lv.get("server_died")), None)
    if died:
        # "bench failed:" also ends the playbook's wait for the levels that will not run
        _say(progress, f"bench failed: {died['detail']}; the levels after it were not run")
    summary = summarize(levels, cfg["knee_fraction"], None if search is None else search["slo_max_rate"])
    summary["server_died"] = died
    if search is not None:
        summary["slo_search"] = search
    mrr = server.get("max_running_requests")
    if isinstance(mrr, int) and mrr > 0:
        over = [c for c in cfg["concurrency"] if c > mrr]
        if over:
            summary["warnings"].append(
                f"concurrency {over} above the server's max_running_requests={mrr}: the extra requests queue"
            )
    summary["wall_s"] = time.time() - t0
    public = {k: v for k, v in cfg.items() if not k.startswith("_")}
    _say(progress, "bench finished: " + summary_line(summary))
    return {"summary": summary, "levels": levels, "config": public, "server": server, "formulas": FORMULAS}


def summary_line(summary):
    def f(v, fmt="{:.1f}"):
        return "-" if v is None else fmt.format(v)

    return (
        f"single-request {f(summary['single_request_tok_s'])} tok/s, peak {f(summary['peak_output_tok_s'])} "
        f"tok/s @ {f(summary['peak_concurrency'], '{}')}, knee @ {f(summary['knee_concurrency'], '{}')}, "
        f"{summary['failed']} failed"
    )
