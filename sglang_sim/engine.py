"""Continuous batching: requests, the scheduler loop and the wire formats of streamed tokens.

One scheduler per DP group, all on one asyncio loop. Each iteration is either a prefill
batch (new requests up to max_running_requests; each gets its first token at the end) or
one decode step of the whole running batch (each running request gets one token). An
iteration's end time is computed from the cost model and kept as an absolute deadline;
its chunks are built before the deadline and written when it arrives, so a token leaves
at its scheduled time and `lateness = send time - scheduled time` stays small.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import zlib
from collections import deque

# Output vocabulary: plain ASCII words (no JSON escaping needed in the hot path).
WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "was",
    "for",
    "on",
    "that",
    "with",
    "as",
    "by",
    "it",
    "at",
    "from",
    "his",
    "an",
    "were",
    "are",
    "which",
    "this",
    "be",
    "has",
    "or",
    "had",
    "first",
    "one",
    "their",
    "its",
    "new",
    "after",
    "but",
    "who",
    "not",
    "they",
    "have",
    "two",
    "been",
    "other",
    "when",
    "there",
    "all",
    "during",
    "into",
    "school",
    "time",
    "may",
    "years",
    "more",
    "most",
    "only",
    "over",
    "city",
    "some",
    "world",
    "would",
    "where",
    "later",
    "up",
    "such",
    "used",
    "many",
    "can",
    "state",
    "about",
    "national",
    "out",
    "known",
    "university",
    "united",
    "then",
    "made",
]
_NTOK = 4096
TOKEN_IDS = [(i * 2654435761 + 12345) % 160000 + 100 for i in range(_NTOK)]
TOKEN_TEXT = [" " + WORDS[t % len(WORDS)] for t in TOKEN_IDS]
EOS_ID = 163585

CHUNK_END = b"0\r\n\r\n"
DONE = b"data: [DONE]\n\n"


def frame(payload: bytes) -> bytes:
    """One HTTP/1.1 chunk (Transfer-Encoding: chunked)."""
    return b"%x\r\n%b\r\n" % (len(payload), payload)


class Req:
    """One generation request and its place in the schedule."""

    __slots__ = (
        "aborted",
        "arrival",
        "conn",
        "created",
        "done",
        "eos_at",
        "finished",
        "first_sent",
        "first_token",
        "forward_t0",
        "ids",
        "include_usage",
        "kind",
        "max_new",
        "meta_prefix",
        "model_json",
        "on_finish",
        "pd_room",
        "prefilled",
        "prompt_tokens",
        "rid",
        "rid_json",
        "seed",
        "stream",
        "text",
        "token_times",
    )

    def __init__(
        self,
        *,
        rid: str,
        kind: str,
        prompt_tokens: int,
        max_new: int,
        arrival: float,
        conn=None,
        stream: bool = False,
        eos_at: int | None = None,
        seed: int = 0,
        model: str = "",
        include_usage: bool = False,
    ):
        self.rid = rid
        self.rid_json = json.dumps(rid)
        self.kind = kind  # generate | completions | chat | health
        self.conn = conn
        self.stream = stream
        self.prompt_tokens = prompt_tokens
        self.max_new = max_new
        self.eos_at = eos_at  # token index (1-based) that is EOS, or None
        self.seed = seed
        self.model_json = json.dumps(model)
        self.include_usage = include_usage
        self.arrival = arrival
        self.created = int(time.time())
        self.done = 0
        self.text = ""
        self.ids = ""
        self.first_token = None
        self.first_sent = None  # when the first token's chunk was written (measurement only)
        self.token_times: list[float] = []
        self.finished = False
        self.aborted = False
        self.on_finish = None
        self.pd_room = None  # a prefill server's bootstrap room (pd.py)
        self.forward_t0 = 0.0  # when its prefill batch began (a prefill server times its prefill_forward)
        self.prefilled = False  # a decode server's request whose KV came from a prefill server
        self.meta_prefix = (
            f',"meta_info":{{"id":{self.rid_json},"prompt_tokens":{prompt_tokens},'
            '"weight_version":"default","num_retractions":0,"cached_tokens":0,"reasoning_tokens":0,'
        )

    # -- token production -------------------------------------------------------------
    def advance(self, t: float) -> bytes | None:
        """Produce the next token at scheduled time t; return its wire bytes (None if not streamed)."""
        i = self.done
        self.done = i + 1
        if self.first_token is None:
            self.first_token = t
        self.token_times.append(t)
        is_eos = self.eos_at is not None and self.done == self.eos_at
        k = (self.seed + i * 7) % _NTOK
        if is_eos:
            word = ""
            tid = EOS_ID
        else:
            word = TOKEN_TEXT[k]
            tid = TOKEN_IDS[k]
        self.text += word
        self.ids = f"{self.ids},{tid}" if self.ids else str(tid)
        if is_eos or self.done >= self.max_new:
            self.finished = True
        if not self.stream:
            return None
        kind = self.kind
        if kind == "generate":
            if self.finished:
                fin = (
                    f'{{"type":"stop","matched":{EOS_ID}}}'
                    if is_eos
                    else f'{{"type":"length","length":{self.done}}}'
                )
                tail = f',"e2e_latency":{t - self.arrival:.6f}}}}}'
            else:
                fin = "null"
                tail = "}}"
            body = (
                f'data: {{"text":"{self.text}","output_ids":[{self.ids}]{self.meta_prefix}'
                f'"completion_tokens":{self.done},"finish_reason":{fin}{tail}\n\n'
            )
            data = body.encode()
            # the last token, [DONE] and the end of the chunked body leave in one write
            return frame(data + DONE) + CHUNK_END if self.finished else frame(data)
        fr = ("stop" if is_eos else "length") if self.finished else None
        frj = f'"{fr}"' if fr else "null"
        matched = str(EOS_ID) if is_eos else "null"
        if kind == "completions":
            body = (
                f'data: {{"id":{self.rid_json},"object":"text_completion","created":{self.created},'
                f'"model":{self.model_json},"choices":[{{"index":0,"text":"{word}","logprobs":null,'
                f'"finish_reason":{frj},"matched_stop":{matched}}}],"usage":null}}\n\n'
            )
        else:  # chat
            body = (
                f'data: {{"id":{self.rid_json},"object":"chat.completion.chunk","created":{self.created},'
                f'"model":{self.model_json},"choices":[{{"index":0,"delta":{{"role":null,"content":"{word}",'
                f'"reasoning_content":null,"tool_calls":null}},"logprobs":null,"finish_reason":{frj},'
                f'"matched_stop":{matched}}}],"usage":null}}\n\n'
            )
        out = body.encode()
        if self.finished:
            if self.include_usage:
                out += self.usage_chunk()
            out += DONE
            return frame(out) + CHUNK_END
        return frame(out)

    def usage(self) -> dict:
        return {
            "prompt_tokens": self.prompt_tokens,
            "total_tokens": self.prompt_tokens + self.done,
            "completion_tokens": self.done,
            "prompt_tokens_details": None,
            "reasoning_tokens": 0,
        }

    def usage_chunk(self) -> bytes:
        obj = "text_completion" if self.kind == "completions" else "chat.completion.chunk"
        u = self.usage()
        u.pop("prompt_tokens_details")
        return (
            f'data: {{"id":{self.rid_json},"object":"{obj}","created":{self.created},"model":{self.model_json},'
            f'"choices":[],"usage":{json.dumps(u, separators=(",", ":"))}}}\n\n'
        ).encode()

    def first_chat_chunk(self) -> bytes:
        return frame(
            (
                f'data: {{"id":{self.rid_json},"object":"chat.completion.chunk","created":{self.created},'
                f'"model":{self.model_json},"choices":[{{"index":0,"delta":{{"role":"assistant","content":"",'
                f'"reasoning_content":null,"tool_calls":null}},"logprobs":null,"finish_reason":null,'
                f'"matched_stop":null}}],"usage":null}}\n\n'
            ).encode()
        )

    def final_body(self, t_end: float) -> dict:
        """Non-streamed response body."""
        is_eos = self.eos_at is not None and self.done == self.eos_at
        if self.kind in ("generate", "health"):
            fin = {"type": "stop", "matched": EOS_ID} if is_eos else {"type": "length", "length": self.done}
            return {
                "text": self.text,
                "output_ids": [int(x) for x in self.ids.split(",")] if self.ids else [],
                "meta_info": {
                    "id": self.rid,
                    "finish_reason": fin,
                    "prompt_tokens": self.prompt_tokens,
                    "weight_version": "default",
                    "num_retractions": 0,
                    "completion_tokens": self.done,
                    "cached_tokens": 0,
                    "reasoning_tokens": 0,
                    "e2e_latency": t_end - self.arrival,
                },
            }
        fr = "stop" if is_eos else "length"
        choice = {
            "index": 0,
            "logprobs": None,
            "finish_reason": fr,
            "matched_stop": EOS_ID if is_eos else None,
        }
        if self.kind == "completions":
            choice["text"] = self.text
            obj = "text_completion"
        else:
            choice["message"] = {
                "role": "assistant",
                "content": self.text,
                "reasoning_content": None,
                "tool_calls": None,
            }
            obj = "chat.completion"
        return {
            "id": self.rid,
            "object": obj,
            "created": self.created,
            "model": json.loads(self.model_json),
            "choices": [choice],
            "usage": self.usage(),
        }

    def schedule_record(self) -> dict:
        return {
            "rid": self.rid,
            "arrival": self.arrival,
            "first_token": self.first_token,
            "first_sent": self.first_sent,
            "token_times": self.token_times,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.done,
        }


def eos_position(seed: int, max_new: int, ignore_eos: bool, mean: int = 256) -> int | None:
    """Deterministic pseudo-random EOS: a geometric draw (mean `mean`) from the request's seed."""
    if ignore_eos:
        return None
    x = zlib.crc32(seed.to_bytes(8, "little", signed=False)) / 0xFFFFFFFF
    # inverse CDF of a geometric distribution with p = 1/mean
    import math

    n = 1 + int(math.log(max(1e-12, 1.0 - x)) / math.log(1.0 - 1.0 / mean))
    return n if n <= max_new else None


