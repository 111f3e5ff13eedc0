"""Running another Python (SGLang's or vLLM's venv, a ci/ script) from a test."""

from __future__ import annotations

import os
import subprocess

# What would make another interpreter import this process's packages or run its start-up file.
_LEAKY = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")


def isolated_env(*layers: dict | None) -> dict:
    """This process's environment without _LEAKY, updated by each of `layers` in turn."""
    env = {k: v for k, v in os.environ.items() if k not in _LEAKY}
    for layer in layers:
        env.update(layer or {})
    return env


def run_captured(argv, env: dict, timeout: float, cwd=None) -> subprocess.CompletedProcess:
    """argv with its output captured as text; the exit status is the caller's to judge."""
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def tail(text: str | None, n: int = 40) -> str:
    """The last n lines of text (for assertion messages)."""
    return "\n".join((text or "").splitlines()[-n:])
