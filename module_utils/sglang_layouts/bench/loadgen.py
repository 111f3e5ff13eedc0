"""Load generator for one running SGLang server (standard library only): the measurement.

It runs on a bare host ``python3`` (no aiohttp). Per concurrency level: a warm-up (not counted; by default
``warmup`` requests per stream, the level's ``concurrency`` of them at once, bounded in time), then
``POST /flush_cache``, then ``num_prompts`` requests issued by ``concurrency`` workers, each of which
sends its next request as soon as its previous one ends, so exactly ``concurrency`` requests are in
flight until the queue drains. Request-rate levels send on a seeded schedule instead (open loop).
A level that still stalled (stall) is measured once more; both figures are kept.

This module holds the configuration, the levels and what they record, the summary and the whole run.
The parts it drives live beside it: client (HTTP/1.1 + SSE client, closed and open loop),
workloads (datasets, prompts, request bodies), schedule (arrival schedules), slo (SLO,
goodput, the SLO search), telemetry (/metrics and GPUs) and common (error, rates,
percentiles).

Every figure is defined in ``FORMULAS`` (bench/formulas.py); the module's RETURN docs and every result record carry the same
text.
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import random
import time
import urllib.error
from urllib.parse import urlsplit

from .client import API_PATHS, APIS, Client, Endpoint, http_json, run_closed_loop, run_open_loop
from .common import BenchError, is_number, parse_rate, rate_json, rate_label, say, stats
from .formulas import FORMULAS
from .schedule import ARRIVAL_RNGS, arrival_offsets, bench_serving_offsets, vllm_offsets
from .slo import evaluate_slo, make_slo, max_met_rate, slo_search
from .stall import (
    STALL_FACTOR,
    STALL_MIN_S,
    first_wave_ttft_ms,
    neighbour_above,
    neighbour_below,
    progress_gap,
    stall_verdict,
)
from .telemetry import TELEMETRY_INTERVAL_S, Telemetry, pd_counters, ttft_split
from .workloads import make_dataset, make_workload, request_body

DEFAULT_CONCURRENCY = (1, 2, 4, 8, 16, 32, 64)
NUM_PROMPTS_MIN = 8
NUM_PROMPTS_MAX = 1024
KNEE_FRACTION = 0.9
ACHIEVED_CONCURRENCY_WARN = 0.9
RATE_LEVEL_S = 30.0  # a rate level without num_prompts / duration_s sends about this many seconds of arrivals
RATE_POOL_PREOPEN = 64  # connections opened before a rate level starts (more are opened on demand)
# keep_alive: one connection per stream, opened ahead; per_request: one per request (bench_serving's way)
CONNECTIONS = ("keep_alive", "per_request")
LATE_SEND_WARN_MS = 5.0
ACHIEVED_RATE_WARN = 0.95
LEVEL_WARMUP_TIMEOUT_S = 120.0  # longest warm-up of one level; the stall rule catches what it left cold


def default_num_prompts(concurrency, per_stream=4, minimum=NUM_PROMPTS_MIN, maximum=NUM_PROMPTS_MAX):
    """Requests per level when num_prompts is not given: per_stream x concurrency (4), at least
    `minimum` (8), at most `maximum` (1024)."""
    return max(minimum, min(per_stream * concurrency, maximum))


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
    connection="keep_alive",
    level_warmup=True,
    level_warmup_timeout=LEVEL_WARMUP_TIMEOUT_S,
    stall_check=True,
    stall_min_s=STALL_MIN_S,
    stall_factor=STALL_FACTOR,
    pd_prefill_urls=None,
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
    if not is_number(burstiness) or not 0 < burstiness < math.inf:
        raise BenchError(f"burstiness must be a number > 0 (1 = Poisson), not {burstiness!r}")
    if max_concurrency is not None and (
        not isinstance(max_concurrency, int) or isinstance(max_concurrency, bool) or max_concurrency < 1
    ):
        raise BenchError(f"max_concurrency must be an integer >= 1 (or null), not {max_concurrency!r}")
    if duration_s is not None and (not is_number(duration_s) or not 0 < duration_s < math.inf):
        raise BenchError(f"duration_s must be a number of seconds > 0 (or null), not {duration_s!r}")
    if context_length is not None and (not isinstance(context_length, int) or context_length < 2):
        raise BenchError(f"context_length must be an integer >= 2 (or null), not {context_length!r}")
    if not is_number(telemetry_interval) or not 0.05 <= telemetry_interval <= 3600:
        raise BenchError(f"telemetry_interval must be in [0.05, 3600] seconds, not {telemetry_interval!r}")
    if not is_number(level_warmup_timeout) or not 0 < level_warmup_timeout < math.inf:
        raise BenchError(
            f"level_warmup_timeout must be a number of seconds > 0, not {level_warmup_timeout!r}"
        )
    if not is_number(stall_min_s) or not 0 < stall_min_s < math.inf:
        raise BenchError(f"stall_min_s must be a number of seconds > 0, not {stall_min_s!r}")
    if not is_number(stall_factor) or not 1 <= stall_factor < math.inf:
        raise BenchError(f"stall_factor must be a number >= 1, not {stall_factor!r}")
    if connection not in CONNECTIONS:
        raise BenchError(f"connection must be one of {', '.join(CONNECTIONS)}, not {connection!r}")
    if arrival_rng not in ARRIVAL_RNGS:
        raise BenchError(f"arrival_rng must be one of {', '.join(ARRIVAL_RNGS)}, not {arrival_rng!r}")
    if arrival_rng != "python":
        if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed <= 0xFFFFFFFF:
            raise BenchError(
                f"arrival_rng {arrival_rng}: seed must be an integer in [0, 2**32 - 1] (numpy's), not {seed!r}"
            )
        if rates and num_prompts is None and duration_s is not None:
            raise BenchError(
                f"arrival_rng {arrival_rng} draws a schedule for a request count (the client's --num-prompts): "
                "give num_prompts, not duration_s"
            )
    if arrival_rng == "bench_serving" and (
        not isinstance(vocab_size, int) or isinstance(vocab_size, bool) or not 1 <= vocab_size <= 0xFFFFFFFF
    ):
        raise BenchError(f"vocab_size must be an integer in [1, 2**32 - 1], not {vocab_size!r}")
    for u in pd_prefill_urls or []:
        if urlsplit(str(u)).scheme not in ("http", "https") or not urlsplit(str(u)).hostname:
            raise BenchError(f"pd_prefill_urls: each must be http(s)://host:port, not {u!r}")
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
        "level_warmup": bool(level_warmup),
        "level_warmup_timeout": float(level_warmup_timeout),
        "stall_check": bool(stall_check),
        "stall_min_s": float(stall_min_s),
        "stall_factor": float(stall_factor),
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
        "connection": connection,
        # a pd layout's prefill servers: each level's TTFT split into prefill and KV transfer from their metrics
        "pd_prefill_urls": [str(u).rstrip("/") for u in pd_prefill_urls] if pd_prefill_urls else None,
    }
    cfg["_pairs"] = pairs
    return cfg


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


def _rid(cfg, level_index, kind, i, attempt=1):
    again = "" if attempt == 1 else f"a{attempt}"  # a level measured once more: ids of its own
    return f"{cfg['rid_prefix']}-l{level_index}{again}-{kind}{i}"


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


async def run_level(cfg, spec, index, progress=None, keep_requests=False, attempt=1):
    """One level: spec = {"mode": "concurrency", "concurrency"} or {"mode": "rate", "request_rate", ...}.
    attempt 2 measures it once more (after a stall): no warm-up (the first measurement warmed it), own rids
    and prompts."""
    rate = None if spec["mode"] == "concurrency" else parse_rate(spec["request_rate"])
    concurrency = spec.get("concurrency") if rate is None else spec.get("max_concurrency")
    endpoint = Endpoint(cfg["url"], cfg.get("_api_key"))
    again = "" if attempt == 1 else f":a{attempt}"
    # Distinct prompts for every level and for warmup: no prefix-cache replay between levels.
    if rate is None:
        rng = random.Random(f"{cfg['seed']}:{index}:{concurrency}{again}")
        label = _spec_label(spec)
        offsets = None
        n = spec["num_prompts"]
    else:
        rng = random.Random(f"{cfg['seed']}:{index}:rate:{rate_label(rate)}{again}")
        label = _spec_label(spec)
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
        elif cfg.get("arrival_rng") == "vllm":
            sched_seed = cfg["seed"]
            offsets = vllm_offsets(rate, cfg["burstiness"], sched_seed, spec["num_prompts"])
        else:
            sched_seed = f"{cfg['seed']}:arrivals:{rate_label(rate)}:{cfg['burstiness']:g}"
            offsets = arrival_offsets(
                rate, cfg["burstiness"], sched_seed, spec.get("num_prompts"), spec.get("duration_s")
            )
        n = len(offsets)
    keep_alive = cfg["connection"] == "keep_alive"
    if rate is None:
        clients = [Client(endpoint, keep_alive) for _stream in range(min(concurrency, n))]
    else:
        clients = [
            Client(endpoint, keep_alive) for _stream in range(min(concurrency or n, n, RATE_POOL_PREOPEN))
        ]
    # The level's own warm-up: `warmup` requests per stream, every stream at once, so the server meets the
    # batch the level makes before the measurement does (level_warmup false: `warmup` requests in all).
    n_warm = 0 if attempt > 1 else cfg["warmup"] * (len(clients) if cfg.get("level_warmup") else 1)
    warm_len = min(cfg["output_len"], 16)
    warm = [
        request_body(cfg, _rid(cfg, index, "w", i), prompt, min(warm_len, out), rng)
        for i, (prompt, out) in enumerate(make_workload(cfg, rng, n_warm))
    ]
    rids = [_rid(cfg, index, "r", i, attempt) for i in range(n)]
    work = make_workload(cfg, rng, n)
    bodies = [request_body(cfg, rid, prompt, out, rng) for rid, (prompt, out) in zip(rids, work)]  # noqa: B905
    extra = f", {n_warm} warmup" + ("" if rate is None else f", open loop at {rate_label(rate)} req/s")
    say(progress, f"level {label} {'start' if attempt == 1 else 'again'}: {n} requests{extra}")
    telemetry = None
    # the level's seconds outside its warm-up and its measurement (the tool's, in the record's tool_s)
    between = {}
    clock = time.perf_counter
    try:
        t = clock()
        if keep_alive:
            await asyncio.gather(*(cl.connect(min(cfg["request_timeout"], 30.0)) for cl in clients))
        between["connect"] = clock() - t
        warmup = await _warm_up(cfg, clients, warm, warm_len) if warm else None
        flush = None
        t = clock()
        if cfg["flush_cache"]:
            flush = await asyncio.get_running_loop().run_in_executor(None, flush_cache, cfg)
        between["flush_cache"] = clock() - t
        t = clock()
        if cfg.get("telemetry"):
            telemetry = Telemetry(cfg["url"], cfg.get("_api_key"), cfg["telemetry_interval"]).start()
        pd_before, pd_why = (None, None)
        if cfg.get("pd_prefill_urls"):
            pd_before, pd_why = await asyncio.get_running_loop().run_in_executor(
                None,
                functools.partial(
                    pd_counters, cfg["pd_prefill_urls"], cfg.get("_api_key"), before_first=True
                ),
            )
        between["telemetry_start"] = clock() - t
        try:
            if rate is None:
                raws = await run_closed_loop(clients, cfg, bodies)
            else:
                raws = await run_open_loop(endpoint, clients, cfg, bodies, offsets, concurrency)
        finally:
            t = clock()
            tele = telemetry.stop() if telemetry is not None else None
            pd_after = None
            if cfg.get("pd_prefill_urls") and pd_why is None:
                pd_after, pd_why = await asyncio.get_running_loop().run_in_executor(
                    None, pd_counters, cfg["pd_prefill_urls"], cfg.get("_api_key")
                )
            between["telemetry_stop"] = clock() - t
    finally:
        for cl in clients:
            cl.close()
    # duration: first start to last end of the measured requests
    start = min(r["t_start"] for r in raws)
    end = max(r["t_end"] for r in raws)
    results = [analyse(cfg["api"], r) for r in raws]
    for r, (_prompt, out) in zip(results, work):  # noqa: B905
        r["asked_output_len"] = out
    level = summarize_level(cfg, concurrency, results, end - start, n, rate=rate)
    level["progress_gap_ms"], level["progress_gap_at_s"] = progress_gap(results)
    level["first_wave_ttft_ms"] = first_wave_ttft_ms(results) if rate is None else None
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
    if cfg.get("pd_prefill_urls"):
        level.update(ttft_split(pd_before, pd_after, pd_why))
    level["between_s"] = {k: round(v, 3) for k, v in between.items()}
    level["warmup"] = warmup
    level["warmup_failed"] = 0 if warmup is None else warmup["failed"]
    if warmup is not None and warmup["cut"]:
        level["warnings"].append(
            f"{_level_name(concurrency, rate)}: the warm-up was cut at level_warmup_timeout "
            f"({cfg['level_warmup_timeout']:g} s; {warmup['timed_out']} requests timed out, {warmup['not_sent']} "
            "not sent): the level may have measured a cold server"
        )
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
    return level  # its "done" line is measure_level's, after the stall rule


async def _warm_up(cfg, clients, bodies, max_tokens):
    """Send the warm-up bodies through the level's streams (the first len(clients) at once), cut at
    level_warmup_timeout; what it did, for the record (FORMULAS["warmup"])."""
    limit = cfg.get("level_warmup_timeout", LEVEL_WARMUP_TIMEOUT_S)
    t0 = time.perf_counter()
    raws = await run_closed_loop(clients, cfg, bodies, deadline=t0 + limit)
    seconds = time.perf_counter() - t0
    sent = [r for r in raws if r is not None]
    timed_out = sum(1 for r in sent if (r.get("error") or "").startswith("timeout"))
    failed = sum(0 if analyse(cfg["api"], r)["ok"] else 1 for r in sent)
    return {
        "requests": len(sent),
        "at_once": min(len(clients), len(bodies)),
        "max_new_tokens": max_tokens,
        "seconds": seconds,
        "failed": failed,
        "timed_out": timed_out,
        "not_sent": len(bodies) - len(sent),
        "limit_s": limit,
        "cut": timed_out > 0 or len(sent) < len(bodies),
    }


def measure_level(cfg, spec, index, levels, server=None, progress=None, keep_requests=False):
    """run_level, then the stall rule (stall.stall_verdict against the neighbour below among `levels`);
    a level that stalled is measured once more and the re-measurement is the level, its first measurement
    kept under stall.first (FORMULAS["stall"])."""
    first = asyncio.run(run_level(cfg, spec, index, progress, keep_requests))
    label = _spec_label(spec)
    if not cfg.get("stall_check", True) or not first["completed"]:
        first["stall"] = None
        say(progress, f"level {label} done: {level_line(first)}")
        return first
    mrr = (server or {}).get("max_running_requests")

    def verdict(level):
        return stall_verdict(
            level, neighbour_below(levels, level), mrr, cfg["stall_min_s"], cfg["stall_factor"]
        )

    found = verdict(first)
    # a server that died in the level is keep_going's to report, not a level to measure again
    if not found["detected"] or level_server_died(cfg, first, cfg.get("_api_key")):
        first["stall"] = found
        say(progress, f"level {label} done: {level_line(first)}")
        return first
    return _measure_again(cfg, spec, index, first, found, verdict, progress, keep_requests)


def _measure_again(cfg, spec, index, first, found, verdict, progress, keep_requests):
    """The stalled level `first` measured once more; the re-measurement is the level, `first` kept under
    stall.first, `verdict` (the rule that found it) asked again of the second measurement."""
    label = _spec_label(spec)
    say(progress, f"level {label} stalled: {'; '.join(found['reasons'])}; measuring it once more")
    level = asyncio.run(run_level(cfg, spec, index, progress, keep_requests, attempt=2))
    again = verdict(level) if level["completed"] else {"detected": False, "reasons": []}
    level["warmup"], level["warmup_failed"] = first["warmup"], first["warmup_failed"]
    first.pop("stall", None)
    level["stall"] = dict(found, first=first, persisted=again["detected"], reasons_again=again["reasons"])
    persisted = (
        f"; it stalled again ({'; '.join(again['reasons'])}): not a warm-up effect, the level's own behaviour"
        if again["detected"]
        else ""
    )
    level["warnings"].append(
        f"{_level_where(level)}: the first measurement stalled ({'; '.join(found['reasons'])}): measured "
        f"once more, the figures are the second measurement's (first: {_fmt(first['output_tok_s'])} tok/s, "
        f"TTFT p50 {_fmt(first['ttft_ms']['p50'])} ms){persisted}"
    )
    say(progress, f"level {label} done: {level_line(level)} (measured again after a stall)")
    return level


def recheck_against_above(cfg, specs, levels, server=None, progress=None, keep_requests=False):
    """After the sweep: each concurrency level not yet called stalled, asked again with its neighbour above
    (stall.stall_verdict's third rule: a TTFT far beyond what a heavier load got); such a level is
    measured once more (the server is warm) and replaced in `levels` by the re-measurement."""
    if not cfg.get("stall_check", True) or any(lv.get("server_died") for lv in levels):
        return
    mrr = (server or {}).get("max_running_requests")
    for index, first in enumerate(levels):
        if not first.get("completed") or (first.get("stall") or {}).get("detected", True):
            continue  # nothing measured, stall_check off (stall None), or already measured again
        before = levels[:index]

        def verdict(level, before=before, index=index):
            above = neighbour_above(levels[:index] + levels[index + 1 :], level)
            return stall_verdict(
                level,
                neighbour_below(before, level),
                mrr,
                cfg["stall_min_s"],
                cfg["stall_factor"],
                above=above,
            )

        found = verdict(first)
        if found["detected"]:
            first.pop("stall", None)
            levels[index] = _measure_again(
                cfg, specs[index], index, first, found, verdict, progress, keep_requests
            )


def _spec_label(spec):
    """The level's name in the progress lines (c=N, r=R, or the SLO search's own label)."""
    if spec["mode"] == "concurrency":
        return f"c={spec['concurrency']}"
    return spec.get("label") or f"r={rate_label(parse_rate(spec['request_rate']))}"


def _fmt(v, spec="{:.1f}"):
    """A figure for a progress line: '-' where it is undefined."""
    return "-" if v is None else spec.format(v)


def level_line(level):
    f = _fmt
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
        "slo_max_rate": slo_max_rate if slo_max_rate is not None else max_met_rate(levels),
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
        # levels measured once more after a stall (their figures above are the second measurement's)
        "stalled_levels": [
            {
                "mode": lv.get("mode", "concurrency"),
                "concurrency": lv["concurrency"],
                "request_rate": lv.get("request_rate"),
                "persisted": lv["stall"].get("persisted", False),
            }
            for lv in levels
            if (lv.get("stall") or {}).get("detected")
        ],
    }


def discover(cfg, api_key=None):
    """Ask the server what it is (best effort): (the figures of its /server_info, whether /server_info
    answered 200)."""
    info, answered = {}, False
    try:
        status, body = http_json(cfg["url"] + "/server_info", api_key=api_key, timeout=15)
        if status == 200 and isinstance(body, dict):
            answered = True
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
    return info, answered


def learn_model(cfg, api_key=None):
    """The model id the OpenAI routes need, from /v1/models, unless cfg names it."""
    if cfg["api"] != "generate" and not cfg["model"]:
        try:
            status, body = http_json(cfg["url"] + "/v1/models", api_key=api_key, timeout=15)
        except (OSError, urllib.error.URLError) as exc:
            raise BenchError(f"cannot reach {cfg['url']}/v1/models to learn the model name: {exc}") from exc
        if status != 200 or not isinstance(body, dict) or not body.get("data"):
            raise BenchError(f"{cfg['url']}/v1/models answered HTTP {status}: {str(body)[:200]}")
        cfg["model"] = body["data"][0]["id"]


def check_reachable(cfg, api_key=None):
    """GET /health answers 200, else a BenchError that says whether the server is unreachable or not
    ready."""
    try:
        status, _body = http_json(cfg["url"] + "/health", api_key=api_key, timeout=30)
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
        status, _body = http_json(cfg["url"] + "/health", api_key=api_key, timeout=timeout)
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
    server, answered = discover(cfg, api_key)
    # A /server_info that answered is proof enough that the server is there. SGLang's /health runs a
    # one-token generation and sleeps 1 s before it looks at the answer (http_server.py
    # health_generate): a second of every layout, right after the readiness gate's own /health.
    if not answered:
        check_reachable(cfg, api_key)
    learn_model(cfg, api_key)
    check_against_server(cfg, server)
    levels = []
    t0 = time.time()
    specs = level_specs(cfg)
    for index, spec in enumerate(specs):
        level = measure_level(cfg, spec, index, levels, server, progress, keep_requests)
        levels.append(level)
        if not keep_going(cfg, level):
            break
    recheck_against_above(cfg, specs, levels, server, progress, keep_requests)
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
            lv = measure_level(cfg, spec, base + step - 1, levels, server, progress, keep_requests)
            lv["search_step"] = step
            return lv

        if all(keep_going(cfg, lv) for lv in levels[-1:]):
            search = slo_search(cfg, levels, run_step, progress, keep_going=lambda lv: keep_going(cfg, lv))
    died = next((lv["server_died"] for lv in levels if lv.get("server_died")), None)
    if died:
        # "bench failed:" also ends the playbook's wait for the levels that will not run
        say(progress, f"bench failed: {died['detail']}; the levels after it were not run")
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
    say(progress, "bench finished: " + summary_line(summary))
    return {"summary": summary, "levels": levels, "config": public, "server": server, "formulas": FORMULAS}


def summary_line(summary):
    f = _fmt
    return (
        f"single-request {f(summary['single_request_tok_s'])} tok/s, peak {f(summary['peak_output_tok_s'])} "
        f"tok/s @ {f(summary['peak_concurrency'], '{}')}, knee @ {f(summary['knee_concurrency'], '{}')}, "
        f"{summary['failed']} failed"
    )