SPIN_S = float(os.environ.get("SGLANG_SIM_SPIN_US") or 300) * 1e-6


async def sleep_until(loop, when: float) -> None:
    """Sleep until loop time `when`: asyncio for the bulk, then a short blocking sleep, then a spin.

    epoll rounds timeouts up to whole milliseconds, so asyncio alone wakes up to 1 ms late;
    time.sleep (nanosleep) is precise to tens of microseconds on an idle host; the last
    SGLANG_SIM_SPIN_US (300) are spun so a loaded host does not add a second wake-up delay.
    """
    d = when - loop.time()
    if d > 0.0015:
        await asyncio.sleep(d - 0.0012)
        d = when - loop.time()
    if d > SPIN_S:
        time.sleep(d - SPIN_S)
    clock = loop.time
    while clock() < when:
        pass


class Scheduler:
    RESYNC_S = 0.05  # if an iteration ends this late (a stalled host), restart the schedule from now
    DECODE_LOG_INTERVAL = 40

    def __init__(self, sim, *, dp_rank: int, max_running: int, kv_tokens: int, cost, log_prefix: str):
        self.sim = sim
        self.dp_rank = dp_rank
        self.max_running = max(1, max_running)
        self.kv_tokens = max(1, kv_tokens)
        self.cost = cost
        self.prefix = log_prefix
        self.waiting: deque[Req] = deque()
        self.running: list[Req] = []
        self.reserved = 0
        self.wake = asyncio.Event()
        self.decode_steps = 0
        self.last_gen_throughput = 0.0
        self._tput_mark = (0.0, 0)
        self.tokens_out = 0

    def submit(self, req: Req) -> None:
        self.waiting.append(req)
        self.wake.set()
        if req.kind != "health":
            self.sim.check_in_flight()

    def kv_in_use(self) -> int:
        return sum(r.prompt_tokens + r.done for r in self.running)

    def step_batch(self) -> tuple[int, int]:
        """(requests, KV tokens) one decode step costs as: under DP-attention every DP group steps
        together (the MoE layers gather all groups' tokens), so the step is the batch of all of
        them, as speed.py predicts it; otherwise this group's own."""
        peers = self.sim.schedulers if getattr(self.sim.args, "enable_dp_attention", False) else [self]
        return sum(len(s.running) for s in peers), sum(s.kv_in_use() for s in peers)

    def _admit(self) -> list[Req]:
        new: list[Req] = []
        tokens = 0
        limit = self.sim.max_prefill_tokens
        while self.waiting and len(self.running) + len(new) < self.max_running:
            r = self.waiting[0]
            if r.aborted:
                self.waiting.popleft()
                continue
            need = r.prompt_tokens + r.max_new
            if new and tokens + r.prompt_tokens > limit:
                break
            if (self.running or new) and self.reserved + need > self.kv_tokens:
                break
            self.waiting.popleft()
            self.reserved += need
            tokens += r.prompt_tokens
            new.append(r)
        return new

    async def run(self) -> None:
        """The scheduler loop; an exception in it ends the process as a scheduler exception does."""
        try:
            await self._run()
        except asyncio.CancelledError:
            raise
        except Exception:
            import traceback

            self.sim.log.rank(self.prefix, "Scheduler hit an exception: " + traceback.format_exc().rstrip())
            self.sim.log.main("SIGQUIT received. signum=None, frame=None. It usually means one child failed.")
            from .failures import kill_self

            kill_self()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        sim = self.sim
        t = loop.time()
        while True:
            if not self.running and not self.waiting:
                self.wake.clear()
                await self.wake.wait()
                t = loop.time()
            if sim.halted:
                await asyncio.Future()  # a hang: never wakes
            new = self._admit()
            if new:
                batch = new
                # a decode server's transferred requests bring their first token with the KV
                fresh = [r for r in new if not r.prefilled]
                n_tok = sum(r.prompt_tokens for r in fresh)
                dur = self.cost.prefill(n_tok, len(fresh)) if fresh else 0.0
                for r in fresh:
                    r.forward_t0 = t  # its forward begins (SGLang's set_forward_entry_time)
                if fresh:
                    sim.log.rank(
                        self.prefix,
                        f"Prefill batch, #new-seq: {len(fresh)}, #new-token: {n_tok}, #cached-token: 0, "
                        f"token usage: {self.reserved / self.kv_tokens:.2f}, #running-req: {len(self.running)}, "
                        f"#queue-req: {len(self.waiting)}, ",
                    )
            elif self.running:
                batch = self.running
                dur = self.cost.decode_step(*self.step_batch())
            else:
                continue
            t_end = t + dur
            payloads = [r.advance(t_end) for r in batch]
            if new:
                self.running.extend(new)
            await sleep_until(loop, t_end)
            if sim.halted:
                await asyncio.Future()
            lat = sim.lateness
            sim.wake_lateness.append(loop.time() - t_end)
            if new:
                sim.prefill_wake_lateness.append(loop.time() - t_end)
            for r, p in zip(batch, payloads, strict=True):
                if r.aborted:
                    continue
                if p is not None:
                    r.conn.write(p)
                    now = loop.time()
                    lat.append(now - t_end)
                    if r.first_sent is None:
                        r.first_sent = now
            self.tokens_out += len(batch)
            sim.tokens_out += len(batch)
            sim.last_output = t_end
            if not new:
                self.decode_steps += 1
                if self.decode_steps % self.DECODE_LOG_INTERVAL == 0:
                    self._log_decode(t_end)
            if any(r.finished or r.aborted for r in self.running):
                keep = []
                for r in self.running:
                    if r.finished or r.aborted:
                        self.reserved -= r.prompt_tokens + r.max_new
                        if r.finished and not r.aborted:
                            sim.finish(r, t_end)
                    else:
                        keep.append(r)
                self.running = keep
            now = loop.time()
            t = t_end if now - t_end < self.RESYNC_S else now

    def _log_decode(self, t_end: float) -> None:
        t0, n0 = self._tput_mark
        if t0:
            self.last_gen_throughput = (self.tokens_out - n0) / max(1e-9, t_end - t0)
        self._tput_mark = (t_end, self.tokens_out)
        used = self.kv_in_use()
        self.sim.log.rank(
            self.prefix,
            f"Decode batch, #running-req: {len(self.running)}, #token: {used}, "
            f"token usage: {used / self.kv_tokens:.2f}, cuda graph: True, "
            f"gen throughput (token/s): {self.last_gen_throughput:.2f}, #queue-req: {len(self.waiting)}, ",
        )
