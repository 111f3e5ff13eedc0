"""The definition of every figure the load generator measures, as the records carry it.

Apart from bench/loadgen.py so that the result store (report/results.py), which writes these into every record, does not
import the load generator (asyncio, the HTTP client): a module's imports are compiled anew on each run."""

from __future__ import annotations

FORMULAS = {
    "clock": "time.perf_counter() on the client (monotonic, CLOCK_MONOTONIC on Linux); with connection keep_alive "
    "(the default) each stream keeps one HTTP/1.1 keep-alive connection, opened before the level starts; with "
    "connection per_request every request opens its own and closes it after the answer (what bench_serving and vllm "
    "bench serve do: their TTFT includes the TCP connect); t_start is taken just before the request is written "
    "(before the TCP connect when a connection has to be opened); arrival times are taken in "
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
    "ttft_prefill_ms": "pd layouts: mean over the level's requests that reached a decode server through a KV "
    "transfer of the time from the prefill server's arrival to its prefill's end (queue + prefill), from the decode "
    "servers' counters read before and after the level (the simulator exports them; null, with ttft_split.why, "
    "when the servers do not: never estimated)",
    "ttft_transfer_ms": "pd layouts: the same mean of the KV transfer's time (prefill's end to the KV's arrival at "
    "the decode server); the rest of TTFT is the router, the handshake and the first decode step",
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
    "burstiness is not 1), reproduced to the float with the standard library (NumpyLegacyRandom); with "
    "arrival_rng vllm, the delays `vllm bench serve --seed <seed> --num-prompts <n> --request-rate <rate>` (0.32) "
    "computes: after np.random.seed(seed), np.random.gamma(burstiness, 1 / (rate x burstiness)) per request (the "
    "first included), summed, the sums rescaled so that the last is n / rate; offset_i = delay_i - delay_0; "
    "inf = every request at offset 0; with max_concurrency a scheduled request "
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
    "slo_max_rate": "highest request rate whose level met the SLO while every lower rate tested met it too "
    "(sustained: a rate that met it above the lowest missed finite rate is listed under slo_search."
    "met_above_bracket, not counted; a missed inf bounds nothing): from the rate ladder, then refined by the SLO "
    "search (bisection between that rate and the lowest missed rate; doubling from search_min_rate or the "
    "highest met rate while nothing is missed, capped at search_max_rate; at most search_steps levels); null "
    "when no rate met it",
    "telemetry": "sampled every telemetry_interval seconds during the measured requests of a level: the "
    "server's /metrics (Prometheus text; per sample the ranks' series combine: running and queued requests and "
    "gen_throughput summed, token_usage max, cache_hit_rate mean) and per GPU memory.used (MiB), "
    "utilization.gpu (%) and power.draw (W) from an `nvidia-smi --query-gpu ... -lms` loop; each summarised as "
    'mean and max over samples; a metric the server does not export is null, no GPU tool = "absent" (never 0)',
    "warmup": "per level, before /flush_cache and the measured requests, not counted in any figure: with "
    "level_warmup (the default) warmup x streams requests (streams = the level's concurrency; a rate level's "
    "pre-opened connections, max_concurrency or at most 64), the first `streams` of them at once, so the server "
    "meets the batch the level makes before the measurement does; without it warmup requests in all; each asks "
    "for min(output_len, 16) tokens of the level's workload shape; none starts after level_warmup_timeout "
    "seconds and none runs past it (cut: true, the level then runs anyway); recorded as levels[].warmup "
    "{requests, at_once, max_new_tokens, seconds, failed, timed_out, not_sent, limit_s, cut}; a level measured "
    "once more after a stall has no warm-up of its own (its first measurement warmed it)",
    "first_wave_ttft_ms": "a concurrency level's median TTFT of each stream's first request, where it completed "
    "(its first wave: every stream's prompt at once, the largest prefill a closed loop makes); null for a rate level",
    "progress_gap_ms": "the longest stretch of a level during which at least one completed request was in flight "
    "(between its t_start and t_end) and no output-carrying chunk arrived on any stream; the stretch before a "
    "level's first token counts; progress_gap_at_s = when it began, in seconds after the level's first request",
    "stall": "stall rule, per level, over its own figures and those of its neighbour below (the concurrency "
    "level measured before it with the largest concurrency below its own; none for the first level and for rate "
    "levels): stalled when (1) progress_gap_ms > stall_min_s (2 s) and > stall_factor (4) x explained, explained = "
    "max(own itl_ms p90, neighbour's itl_ms p99, neighbour's progress_gap_ms x concurrency / neighbour's "
    "concurrency), or without a neighbour max(own itl_ms p90, own ttft_ms p50); or (2) a concurrency level with a "
    "neighbour and no queue (concurrency <= the server's max_running_requests when it reports one): ttft_ms p50 > "
    "stall_min_s and > stall_factor x neighbour's ttft_ms p50 x concurrency / neighbour's concurrency; or (3) "
    "after the sweep, a concurrency level with no queue whose ttft_ms p50 > stall_min_s and > stall_factor x the "
    "ttft_ms p50 of its neighbour above (the next larger concurrency): such a level is measured once more at the "
    "sweep's end; or (4) a concurrency level with no queue whose progress_gap_ms > stall_min_s and > stall_factor "
    "x its own first_wave_ttft_ms. A stalled level is measured once more at once (own rids <prefix>-l<level>a2-r<n>, own prompts, /flush_cache, no "
    "warm-up); its figures, the summary, the report and the winners are the second measurement's; "
    "levels[].stall = {detected, reasons, gap_limit_ms, ttft_limit_ms, ttft_above_limit_ms, wave_limit_ms} and, when detected, first (the first "
    "measurement's whole level entry), persisted (the second measurement met the rule too: the level's own "
    "behaviour, not a cold server) and reasons_again; null with stall_check off",
    "dataset": "random: input_len / output_len fixed; random-range: lengths uniform in "
    "[max(1, int(len x range_ratio)), len] (bench_serving's --random-range-ratio); sharegpt: first human turn "
    "as the prompt text, the reply's whitespace-separated word count (or output_len) as the output length; "
    "shared-prefix: num_groups system prompts of prefix_len token ids, request i uses group i mod num_groups "
    "followed by input_len random ids; prompt token counts are the server's (meta_info / usage)",
}
