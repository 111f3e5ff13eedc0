"""SGLang's HTTP API on node rank 0: the OpenAI and SGLang endpoints, and their answers.

`ROUTES` maps each path to its methods and handler; `Routes.dispatch` checks the API key, the
method and the JSON body, then calls the handler (the non-zero node ranks answer with the dummy
health server of multinode.py instead).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
import zlib
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

from . import __version__
from .cost import env_float
from .engine import Req, eos_position
from .plan import model_name, text_config

if TYPE_CHECKING:
    from .http_conn import Conn

_TOKEN_RE = re.compile(r"\w+|[^\w\s]")

# /metrics: (name, help, value of one DP scheduler), one sample per scheduler ...
_GAUGES = (
    ("num_running_reqs", "The number of running requests.", lambda sim, s: len(s.running)),
    ("num_queue_reqs", "The number of requests in the waiting queue.", lambda sim, s: len(s.waiting)),
    ("num_used_tokens", "The number of used tokens.", lambda sim, s: s.kv_in_use()),
    ("token_usage", "The token usage.", lambda sim, s: s.kv_in_use() / s.kv_tokens),
    ("cache_hit_rate", "The prefix cache hit rate.", lambda sim, s: sim.prefix_cache.hit_rate()),
    ("gen_throughput", "The generation throughput (token/s).", lambda sim, s: s.last_gen_throughput),
    (
        "max_total_num_tokens",
        "Maximum total number of tokens in the KV cache pool.",
        lambda sim, s: s.kv_tokens,
    ),
)
# ... and (name, help, the server's attribute), one sample for the whole server.
_COUNTERS = (
    ("prompt_tokens_total", "Number of prefill tokens processed.", "prompt_tokens_total"),
    ("generation_tokens_total", "Number of generation tokens processed.", "tokens_out"),
    ("num_requests_total", "Number of requests processed.", "finished_count"),
)


def count_text_tokens(text: str) -> int:
    """The simulator's tokenizer: words and punctuation marks (at least one token)."""
    return max(1, len(_TOKEN_RE.findall(text)))


def _sampling(kind: str, data: dict) -> tuple:
    """(max new tokens, ignore_eos) where each API has them, with SGLang's defaults."""
    if kind == "generate":
        sp = data.get("sampling_params") or {}
        return sp.get("max_new_tokens", 128), bool(sp.get("ignore_eos", False))
    if kind == "chat":
        max_new = data.get("max_completion_tokens", data.get("max_tokens"))
    else:
        max_new = data.get("max_tokens", 16)
    return max_new, bool(data.get("ignore_eos", False))


