"""Which environment variables are secret, and how the tool masks them.

One source of truth for `sglang_secret_env`: the planner masks secret values in
the plan (so the plan JSON, the facts, the records, the evidence and the report
only ever see MASK), and the service role writes the real values to the
layout's EnvironmentFile (0640 root:<service group>) and nowhere else.
Standard library only (the simulator and the modules import it too).
"""

from __future__ import annotations

import fnmatch
import json
import re

MASK = "***"
# Names (shell-style patterns, matched case-insensitively) whose values are secret by default:
# gated models need HF_TOKEN, remote stores take *_ACCESS_KEY / *_PASSWORD.
DEFAULT_SECRET_ENV = ("*TOKEN*", "*KEY*", "*SECRET*", "*PASSWORD*", "*PASSWD*", "*CREDENTIAL*")
# The API key is always secret, whatever the list says.
ALWAYS_SECRET = ("SGLANG_API_KEY",)
# A value that carries a credential whatever its variable's name: user:password@ in a URL
# (HF_ENDPOINT=https://user:pw@mirror/), or a bearer token.
_CREDENTIAL_VALUE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/@\s:]+:[^/@\s]+@|\bbearer\s+\S", re.IGNORECASE)


def patterns(secret_env=None) -> list[str]:
    """The effective list: the user's names and patterns, always with the default patterns and the
    names that are always secret (a site's own list adds to them, it never drops one)."""
    if secret_env is None:
        secret_env = ()
    if isinstance(secret_env, str):
        secret_env = [secret_env]
    user = [str(p) for p in secret_env]
    return user + [p for p in (*DEFAULT_SECRET_ENV, *ALWAYS_SECRET) if p not in user]


def carries_credential(value) -> bool:
    """Whether a value looks like a credential by its shape (a password inside a URL, a bearer token)."""
    return isinstance(value, str) and bool(_CREDENTIAL_VALUE.search(value))


def is_secret(name: str, secret_env=None, value=None) -> bool:
    """By name (the patterns), by value (a credential's shape), or already masked by the planner."""
    up = str(name).upper()
    return (
        value == MASK
        or carries_credential(value)
        or any(fnmatch.fnmatchcase(up, p.upper()) for p in patterns(secret_env))
    )


def split_env(env: dict | None, secret_env=None) -> tuple[dict, dict]:
    """(plain, secret) parts of an environment mapping."""
    plain, secret = {}, {}
    for k, v in (env or {}).items():
        (secret if is_secret(k, secret_env, v) else plain)[str(k)] = str(v)
    return plain, secret


def mask_env(env: dict | None, secret_env=None) -> dict:
    return {str(k): (MASK if is_secret(k, secret_env, v) else v) for k, v in (env or {}).items()}


def mask_text(text: str, values) -> str:
    """Every occurrence of a secret value replaced by MASK (longest first, so no prefix survives)."""
    out = str(text)
    for v in sorted({str(v) for v in values if v and str(v) != MASK}, key=len, reverse=True):
        out = out.replace(v, MASK)
    return out


# Placeholders in a unit's argv, filled in at exec time (sglang-redact, the supervisor's wrapper):
# the key itself, and the path of the --config file that holds it.
KEY_PLACEHOLDER = "${SGLANG_API_KEY}"
KEY_CONFIG_PLACEHOLDER = "${SGLANG_API_KEY_CONFIG}"


def api_key_argv(engine_name: str, config_path: str | None = None) -> list[str]:
    """How a server of this engine gets the API key: `--config FILE` where the engine reads its
    flags from a file (engines.py: api_key_config_key), the file's path given or filled in at exec
    time; else `--api-key`, filled in at exec time."""
    from .engines import engine

    if engine(engine_name).api_key_config_key:
        return ["--config", config_path or KEY_CONFIG_PLACEHOLDER]
    return ["--api-key", KEY_PLACEHOLDER]


def api_key_config(engine_name: str, key: str) -> str:
    """The engine's --config file that carries the key (JSON is YAML: no YAML library needed)."""
    from .engines import engine

    config_key = engine(engine_name).api_key_config_key
    if not config_key:
        raise ValueError(f"engine {engine_name!r} reads no --config file: its key goes as --api-key")
    return json.dumps({config_key: str(key)}) + "\n"
