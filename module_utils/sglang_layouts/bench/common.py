"""What every part of the load generator shares: its error, request rates as numbers, percentiles.

Standard library only (the load generator runs on a bare host ``python3``)."""

from __future__ import annotations

import math

STAT_KEYS = ("mean", "p50", "p90", "p99")


class BenchError(Exception):
    """The benchmark could not run (bad arguments, server unreachable)."""


def is_number(v):
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
    if not is_number(r) or r <= 0:
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


def say(progress, line):
    if progress is not None:
        progress(line)