class Routes:
    """The request handlers of Sim (server.py), which holds the state they read."""

    def dispatch(self, conn: Conn, method: str, target: str, headers: dict, body: bytes) -> None:
        url = urlsplit(target)
        path = url.path
        if self.args.node_rank > 0:
            self.dispatch_dummy(conn, method, path)
            return
        if self.args.api_key and not path.startswith(("/health", "/metrics")):
            auth = headers.get("authorization", "")
            if auth != f"Bearer {self.args.api_key}":
                conn.json(401, {"error": "Unauthorized"})
                return
        route = ROUTES.get(path)
        if route is None:
            conn.json(404, {"detail": "Not Found"})
            return
        methods, handler = route
        if method not in methods:
            conn.json(405, {"detail": "Method Not Allowed"})
            return
        if method == "POST" and handler is not Routes.h_flush_cache:
            try:
                data = json.loads(body or b"{}")
            except ValueError as e:
                conn.error(400, f"JSON decode error: {e}")
                return
            if not isinstance(data, dict):
                conn.error(400, "request body must be a JSON object")
                return
        else:
            data = parse_qs(url.query)
        handler(self, conn, data)

    # -- handlers -------------------------------------------------------------------------

    def h_health(self, conn: Conn, _data) -> None:
        if self.status == "Draining":
            self.log.main("Health check request received during shutdown. Returning 503.")
            conn.respond(503, b"")
            return
        if self.status != "Up":
            conn.respond(503, b"")
            return
        self._tasks.add(asyncio.get_running_loop().create_task(self._health(conn)))

    async def _health(self, conn: Conn) -> None:
        # SGLang: send a 1-token generate, then check every second whether any output arrived.
        tic = asyncio.get_running_loop().time()
        r = Req(
            rid=f"HEALTH_CHECK_{uuid.uuid4().hex}", kind="health", prompt_tokens=1, max_new=1, arrival=tic
        )
        self.pick().submit(r)
        timeout = env_float("SGLANG_HEALTH_CHECK_TIMEOUT", 20.0)
        step = env_float("SGLANG_SIM_HEALTH_POLL_SECONDS", 1.0)
        while asyncio.get_running_loop().time() < tic + timeout:
            await asyncio.sleep(step)
            if self.last_output > tic:
                if not conn.closed:
                    conn.respond(200, b"")
                return
        now_loop, now_wall = asyncio.get_running_loop().time(), time.time()

        def hms(t_loop: float) -> str:
            return time.strftime("%H:%M:%S", time.localtime(now_wall - (now_loop - t_loop)))

        self.log.main(
            f"Health check failed. Server couldn't get a response from detokenizer for last "
            f"{timeout:g} seconds. tic start time: {hms(tic)}. last_heartbeat time: {hms(self.last_output)}"
        )
        conn.respond(503, b"")

    def model_info(self) -> dict:
        tc = text_config(self.hf)
        return {
            "model_path": self.args.model_path,
            "tokenizer_path": self.args.tokenizer_path or self.args.model_path,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "has_image_understanding": "vision_config" in self.hf,
            "has_audio_understanding": False,
            "model_type": self.hf.get("model_type", tc.get("model_type")),
            "architectures": self.hf.get("architectures", tc.get("architectures")),
        }

    def h_model_info(self, conn: Conn, _data) -> None:
        conn.json(200, self.model_info())

    def server_info(self) -> dict:
        a, plan = self.args, self.plan
        info = {k: v for k, v in vars(a).items() if not k.startswith("sim_")}
        info["api_key"] = None if a.api_key else a.api_key
        info.update(
            {
                "served_model_name": model_name(a) if a.served_model_name else a.model_path,
                "mem_fraction_static": a.mem_fraction_static or plan.get("mem_fraction_static"),
                "context_length": self.context_len,
                "chunked_prefill_size": self.chunked_prefill_size,
                "max_running_requests": a.max_running_requests,
                "max_total_num_tokens": self.kv_tokens,
                "max_req_input_len": self.context_len - 5,
                "version": __version__,
            }
        )
        ranks = self.my_ranks()
        states = []
        for s in self.schedulers:
            r = ranks[0] if ranks else {}
            states.append(
                {
                    "memory_usage": {
                        "weight": round(float(r.get("weights_gib", 0)), 2),
                        "kvcache": round(self.kv_of(r), 2),
                        "token_capacity": self.kv_tokens,
                        "graph": round(self.graph_gib, 2),
                    },
                    "effective_max_running_requests_per_dp": s.max_running,
                    "last_gen_throughput": s.last_gen_throughput,
                }
            )
        info["internal_states"] = states
        info["sim"] = {
            "engine": "sim",
            "hardware": self.hardware,
            "verdict": plan.get("verdict"),
            "cost_model": self.cost.describe(),
            "memory_usage_per_rank": [
                {
                    "rank": r.get("rank"),
                    "gpu": r.get("gpu"),
                    "weight": round(float(r.get("weights_gib", 0)), 2),
                    "kvcache": round(self.kv_of(r), 2),
                    "graph": round(self.graph_gib, 2),
                    "token_capacity": self.kv_tokens,
                }
                for r in ranks
            ],
        }
        return info

    def h_server_info(self, conn: Conn, _data) -> None:
        conn.json(200, self.server_info())

    def h_models(self, conn: Conn, _data) -> None:
        name = self.args.served_model_name or self.args.model_path
        conn.json(
            200,
            {
                "object": "list",
                "data": [
                    {
                        "id": name,
                        "object": "model",
                        "created": int(time.time()),
                        "owned_by": "sglang",
                        "root": name,
                        "max_model_len": self.context_len,
                    }
                ],
            },
        )

    def h_flush_cache(self, conn: Conn, _data) -> None:
        self.prefix_cache.flush()
        conn.respond(
            200,
            b"Cache flushed.\nPlease check backend logs for more details. (When there are running "
            b"or waiting requests, the operation will not be performed.)\n",
            "text/plain; charset=utf-8",
        )

    def h_loads(self, conn: Conn, _data) -> None:
        conn.json(
            200,
            [
                {
                    "dp_rank": s.dp_rank,
                    "num_reqs": len(s.running) + len(s.waiting),
                    "num_waiting_reqs": len(s.waiting),
                    "num_tokens": s.kv_in_use(),
                }
                for s in self.schedulers
            ],
        )

    def h_metrics(self, conn: Conn, _data) -> None:
        if not self.args.enable_metrics:
            conn.json(404, {"detail": "Not Found"})
            return
        labels = f'{{model_name="{model_name(self.args) if self.args.served_model_name else self.args.model_path}",'
        lines = []

        def metric(name, kind, help_, values):
            lines.append(f"# HELP sglang:{name} {help_}")
            lines.append(f"# TYPE sglang:{name} {kind}")
            for i, v in enumerate(values):
                lines.append(f'sglang:{name}{labels}tp_rank="0",pp_rank="0",dp_rank="{i}"}} {float(v)}')

        for name, help_, value in _GAUGES:
            metric(name, "gauge", help_, [value(self, s) for s in self.schedulers])
        for name, help_, attr in _COUNTERS:
            metric(name, "counter", help_, [getattr(self, attr)])
        if (
            self.pd_mode == "prefill"
        ):  # as SGLang 0.5.16: the prefill forward and KV transfer per request (pd.py)
            name = "per_stage_req_latency_seconds"
            lines.append(f"# HELP sglang:{name} The latency of each stage of requests.")
            lines.append(f"# TYPE sglang:{name} histogram")
            for stage, (seconds, count) in self.pd_stages.items():
                if not count:
                    continue  # as prometheus_client: a stage's series appears at its first observation
                lines.append(f'sglang:{name}_sum{labels}stage="{stage}"}} {float(seconds)}')
                lines.append(f'sglang:{name}_count{labels}stage="{stage}"}} {float(count)}')
        conn.respond(200, ("\n".join(lines) + "\n").encode(), "text/plain; version=0.0.4; charset=utf-8")

    def h_sim_stats(self, conn: Conn, data) -> None:
        def summary(values) -> dict:
            v = sorted(values)
            if not v:
                return {"n": 0, "median": None, "p99": None, "max": None}
            return {
                "n": len(v),
                "median": v[len(v) // 2] * 1e3,
                "p99": v[min(len(v) - 1, int(0.99 * len(v)))] * 1e3,
                "max": v[-1] * 1e3,
            }

        self._flush_schedule_log()
        out = {
            "lateness_ms": summary(self.lateness),
            "wake_lateness_ms": summary(self.wake_lateness),
            "prefill_wake_lateness_ms": summary(self.prefill_wake_lateness),
            "tokens_out": self.tokens_out,
            "finished": self.finished_count,
            "cost_model": self.cost.describe() if self.cost else None,
        }
        if data.get("reset"):
            self.lateness.clear()
            self.wake_lateness.clear()
            self.prefill_wake_lateness.clear()
        conn.json(200, out)

    def _enqueue(self, conn: Conn, kind: str, data: dict, *, prompt_tokens: int, seed: int) -> None:
        max_new, ignore_eos = _sampling(kind, data)
        if self.status != "Up" and self.status != "Starting":
            conn.error(503, "The server is shutting down.")
            return
        if prompt_tokens >= self.context_len:
            conn.error(
                400,
                f"The input ({prompt_tokens} tokens) is longer than the model's "
                f"context length ({self.context_len} tokens).",
            )
            return
        if max_new is None:
            max_new = self.context_len - prompt_tokens
        max_new = int(max_new)
        if prompt_tokens + max_new > self.context_len:
            conn.error(
                400,
                f"Requested token count exceeds the model's maximum context length of {self.context_len} tokens. "
                f"You requested a total of {prompt_tokens + max_new} tokens: {prompt_tokens} tokens from the input "
                f"messages and {max_new} tokens for the completion. Please reduce the number of tokens in the input "
                "messages or the completion to fit within the limit.",
            )
            return
        max_new = max(1, max_new)
        openai = kind != "generate"  # /v1/*: the model as requested, usage chunks as asked
        model = str(data["model"]) if openai and data.get("model") else None
        so = data.get("stream_options") or {}
        include_usage = openai and bool(
            so.get("include_usage", self.args.stream_response_default_include_usage)
        )
        r = Req(
            rid=str(data.get("rid") or uuid.uuid4().hex),
            kind=kind,
            conn=conn,
            stream=bool(data.get("stream")),
            prompt_tokens=prompt_tokens,
            max_new=max_new,
            eos_at=eos_position(seed, max_new, ignore_eos, self.eos_mean),
            seed=seed,
            model=model or self.args.served_model_name or self.args.model_path,
            include_usage=include_usage,
            arrival=conn.arrival or asyncio.get_running_loop().time(),
        )
        conn.req = r
        self.requests_total += 1

        def start() -> None:
            if r.stream:
                conn.start_stream()
                if kind == "chat":
                    conn.write(r.first_chat_chunk())
            self.pick().submit(r)

        # a disaggregated request waits for its handshake / its KV first (pd.py)
        if not self.pd_admit(conn, r, data, start):
            start()

    def h_generate(self, conn: Conn, data: dict) -> None:
        text, ids = data.get("text"), data.get("input_ids")
        if isinstance(text, list) or (isinstance(ids, list) and ids and isinstance(ids[0], list)):
            conn.error(400, "sglang_sim: batched /generate is not simulated")
            return
        if text is None and ids is None:
            conn.error(400, "Either text or input_ids should be provided.")
            return
        if ids is not None:
            n = len(ids)
            seed = zlib.crc32(repr(ids).encode())
            self.prefix_cache.lookup_insert(ids)
        else:
            n = count_text_tokens(str(text))
            seed = zlib.crc32(str(text).encode())
            self.prefix_cache.lookup_insert(str(text).split())
        self._enqueue(conn, "generate", data, prompt_tokens=n, seed=seed)

    def h_completions(self, conn: Conn, data: dict) -> None:
        prompt = data.get("prompt", "")
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], int):
            n, seed = len(prompt), zlib.crc32(repr(prompt).encode())
            self.prefix_cache.lookup_insert(prompt)
        elif isinstance(prompt, list):
            if len(prompt) != 1:
                conn.error(400, "sglang_sim: batched prompts are not simulated")
                return
            n, seed = count_text_tokens(str(prompt[0])), zlib.crc32(str(prompt[0]).encode())
        else:
            n, seed = count_text_tokens(str(prompt)), zlib.crc32(str(prompt).encode())
        self._enqueue(conn, "completions", data, prompt_tokens=n, seed=seed)

    def h_chat(self, conn: Conn, data: dict) -> None:
        msgs = data.get("messages")
        if not isinstance(msgs, list) or not msgs:
            conn.error(400, "messages must be a non-empty list")
            return
        n = 0
        parts = []
        for m in msgs:
            c = m.get("content") if isinstance(m, dict) else None
            if isinstance(c, list):
                c = " ".join(str(p.get("text", "")) for p in c if isinstance(p, dict))
            c = str(c or "")
            parts.append(c)
            n += count_text_tokens(c) + 4  # the chat template's role markers
        self._enqueue(conn, "chat", data, prompt_tokens=n, seed=zlib.crc32("\x00".join(parts).encode()))


ROUTES = {
    "/health": (("GET", "POST"), Routes.h_health),
    "/health_generate": (("GET", "POST"), Routes.h_health),
    "/model_info": (("GET",), Routes.h_model_info),
    "/get_model_info": (("GET",), Routes.h_model_info),
    "/server_info": (("GET",), Routes.h_server_info),
    "/get_server_info": (("GET",), Routes.h_server_info),
    "/v1/models": (("GET",), Routes.h_models),
    "/generate": (("POST", "PUT"), Routes.h_generate),
    "/v1/completions": (("POST",), Routes.h_completions),
    "/v1/chat/completions": (("POST",), Routes.h_chat),
    "/flush_cache": (("GET", "POST"), Routes.h_flush_cache),
    "/v1/loads": (("GET",), Routes.h_loads),
    "/get_load": (("GET",), Routes.h_loads),
    "/metrics": (("GET",), Routes.h_metrics),
    "/sim/stats": (("GET",), Routes.h_sim_stats),
}
