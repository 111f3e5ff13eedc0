"""The warm engine: the progress gap of a level and the rule that calls a level stalled.

A level is measured after its warm-up (loadgen.run_level); what the warm-up did not cover (a kernel compiled for
a batch shape the warm-up never made, a one-off pause of the server) shows in the measured requests as a
stretch with requests in flight and no output on any stream. ``stall_verdict`` decides, from the level's own
figures and from its neighbour below (the level measured before it with the next lower concurrency), whether
the level stalled; loadgen.measure_level then measures it once more and keeps both figures
(FORMULAS["stall"]). Once the sweep has run every level, loadgen.run_benchmark asks again with each level's
neighbour above (a heavier load that got its first tokens far sooner) and measures such a level once more. Standard library only; pure functions.
"""

from __future__ import annotations

# pauses shorter than this are never called a stall (a decode step or a prefill chunk is far shorter)
STALL_MIN_S = 2.0
STALL_FACTOR = 4.0  # how far past what the load explains a pause must go to be a stall


def token_times(result):
    """Arrival times (client clock, s) of the output-carrying chunks of one analysed, completed request."""
    t = result["t_start"] + result["ttft"]
    out = [t]
    for gap in result["itl"]:
        t += gap
        out.append(t)
    return out


def progress_gap(results):
    """(gap_ms, at_s): the longest stretch while at least one completed request was in flight during which no
    output chunk arrived on any stream, and when it began (s after the level's first request). (None, None)
    without a completed request. Failed requests are left out, as from every other figure."""
    ok = [r for r in results if r.get("ok")]
    if not ok:
        return None, None
    t0 = min(r["t_start"] for r in ok)
    spans = sorted((r["t_start"], r["t_end"]) for r in ok)
    arrivals = sorted(t for r in ok for t in token_times(r))
    best, at = 0.0, 0.0
    i = 0
    busy_start, busy_end = spans[0]
    # walk the busy periods (unions of in-flight spans); inside one, gaps run from its start or a token to the next token
    for start, end in [*spans[1:], (float("inf"), float("inf"))]:
        if start <= busy_end:
            busy_end = max(busy_end, end)
            continue
        last = busy_start
        while i < len(arrivals) and arrivals[i] <= busy_end:
            if arrivals[i] >= busy_start:
                if arrivals[i] - last > best:
                    best, at = arrivals[i] - last, last - t0
                last = arrivals[i]
            i += 1
        if busy_end - last > best:
            best, at = busy_end - last, last - t0
        busy_start, busy_end = start, end
    return 1000.0 * best, at


def first_wave_ttft_ms(results):
    """The median TTFT (ms) of each stream's first request, where it completed: a closed-loop level's first
    wave, every stream's prompt at once, the largest prefill the level makes. None without any."""
    first = {}
    for r in results:
        w = r.get("worker")
        if w is not None and (w not in first or r["t_start"] < first[w]["t_start"]):
            first[w] = r
    ttfts = sorted(1000.0 * r["ttft"] for r in first.values() if r.get("ok") and r.get("ttft") is not None)
    if not ttfts:
        return None
    mid = len(ttfts) // 2
    return ttfts[mid] if len(ttfts) % 2 else (ttfts[mid - 1] + ttfts[mid]) / 2


def neighbour_below(levels, level):
    """The concurrency level measured before `level` with the largest concurrency below its own (None for a
    rate level, the first level, or a neighbour that completed nothing)."""
    if level.get("mode", "concurrency") != "concurrency":
        return None
    below = [
        lv
        for lv in levels
        if lv.get("mode", "concurrency") == "concurrency"
        and lv["concurrency"] < level["concurrency"]
        and lv.get("completed")
    ]
    return max(below, key=lambda lv: lv["concurrency"], default=None)


def neighbour_above(levels, level):
    """The concurrency level with the smallest concurrency above `level`'s among `levels` (measured before or
    after it; None for a rate level or when none completed anything)."""
    if level.get("mode", "concurrency") != "concurrency":
        return None
    above = [
        lv
        for lv in levels
        if lv.get("mode", "concurrency") == "concurrency"
        and lv["concurrency"] > level["concurrency"]
        and lv.get("completed")
    ]
    return min(above, key=lambda lv: lv["concurrency"], default=None)


def _max(*values):
    present = [v for v in values if v is not None]
    return max(present) if present else None


