"""The gate's HTTP side: /health probes (in a thread, so a slow /health never delays a log
verdict) and the facts read once the server is ready, as each engine serves them."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

REDACT_KEYS = ("api_key", "admin_api_key", "ssl_keyfile_password")


def _request(url, method="GET", body=None, api_key=None, timeout=5.0):
    data = None
    headers = {"Accept": "application/json"}
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def probe(base_url: str, api_key=None, timeout=5.0) -> str:
    """'loading' (port closed), 'warming' (503 or other), 'ready' (/health 200).

    vLLM answers 503 only when its engine core is dead; it exits right after, which decides."""
    try:
        code, _body = _request(base_url + "/health", api_key=api_key, timeout=timeout)
    except (ConnectionError, urllib.error.URLError, OSError):
        return "loading"
    return "ready" if code == 200 else "warming"


class Prober(threading.Thread):
    """Polls /health in the background; the main loop only reads `phase`."""

    def __init__(self, base_url, api_key=None, poll=0.2, timeout=5.0):
        super().__init__(daemon=True)
        self.base_url, self.api_key, self.poll, self.timeout = base_url, api_key, poll, timeout
        self.phase = "loading"
        self.first_phase: str | None = None
        self.phases: dict[str, float] = {}
        self._stop = threading.Event()
        # set once the first probe has an answer: a gate slice never ends before it (SGLang's
        # /health runs a one-token generation, which can take longer than a short slice)
        self.probed = threading.Event()

    def run(self):
        while not self._stop.is_set():
            phase = probe(self.base_url, self.api_key, self.timeout)
            self.probed.set()
            if self.first_phase is None:
                self.first_phase = phase
            self.phases.setdefault(phase, time.monotonic())
            self.phase = phase
            if phase == "ready":
                return
            self._stop.wait(self.poll)

    def stop(self):
        self._stop.set()


def redact(obj):
    if isinstance(obj, dict):
        return {k: ("***" if k in REDACT_KEYS and v else redact(v)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [redact(v) for v in obj]
    return obj


# SGLang's placeholder bootstrap address (sglang/srt/disaggregation/utils.py): a request that carries
# it is served by a prefill or decode server alone, with no peer and no KV transfer (SGLang's own
# warm-up and health probes). A plain server ignores the fields, so the confirmation always sends them.
FAKE_BOOTSTRAP_HOST = "2.2.2.2"


def collect_info(base_url: str, api_key=None, timeout=10.0, kv_tokens=None) -> dict:
    """The one-token /generate confirmation, /server_info and /model_info.

    kv_tokens: the log's max_total_num_tokens=, for a /server_info without it."""
    code, body = _request(
        base_url + "/generate",
        "POST",
        {
            "text": "ping",
            "sampling_params": {"max_new_tokens": 1, "temperature": 0},
            "bootstrap_host": FAKE_BOOTSTRAP_HOST,
            "bootstrap_room": 0,
        },
        api_key,
        timeout,
    )
    if code != 200:
        raise RuntimeError(f"/generate answered {code}: {body[:200]!r}")
    gen = json.loads(body or b"{}")
    info = {}
    for key, path in (("server_info", "/server_info"), ("model_info", "/model_info")):
        c, b = _request(base_url + path, api_key=api_key, timeout=timeout)
        info[key] = json.loads(b) if c == 200 and b else {}
    si = info["server_info"]
    ranks = []
    for i, st in enumerate(si.get("internal_states") or []):
        mu = dict(st.get("memory_usage") or {})
        mu["rank"] = i
        ranks.append(mu)
    server_args = {k: v for k, v in si.items() if k not in ("internal_states",)}
    return {
        "generate": {"completion_tokens": (gen.get("meta_info") or {}).get("completion_tokens")},
        "max_total_num_tokens": kv_tokens
        if si.get("max_total_num_tokens") is None
        else si["max_total_num_tokens"],
        "memory_per_rank": ranks,
        "model_info": info["model_info"],
        "server_args": redact(server_args),
    }


def collect_info_vllm(base_url: str, api_key=None, timeout=10.0, kv_tokens=None) -> dict:
    """vLLM: /v1/models (served name, max_model_len), a one-token /v1/completions, /version.

    kv_tokens: from the start-up line `KV cache size: N tokens` (vLLM has no /server_info)."""
    code, body = _request(base_url + "/v1/models", api_key=api_key, timeout=timeout)
    if code != 200:
        raise RuntimeError(f"/v1/models answered {code}: {body[:200]!r}")
    models = (json.loads(body or b"{}").get("data")) or []
    if not models:
        raise RuntimeError("/v1/models lists no model")
    model = models[0]
    code, body = _request(
        base_url + "/v1/completions",
        "POST",
        {"model": model.get("id"), "prompt": "ping", "max_tokens": 1, "temperature": 0},
        api_key,
        timeout,
    )
    if code != 200:
        raise RuntimeError(f"/v1/completions answered {code}: {body[:200]!r}")
    gen = json.loads(body or b"{}")
    version = None
    try:
        c, b = _request(base_url + "/version", api_key=api_key, timeout=timeout)
        if c == 200 and b:
            version = json.loads(b).get("version")
    except (OSError, ValueError):
        pass
    model_info = {
        "served_model_name": model.get("id"),
        "model_path": model.get("root"),
        "max_model_len": model.get("max_model_len"),
        "served_model_names": [m.get("id") for m in models],
    }
    return {
        "generate": {"completion_tokens": (gen.get("usage") or {}).get("completion_tokens")},
        "max_total_num_tokens": kv_tokens,
        "memory_per_rank": [],
        "model_info": model_info,
        "server_args": {"engine": "vllm", "version": version, "max_model_len": model.get("max_model_len")},
    }


# The facts after a /health 200, by the engine's confirm_route (engines.py).
COLLECTORS = {"/generate": collect_info, "/v1/completions": collect_info_vllm}


def collect_facts(eng, base_url: str, api_key=None, kv_tokens=None) -> dict:
    """The one-token confirmation and the facts of engine `eng` (an engines.Engine)."""
    return COLLECTORS[eng.confirm_route](base_url, api_key, kv_tokens=kv_tokens)
