"""The simulated radix cache: which prompt prefixes it holds, for sglang:cache_hit_rate."""

from __future__ import annotations

from collections import deque


class PrefixCache:
    """Which prompt prefixes the simulated radix cache holds, at block granularity (counts only).

    A prompt's cached tokens = the longest run of leading BLOCK-token blocks seen before (since the last
    /flush_cache); the gauge sglang:cache_hit_rate is cached / prompt tokens over the last WINDOW prompts.
    The simulated prefill does not get cheaper with hits: this serves the metric, not the speed."""

    BLOCK = 16
    WINDOW = 64

    def __init__(self):
        self.blocks: set[int] = set()
        self.recent: deque = deque(maxlen=self.WINDOW)

    def lookup_insert(self, tokens) -> int:
        h, cached, hit = 0, 0, True
        for i in range(0, len(tokens) - len(tokens) % self.BLOCK, self.BLOCK):
            h = hash((h, tuple(tokens[i : i + self.BLOCK])))
            if hit and h in self.blocks:
                cached += self.BLOCK
            else:
                hit = False
                self.blocks.add(h)
        self.recent.append((cached, len(tokens)))
        return cached

    def hit_rate(self) -> float:
        total = sum(n for _cached, n in self.recent)
        return sum(c for c, _n in self.recent) / total if total else 0.0

    def flush(self) -> None:
        self.blocks.clear()
        self.recent.clear()