def _ttft_limit(ttft, neighbour, scale, floor_ms, factor, which, reasons):
    """The TTFT p50 limit against a neighbour level (None without one, or without its TTFT): floor_ms, or
    factor x its TTFT p50 x scale; a reason is appended when ttft is past it."""
    other = (neighbour.get("ttft_ms") or {}).get("p50") if neighbour is not None else None
    if other is None:
        return None
    limit = max(floor_ms, factor * other * scale)
    if ttft is not None and ttft > limit:
        reasons.append(
            f"TTFT p50 {ttft / 1000:.1f} s against {other / 1000:.2f} s at {which}concurrency "
            f"{neighbour['concurrency']} and no queue (limit {limit / 1000:.1f} s)"
        )
    return limit


def stall_verdict(
    level, below=None, max_running_requests=None, min_s=STALL_MIN_S, factor=STALL_FACTOR, above=None
):
    """{"detected", "reasons", "gap_limit_ms", "ttft_limit_ms", "ttft_above_limit_ms", "wave_limit_ms"} for one
    measured level (FORMULAS["stall"]).

    Four rules, all deterministic over the figures:
    - progress gap: progress_gap_ms > min_s and > factor x the longest pause the level's load explains:
      max(its own ITL p90, the neighbour below's ITL p99, the neighbour below's progress_gap_ms x concurrency /
      its concurrency) (a batch's prefill grows at most linearly with the batch; the level's own ITL p99 is
      left out because a stall of a few streams is its top 1 %); without a neighbour below (the first level, a
      rate level) max(its own ITL p90, its own TTFT p50) (one prompt's prefill);
    - TTFT: a concurrency level with a neighbour below and no queue at the server (concurrency <=
      max_running_requests when the server says it): TTFT p50 > min_s and > factor x the neighbour's TTFT p50
      x concurrency / its concurrency;
    - TTFT against the neighbour above (`above`, the next larger concurrency, known once the sweep has run
      it): a concurrency level with no queue whose TTFT p50 > min_s and > factor x the TTFT p50 that a
      heavier load got (more prompts per prefill batch never make the first token come sooner; a level
      that compiled a kernel for its own batch shape does: issue #28, gpt-oss-120b c16 2.95 s against
      0.51 s at c64);
    - the level's own first wave: a concurrency level with no queue whose progress gap > min_s and > factor
      x its first_wave_ttft_ms (every stream's prompt prefilled at once, the largest prefill a closed loop
      makes; a later stretch with no output on any stream that long is no prefill of this load: lease
      h100-2026-12-07f, gpt-oss-120b c16, 5.6 s with nothing out after the first wave, where the
      neighbour below's 0.10 s gap x 16 let 6.7 s pass)."""
    floor_ms = 1000.0 * min_s
    gap = level.get("progress_gap_ms")
    ttft = (level.get("ttft_ms") or {}).get("p50")
    scale = None
    if below is not None:
        scale = level["concurrency"] / below["concurrency"]
    below_gap = below.get("progress_gap_ms") if below is not None else None
    if below is None:
        explained = _max((level.get("itl_ms") or {}).get("p90"), ttft)
    else:
        explained = _max(
            (level.get("itl_ms") or {}).get("p90"),
            (below.get("itl_ms") or {}).get("p99"),
            None if below_gap is None else below_gap * scale,
        )
    gap_limit = _max(floor_ms, None if explained is None else factor * explained)
    reasons = []
    if gap is not None and gap > gap_limit:
        reasons.append(
            f"no output on any stream for {gap / 1000:.1f} s with requests in flight "
            f"({level.get('progress_gap_at_s') or 0:.1f} s into the level; limit {gap_limit / 1000:.1f} s)"
        )
    # a level past the server's max_running_requests queues: its TTFT is the queue's, not a stall
    queued = isinstance(max_running_requests, int) and (level.get("concurrency") or 0) > max_running_requests
    ttft_limit = above_limit = wave_limit = None
    if not queued:
        ttft_limit = _ttft_limit(ttft, below, scale, floor_ms, factor, "", reasons)
        above_limit = _ttft_limit(ttft, above, 1, floor_ms, factor, "the heavier ", reasons)
        wave = level.get("first_wave_ttft_ms")  # None for a rate level (loadgen.run_level)
        if wave is not None:
            wave_limit = max(floor_ms, factor * wave)
            if gap is not None and gap > wave_limit:
                reasons.append(
                    f"no output on any stream for {gap / 1000:.1f} s against {wave / 1000:.2f} s for the "
                    f"level's first wave of prompts, its largest prefill (limit {wave_limit / 1000:.1f} s)"
                )
    return {
        "detected": bool(reasons),
        "reasons": reasons,
        "gap_limit_ms": gap_limit,
        "ttft_limit_ms": ttft_limit,
        "ttft_above_limit_ms": above_limit,
        "wave_limit_ms": wave_limit,
    }
