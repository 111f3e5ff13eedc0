"""Shared test set-up: the repo's pure-Python code is importable as it is on a host.

`module_utils/` holds the package `sglang_layouts` (the planner and friends) and the
repo root holds `sglang_sim`; both are put on sys.path exactly as the simulator's
launcher does, so tests exercise the same import paths the engine uses.
"""

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# tests/ itself: tables shared by several test files (bad_inputs.py)
for p in (REPO / "module_utils", REPO, REPO / "tests"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))


_ANSIBALLZ = "SGLANG_LAYOUTS_ANSIBALLZ_CACHE"


def pytest_configure(config):
    # One AnsiballZ cache for every playbook this session runs (tests/plugins/callback/
    # ansiballz_shared_cache.py); pytest-xdist's workers inherit the variable from the controller.
    if _ANSIBALLZ not in os.environ:
        config._sglang_ansiballz = os.environ[_ANSIBALLZ] = tempfile.mkdtemp(prefix="sglang-ansiballz-")


def pytest_unconfigure(config):
    made = getattr(config, "_sglang_ansiballz", None)
    if made:
        shutil.rmtree(made, ignore_errors=True)
        del os.environ[_ANSIBALLZ]


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def kimi_config() -> dict:
    import json

    return json.loads((REPO / "models" / "kimi-k2.6" / "config.json").read_text())
