"""When the load generator sends: the arrival schedules of request-rate levels (standard library only).

``arrival_offsets`` is the default (``arrival_rng: python``); ``bench_serving_offsets`` reproduces, to the
float, the schedule SGLang's ``bench_serving`` draws from numpy's legacy global generator for a seed
(``arrival_rng: bench_serving``; FORMULAS["request_rate"] in bench/formulas.py, docs/benchmarking.md)."""

from __future__ import annotations

import math
import random

from .common import BenchError

# Generators of the arrival schedule: ours (random.Random seeded per level), or bench_serving's or vLLM's own draws.
ARRIVAL_RNGS = ("python", "bench_serving", "vllm")
RATE_LEVEL_MAX_REQUESTS = 100000


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
        for _prompt in range(num_prompts):
            rng.randint(max(int(full_len * ratio), 1), full_len + 1)
    for _prompt in range(num_prompts):
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
    return [rng.gamma(burstiness, theta) for _gap in range(num_prompts - 1)]


def bench_serving_offsets(rate, burstiness, seed, num_prompts, dataset=None, vocab_size=32000):
    """bench_serving's schedule as offsets: offset_0 = 0, offset_i = offset_(i-1) + gap_i (all 0 at rate inf)."""
    if math.isinf(rate):
        return [0.0] * num_prompts
    offsets, t = [0.0], 0.0
    for gap in bench_serving_gaps(rate, burstiness, seed, num_prompts, dataset, vocab_size):
        t += gap
        offsets.append(t)
    return offsets[: max(num_prompts, 1)]


def vllm_delays(rate, burstiness, seed, num_prompts):
    """The delays (s after its start) at which `vllm bench serve --seed seed --request-rate rate` (vLLM 0.32)
    sends its num_prompts requests (FORMULAS["request_rate"], arrival_rng vllm); all 0 at rate inf.

    vLLM (benchmarks/serve.py get_request) seeds np.random with the seed (its random dataset draws from
    np.random.default_rng, not from the global generator), draws np.random.gamma(burstiness,
    1 / (rate x burstiness)) for every request, the first included, sums them, and rescales the sums so
    that the last one is num_prompts / rate exactly."""
    if math.isinf(rate):
        return [0.0] * num_prompts
    rng = NumpyLegacyRandom(seed)
    theta = 1.0 / (rate * burstiness)
    delays = [rng.gamma(burstiness, theta) for _gap in range(num_prompts)]
    for i in range(1, len(delays)):
        delays[i] += delays[i - 1]
    if delays and delays[-1] != 0:
        factor = (num_prompts / rate) / delays[-1]
        delays = [d * factor for d in delays]
    return delays


def vllm_offsets(rate, burstiness, seed, num_prompts):
    """vLLM's schedule from its first request on: offset_i = delay_i - delay_0."""
    delays = vllm_delays(rate, burstiness, seed, num_prompts)
    return [d - delays[0] for d in delays] or [0.0]
