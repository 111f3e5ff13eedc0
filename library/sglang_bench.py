#!/usr/bin/python
# Copyright: sglang-layouts contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_bench
short_description: Measure one running SGLang server at concurrency and request-rate levels, with SLOs and telemetry
description:
  - A closed-loop load generator written with the Python standard library only (asyncio, raw HTTP/1.1,
    Server-Sent Events), so it runs on a bare host C(python3) with no aiohttp.
  - For every concurrency level it sends a warm-up (not counted; with O(level_warmup) O(warmup) requests per
    stream, the level's O(concurrency) of them at once, bounded by O(level_warmup_timeout)), then
    C(POST /flush_cache) (when O(flush_cache)), then O(num_prompts) streamed requests from O(concurrency) workers;
    each worker sends its next request as soon as its previous one ended, so exactly O(concurrency) requests are
    in flight.
  - A level that still stalled (no output on any stream for far longer than its load and its neighbour level
    explain, or a TTFT far past its neighbour's with no queue; O(stall_min_s), O(stall_factor)) is measured once
    more at once; the level's figures are the second measurement's, the first is kept under C(stall.first).
  - Prompts are random token ids (no tokenizer needed) of O(input_len) tokens, distinct for every level and
    for warmup (no prefix-cache replay); every request asks for O(output_len) tokens with C(ignore_eos).
  - Every request carries a unique C(rid) in its body, so a server-side log can be matched to it.
  - Token counts come from the server (C(meta_info.completion_tokens) of C(/generate), C(usage) of the OpenAI
    routes), never from what was asked.
  - Progress lines (one when a level starts, one when it ends, one at the end) are appended to O(progress_file)
    so that a playbook can show each level while the module runs asynchronously.
  - O(request_rates) adds open-loop levels after the concurrency levels, where requests are sent on a seeded
    schedule (Poisson arrivals, gamma with O(burstiness), C(inf) = all at once) whatever the server does, at
    most O(max_concurrency) in flight when set; each level records the schedule and how late each request was
    sent against it, and warns when the client could not keep up.
  - O(dataset) picks the workload (fixed random ids, random lengths, a ShareGPT file, shared-prefix groups);
    O(slo) gives per level goodput and whether the level meets it, and with C(search) a bisection over the
    request rate for the highest rate that meets it.
  - O(telemetry) samples the server's C(/metrics) (start SGLang with C(--enable-metrics)) and the GPUs
    (C(nvidia-smi) query loop; absent GPUs are recorded as C(absent)) during every level.
  - Bad input (a rate of 0 or below, an SLO key that does not exist, a dataset file that does not parse or holds no
    usable conversation, prompts longer than the context) fails before any request is sent.
version_added: "0.1.0"
author: sglang-layouts maintainers (@sglang-layouts)
options:
  url:
    description: Base URL of the server, for example C(http://127.0.0.1:30000).
    type: str
    required: true
  api:
    description: Which route to load. C(generate) is SGLang's native C(/generate); C(completions) is
      C(/v1/completions) (token-id prompt); C(chat) is C(/v1/chat/completions) (random common words, about
      one token each; the server's C(prompt_tokens) are reported).
    type: str
    choices: [generate, completions, chat]
    default: generate
  concurrency:
    description: Concurrency levels, run in this order.
    type: list
    elements: int
    default: [1, 2, 4, 8, 16, 32, 64]
  num_prompts:
    description:
      - Measured requests per level (the same for every level). When omitted it grows with the level,
        C(max(min_prompts, min(prompts_per_stream x concurrency, 1024))), by default C(max(8, min(4 x c, 1024))),
        so that every stream runs about four requests without a fixed large count at concurrency 1.
    type: int
  prompts_per_stream:
    description: Requests per stream when O(num_prompts) is omitted.
    type: int
    default: 4
  min_prompts:
    description: Fewest requests of a level when O(num_prompts) is omitted.
    type: int
    default: 8
  input_len:
    description: Prompt length in tokens (fixed).
    type: int
    default: 1024
  output_len:
    description: Output length in tokens (fixed, C(ignore_eos)).
    type: int
    default: 256
  warmup:
    description: Warm-up requests per stream of a level with O(level_warmup) (per level without it), each asking for
      the smaller of O(output_len) and 16 tokens, of the level's workload shape; excluded from every figure. C(0) = no
      warm-up.
    type: int
    default: 1
  level_warmup:
    description:
      - Warm every level at its own concurrency - O(warmup) requests per stream, the level's streams at once (its
        O(concurrency); for a rate level its pre-opened connections, O(max_concurrency) or at most 64) - so that the
        server meets the batch the level makes (a kernel compiled for a new batch size) before the measurement.
      - C(false) sends O(warmup) requests per level in all, as before this option.
    type: bool
    default: true
  level_warmup_timeout:
    description: Longest warm-up of one level in seconds; no warm-up request starts after it or runs past it
      (C(warmup.cut) in the level, and a warning); the level then runs anyway and the stall rule judges it.
    type: float
    default: 120
  stall_check:
    description: Apply the stall rule to every level and measure a stalled level once more (C(stall) in each level).
    type: bool
    default: true
  stall_min_s:
    description: No pause shorter than this many seconds is a stall (the rule's floor for the progress gap and for
      TTFT p50).
    type: float
    default: 2.0
  stall_factor:
    description: How many times what the load explains a pause (or TTFT p50) must exceed to be a stall (formulas
      C(stall)).
    type: float
    default: 4.0
  seed:
    description: Seed of the random prompts (the same seed gives the same prompts).
    type: int
    default: 1
  flush_cache:
    description: C(POST /flush_cache) after the warmup and before the measured requests of every level.
    type: bool
    default: true
  request_timeout:
    description: Seconds one request may take (connect to last chunk); a request past it is failed.
    type: float
    default: 600
  api_key:
    description: Bearer token for servers started with C(--api-key).
    type: str
  model:
    description: Model name for the OpenAI routes; default the first id of C(/v1/models).
    type: str
  vocab_size:
    description: Token ids are drawn from C([100, vocab_size)).
    type: int
    default: 32000
  knee_fraction:
    description: The knee is the smallest concurrency reaching this fraction of the peak output tok/s.
    type: float
    default: 0.9
  progress_file:
    description: File the progress lines are written to (emptied first; its folder is created);
      default C(<tmp>/sglang_bench.progress).
    type: path
  rid_prefix:
    description: Prefix of the request ids (C(<prefix>-l<level>-r<n>), warmup C(-w<n>), a level measured once more
      after a stall C(<prefix>-l<level>a2-r<n>)); default unique per run.
    type: str
  keep_requests:
    description: Also return every request's figures (C(levels[].requests)); for tests and audits.
    type: bool
    default: false
  request_rates:
    description:
      - Open-loop levels in requests/s, run after the O(concurrency) levels, in this order. A number > 0 or
        C(inf) (every request at once). Set O(concurrency=[]) for a rate ladder only.
      - Requests per level are O(num_prompts), or every arrival before O(duration_s), or by default
        C(max(min_prompts, min(ceil(rate x 30), 1024))) (C(inf) without O(num_prompts) sends
        C(max(min_prompts, min(4 x max_concurrency, 1024))) with 16 when O(max_concurrency) is not set).
    type: list
    elements: raw
    default: []
  burstiness:
    description: Shape of the gamma distribution of the gaps between arrivals (mean 1 / rate); C(1) is Poisson,
      below 1 burstier, above 1 more regular (as vLLM's and SGLang's C(--burstiness)).
    type: float
    default: 1.0
  connection:
    description:
      - How the client connects. C(keep_alive) (the default) keeps one HTTP/1.1 connection per stream, opened
        before the level starts, as a serving client (the OpenAI SDK, a router) does.
      - C(per_request) opens a connection for every request and closes it after the answer, which is what
        C(sglang.bench_serving) and C(vllm bench serve) do (a new aiohttp session per request); their TTFT then
        includes the TCP connect. For conformance runs against them.
    type: str
    choices: [keep_alive, per_request]
    default: keep_alive
  arrival_rng:
    description:
      - Which generator draws the gaps between arrivals of the rate levels.
      - C(python) (the default) draws them from C(random.Random) seeded by O(seed), the rate and O(burstiness),
        so that every level has its own schedule.
      - C(bench_serving) draws the very schedule that C(python -m sglang.bench_serving --seed <seed>
        --num-prompts <num_prompts> --request-rate <rate>) (SGLang 0.5.23, C(--dataset-name random-ids),
        C(--random-range-ratio 1.0) for O(dataset=random), the dataset's C(range_ratio) for C(random-range))
        sends on, equal to the float, from numpy's legacy global generator (C(np.random.seed(seed))), reproduced with
        the standard library; the draws of bench_serving's dataset sampling come first (the input and output
        lengths, then one prompt offset per request in C([0, vocab_size)), so set O(vocab_size) to the tokenizer's
        C(vocab_size)), then C(np.random.exponential(1 / rate)) per gap, or
        C(np.random.gamma(burstiness, 1 / (rate x burstiness))) when O(burstiness) is not 1 (bench_serving
        releases and vLLM with C(--burstiness)). Every rate level is then one bench_serving run with that seed.
        Needs an integer O(seed) in C([0, 2**32 - 1]) and a request count (O(num_prompts) or the default, not
        O(duration_s)). For conformance runs against bench_serving; the prompts stay this module's own.
      - C(vllm) draws the schedule of C(vllm bench serve --seed <seed> --num-prompts <num_prompts> --request-rate
        <rate> --burstiness <burstiness>) (vLLM 0.32), equal to the float in its delays. After
        C(np.random.seed(seed)) one C(np.random.gamma(burstiness, 1 / (rate x burstiness))) per request, the first
        included, summed, the sums rescaled so that the last is C(num_prompts / rate); the first request is sent
        at once and request i at C(delay_i - delay_0). Its random dataset draws from C(np.random.default_rng), so
        O(vocab_size) plays no part. Same requirements on O(seed) and the request count as C(bench_serving).
    type: str
    choices: [python, bench_serving, vllm]
    default: python
  max_concurrency:
    description: Most requests in flight at once in a rate level (a scheduled request waits for a slot; the wait
      shows in C(send_lag_ms)). Unset = no cap.
    type: int
  duration_s:
    description: Seconds of arrivals per rate level instead of a request count (not with rate C(inf)).
    type: float
  dataset:
    description:
      - 'The workload: C(name) and its options. C(random) (default): O(input_len) / O(output_len) random token ids
        (options C(input_len), C(output_len)). C(random-range): lengths uniform in C([max(1, int(len x range_ratio)), len])
        (C(range_ratio) in [0, 1], C(input_len), C(output_len)). C(sharegpt): C(path) of a ShareGPT-format JSON file on
        the host (the role copies it from the controller), first human turn as the text prompt, the reply''s word count
        or C(output_len) as the output length, C(max_conversations). C(shared-prefix): C(num_groups) (4) system
        prompts of C(prefix_len) (512) tokens, each request one of them plus C(input_len) random ids (exercises
        the radix cache).'
      - Prompt token counts are always the server's own (meta_info / usage).
    type: dict
  slo:
    description:
      - Service-level objective, milliseconds per key C(ttft_pNN_ms), C(itl_pNN_ms), C(tpot_pNN_ms), C(e2e_pNN_ms)
        (NN a percentile, e.g. C(ttft_p99_ms)), or C(ttft_ms) etc. with C(percentile) (default 99).
      - C(max_error_rate) (default 0) - a level with more failed requests misses the SLO.
      - C(search=true) adds an SLO search after the ladder; bisection over the request rate between the highest
        rate that met and the lowest that missed (doubling from C(search_min_rate), default 1, while nothing missed,
        capped at C(search_max_rate)), at most C(search_steps) (6) levels, stopping when the bracket is within
        C(search_tolerance) (0.05).
    type: dict
  context_length:
    description: The server's context length in tokens; prompts plus outputs longer than it are refused before
      any request (the server's C(/server_info) C(context_length) is checked too when it reports one).
    type: int
  telemetry:
    description: Sample the server's C(/metrics) and the GPUs during each level.
    type: bool
    default: true
  telemetry_interval:
    description: Seconds between telemetry samples.
    type: float
    default: 1.0
  pd_prefill_urls:
    description:
      - A pd layout's prefill servers (the router fronts them). Each level then records C(ttft_prefill_ms) and
        C(ttft_transfer_ms), the mean prefill forward and KV transfer of a request, from the sums and counts of
        C(sglang:per_stage_req_latency_seconds) for the stages C(prefill_forward) and
        C(prefill_transfer_kv_cache) on their C(/metrics), read before and after the level (SGLang 0.5.16 with
        C(--enable-metrics), and the simulator); null with C(ttft_split.why) when a server does not export them.
    type: list
    elements: str
extends_documentation_fragment: ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: In check mode no request is sent; the module returns the configuration it would run.
  diff_mode:
    support: none
    details: It measures and reports (changed is always false); the only file it writes is the progress log.
  platform:
    support: full
    platforms: posix
notes:
  - The machine that runs the module is the client. Run it on the server's host (C(url) on localhost) or on a
    host close to it; the client is not the bottleneck at 64 streams (see C(benchmarks/bench_client.py)).
  - A level whose achieved concurrency (Little's law) is below 90 % of its target gets a warning in
    C(levels[].warnings) and C(summary.warnings).
  - A level measured once more after a stall says so in its warnings, with both figures.
"""

EXAMPLES = r"""
- name: Benchmark the layout that runs on this host
  ansible.legacy.sglang_bench:
    url: http://127.0.0.1:30000
    concurrency: [1, 4, 16, 64]
    input_len: 1024
    output_len: 256
  register: bench

- name: Single-request speed only, through the OpenAI completions route
  ansible.legacy.sglang_bench:
    url: http://127.0.0.1:30000
    api: completions
    concurrency: [1]
    num_prompts: 4
    api_key: "{{ sglang_api_key }}"

- name: Rate ladder with an SLO and an SLO search, on a ShareGPT file
  ansible.legacy.sglang_bench:
    url: http://127.0.0.1:30000
    concurrency: []
    request_rates: [1, 2, 4, 8, inf]
    burstiness: 1.0
    num_prompts: 200
    dataset: {name: sharegpt, path: /tmp/sharegpt.json, output_len: 256}
    slo: {ttft_p99_ms: 2000, itl_p99_ms: 50, search: true, search_steps: 5}
"""

RETURN = r"""
ansible_facts:
  description: The benchmark result, as facts.
  returned: always
  type: dict
  contains:
    sglang_bench:
      description: >-
        Summary, one entry per level, the configuration, what the server said it is, and the formula of every
        figure. Clock: time.perf_counter() on the client (monotonic); every stream keeps one keep-alive
        connection opened before the level starts, and t_start is taken just before a request is written (before
        the TCP connect when the connection had to be reopened); t_first_token is the arrival of the first chunk that carries output, t_end the arrival of the
        last chunk ([DONE] included). All latency figures are over completed requests only.
        Statistics: mean is the arithmetic mean; pXX is linear interpolation between closest ranks
        (numpy.percentile's default): x[floor(h)] + (h - floor(h)) x (x[floor(h)+1] - x[floor(h)]),
        h = (n - 1) x XX / 100.
      type: dict
      returned: always
      contains:
        summary:
          description: The figures a layout is compared by.
          type: dict
          returned: always
          contains:
            single_request_tok_s:
              description: Mean per-request decode tok/s at concurrency 1, (completion_tokens - 1) / (e2e - ttft);
                null when 1 is not a level.
              type: float
            peak_output_tok_s:
              description: Max over levels of output_tok_s.
              type: float
            peak_concurrency:
              description: The level where peak_output_tok_s was reached.
              type: int
            knee_concurrency:
              description: Smallest concurrency with output_tok_s >= knee_fraction x peak_output_tok_s.
              type: int
            peak_request_rate:
              description: Request rate of the peak level (null when the peak is a concurrency level; C(inf) as a string).
              type: raw
            slo_max_rate:
              description: Highest request rate whose level met the SLO (the ladder refined by the SLO search);
                null when none did or without an SLO.
              type: raw
            slo_goodput_tok_s:
              description: Highest goodput_tok_s of a level that met the SLO (0 when none did; null without an SLO).
              type: float
            slo_search:
              description: The SLO search (with C(slo.search)) - slo_max_rate, bracket [met, missed], steps (rates tried),
                stopped (why it ended).
              type: dict
            single_request_ttft_ms_p50:
              description: TTFT p50 at concurrency 1 (also p99, and peak_ttft_ms_p50/p99 at the peak level).
              type: float
            peak_tok_s_per_user:
              description: Mean decode tok/s per request at the peak level.
              type: float
            error_rate:
              description: failed / (completed + failed) over all levels.
              type: float
            warnings:
              description: Achieved concurrency short of target, failed requests, short outputs, a failed
                /flush_cache, concurrency above the server's max_running_requests, a warm-up cut at its time bound,
                a level measured once more after a stall.
              type: list
              elements: str
            stalled_levels:
              description: The levels measured once more after a stall (mode, concurrency, request_rate, persisted);
                every figure of the summary is the second measurement's.
              type: list
              elements: dict
        levels:
          description: One entry per concurrency level, in the order run.
          type: list
          elements: dict
          returned: always
          contains:
            mode:
              description: C(concurrency) (closed loop) or C(rate) (open loop).
              type: str
            concurrency:
              description: Target concurrency (number of workers); for a rate level its max_concurrency (or null).
              type: int
            request_rate:
              description: Requests/s of a rate level (C(inf) as a string); null for a concurrency level.
              type: raw
            schedule:
              description: Rate levels - the seed and arrival_rng, the offsets (s) of the arrival schedule, send_lag_ms
                (and send_lag_ms_each, per request) and client_lag_ms (mean/p50/p90/p99, and max), achieved_request_rate
                and scheduled_request_rate.
              type: dict
            goodput_req_s:
              description: Requests meeting every SLO threshold / duration_s (null without an SLO).
              type: float
            goodput_tok_s:
              description: Output tokens of the requests meeting every SLO threshold / duration_s (null without an SLO).
              type: float
            slo_met:
              description: Whether the level's percentiles meet every SLO threshold and its error rate is at most
                max_error_rate (null without an SLO); C(slo) holds the observed figures.
              type: bool
            telemetry:
              description: Server C(/metrics) (num_running_reqs, num_queue_reqs, token_usage, cache_hit_rate,
                gen_throughput, each mean and max; available, samples, error) and per GPU memory_used_mib,
                utilization_pct, power_w (mean and max), or C(absent); null when telemetry is off.
              type: dict
            ttft_prefill_ms:
              description: pd layouts (with I(pd_prefill_urls)) - mean prefill forward of a request on the prefill
                servers (the stage C(prefill_forward)); null when not measured.
              type: float
            ttft_transfer_ms:
              description: pd layouts - mean KV transfer part of TTFT; null when not measured.
              type: float
            ttft_split:
              description: pd layouts - measured (bool), requests, source; or why the split is not measured.
              type: dict
            between_s:
              description: The level's seconds outside its warm-up and its measurement - connect (keep-alive
                streams), flush_cache, telemetry_start, telemetry_stop (nvidia-smi's end); part of a record's tool_s.
              type: dict
            phase:
              description: C(slo_search) for the levels the SLO search added (with search_step).
              type: str
            warmup:
              description: The level's warm-up - requests (sent), at_once, max_new_tokens, seconds, failed,
                timed_out, not_sent, limit_s, cut (true when level_warmup_timeout ended it); null without one.
              type: dict
            first_wave_ttft_ms:
              description: Median TTFT of each stream's first request (a concurrency level's first wave, its
                largest prefill); null for a rate level.
              type: float
            progress_gap_ms:
              description: Longest stretch with a completed request in flight and no output chunk on any stream
                (the start of the level included); progress_gap_at_s says when it began.
              type: float
            stall:
              description:
                - The stall rule's verdict (formulas C(stall)) - detected, reasons, gap_limit_ms, ttft_limit_ms,
                  ttft_above_limit_ms, wave_limit_ms; when
                  detected also first (the first measurement's whole level entry), persisted (the second
                  measurement stalled too) and reasons_again. Null with stall_check off.
                - When detected, every other figure of the level is the second measurement's (so are the summary,
                  the report and the winners).
              type: dict
            completed:
              description: Requests that returned HTTP 200, streamed to the end without an error event and
                produced at least one token.
              type: int
            failed:
              description: Requests with a non-200 status, a connection error, an error event, a timeout or no
                token; excluded from every latency and token figure, listed in errors.
              type: int
            duration_s:
              description: t_last_end - t_first_start over the measured requests (warmup excluded).
              type: float
            request_s:
              description: completed / duration_s.
              type: float
            output_tok_s:
              description: sum(completion_tokens of completed requests, as counted by the server) / duration_s.
              type: float
            achieved_concurrency:
              description: Little's law, sum(e2e of every measured request, failed included) / duration_s.
              type: float
            ttft_ms:
              description: Time to first token, t_first_token - t_start; mean, p50, p90, p99.
              type: dict
            itl_ms:
              description: Gaps between the arrivals of consecutive output-carrying chunks of a request (a chunk
                with k tokens is one gap), pooled over requests; mean, p50, p90, p99.
              type: dict
            tpot_ms:
              description: (e2e - ttft) / (completion_tokens - 1) per request with more than one token; mean,
                p50, p90, p99.
              type: dict
            e2e_ms:
              description: t_end - t_start; mean, p50, p90, p99.
              type: dict
            decode_tok_s:
              description: Per-request decode speed, (completion_tokens - 1) / (e2e - ttft) = 1000 / tpot_ms;
                mean, p50, p90, p99.
              type: dict
            output_tokens:
              description: Sum of completion_tokens of completed requests (server count).
              type: int
            token_source:
              description: C(server) when every count came from meta_info / usage, C(chunks) when the server sent
                no usage and content chunks were counted.
              type: str
        config:
          description: The arguments as run (api_key left out; api_key_set says whether one was used),
            including the per-level num_prompts and the rid prefix.
          type: dict
          returned: always
        server:
          description: Best-effort extract of C(/server_info) (version, model_path, tp/pp/ep/dp sizes,
            max_total_num_tokens, max_running_requests).
          type: dict
          returned: always
        formulas:
          description: The formula of every figure, as text (also stored in each result record).
          type: dict
          returned: always
progress_file:
  description: Where the progress lines were written.
  type: str
  returned: always
"""

import os
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_layouts.bench.loadgen import (
    DEFAULT_CONCURRENCY,
    FORMULAS,
    LEVEL_WARMUP_TIMEOUT_S,
    STALL_FACTOR,
    STALL_MIN_S,
    BenchError,
    make_config,
    run_benchmark,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", required=True),
            api=dict(type="str", default="generate", choices=["generate", "completions", "chat"]),
            concurrency=dict(type="list", elements="int", default=list(DEFAULT_CONCURRENCY)),
            num_prompts=dict(type="int"),
            prompts_per_stream=dict(type="int", default=4),
            min_prompts=dict(type="int", default=8),
            input_len=dict(type="int", default=1024),
            output_len=dict(type="int", default=256),
            warmup=dict(type="int", default=1),
            level_warmup=dict(type="bool", default=True),
            level_warmup_timeout=dict(type="float", default=LEVEL_WARMUP_TIMEOUT_S),
            stall_check=dict(type="bool", default=True),
            stall_min_s=dict(type="float", default=STALL_MIN_S),
            stall_factor=dict(type="float", default=STALL_FACTOR),
            seed=dict(type="int", default=1),
            flush_cache=dict(type="bool", default=True),
            request_timeout=dict(type="float", default=600.0),
            api_key=dict(type="str", no_log=True),
            model=dict(type="str"),
            vocab_size=dict(type="int", default=32000),
            knee_fraction=dict(type="float", default=0.9),
            progress_file=dict(type="path"),
            rid_prefix=dict(type="str"),
            keep_requests=dict(type="bool", default=False),
            request_rates=dict(type="list", elements="raw", default=[]),
            burstiness=dict(type="float", default=1.0),
            arrival_rng=dict(type="str", default="python", choices=["python", "bench_serving", "vllm"]),
            connection=dict(type="str", default="keep_alive", choices=["keep_alive", "per_request"]),
            max_concurrency=dict(type="int"),
            duration_s=dict(type="float"),
            dataset=dict(type="dict"),
            slo=dict(type="dict"),
            context_length=dict(type="int"),
            telemetry=dict(type="bool", default=True),
            telemetry_interval=dict(type="float", default=1.0),
            pd_prefill_urls=dict(type="list", elements="str"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        cfg = make_config(
            p["url"],
            api=p["api"],
            concurrency=p["concurrency"],
            num_prompts=p["num_prompts"],
            input_len=p["input_len"],
            output_len=p["output_len"],
            warmup=p["warmup"],
            level_warmup=p["level_warmup"],
            level_warmup_timeout=p["level_warmup_timeout"],
            stall_check=p["stall_check"],
            stall_min_s=p["stall_min_s"],
            stall_factor=p["stall_factor"],
            seed=p["seed"],
            flush_cache=p["flush_cache"],
            request_timeout=p["request_timeout"],
            api_key=p["api_key"],
            model=p["model"],
            vocab_size=p["vocab_size"],
            knee_fraction=p["knee_fraction"],
            rid_prefix=p["rid_prefix"],
            prompts_per_stream=p["prompts_per_stream"],
            min_prompts=p["min_prompts"],
            request_rates=p["request_rates"],
            burstiness=p["burstiness"],
            arrival_rng=p["arrival_rng"],
            connection=p["connection"],
            max_concurrency=p["max_concurrency"],
            duration_s=p["duration_s"],
            dataset=p["dataset"],
            slo=p["slo"],
            context_length=p["context_length"],
            telemetry=p["telemetry"],
            telemetry_interval=p["telemetry_interval"],
            pd_prefill_urls=p["pd_prefill_urls"],
        )
    except BenchError as exc:
        module.fail_json(msg=str(exc), failure_class="bench_config")

    progress_file = p["progress_file"] or os.path.join(tempfile.gettempdir(), "sglang_bench.progress")
    if module.check_mode:
        module.exit_json(
            changed=False,
            msg="check mode: no request sent",
            progress_file=progress_file,
            ansible_facts={
                "sglang_bench": {
                    "summary": {},
                    "levels": [],
                    "config": {k: v for k, v in cfg.items() if not k.startswith("_")},
                    "server": {},
                    "formulas": FORMULAS,
                }
            },
        )

    parent = os.path.dirname(progress_file)
    if parent:
        os.makedirs(parent, exist_ok=True)
    with open(progress_file, "w", encoding="utf-8") as fh:

        def progress(line):
            fh.write(f"{time.strftime('%H:%M:%S')} {line}\n")
            fh.flush()

        try:
            result = run_benchmark(
                cfg, api_key=p["api_key"], progress=progress, keep_requests=p["keep_requests"]
            )
        except BenchError as exc:
            progress(f"bench failed: {exc}")
            module.fail_json(msg=str(exc), failure_class="bench_unreachable", progress_file=progress_file)
        except Exception as exc:  # the playbook waits on the progress file: always end it
            progress(f"bench failed: {type(exc).__name__}: {exc}")
            raise

    # a server that died before any answer is the role's server-died path (the check has its class)
    failed_all = result["summary"]["completed"] == 0 and not result["summary"].get("server_died")
    if failed_all:
        errors = [e for lv in result["levels"] for e in lv["errors"]]
        module.fail_json(
            msg=f"every request failed, e.g. {errors[0]['error'] if errors else 'unknown'}",
            failure_class="bench_all_failed",
            evidence={"errors": errors[:10]},
            progress_file=progress_file,
            ansible_facts={"sglang_bench": result},
        )
    for warning in result["summary"]["warnings"]:
        module.warn(warning)
    module.exit_json(changed=False, progress_file=progress_file, ansible_facts={"sglang_bench": result})


if __name__ == "__main__":
    main()
