"""Shared test set-up: the repo's pure-Python code is importable as it is on a host.

`module_utils/` holds the package `sglang_layouts` (the planner and friends) and the
repo root holds `sglang_sim`; both are put on sys.path exactly as the simulator's
launcher does, so tests exercise the same import paths the engine uses.
"""

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# tests/ itself: tables shared by several test files (bad_inputs.py)
for p in (REPO / "module_utils", REPO, REPO / "tests"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def kimi_config() -> dict:
    import json

    return json.loads((REPO / "models" / "kimi-k2.6" / "config.json").read_text())
