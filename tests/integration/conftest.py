"""Drive playbooks the way CI and users do: ansible-runner over the real repo (tests/helpers/playbook.py).

The `run_playbook` fixture runs one playbook with the test's own private_data_dir; tests that
run playbooks from module-scoped fixtures call tests.helpers.playbook.run_playbook themselves.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from tests.helpers.net import free_port
from tests.helpers.playbook import REPO
from tests.helpers.playbook import run_playbook as _run_playbook


@pytest.fixture
def run_playbook(tmp_path):
    def run(playbook: str, inventory: str = "inventory/demo", extravars: dict | None = None, **kw):
        return _run_playbook(playbook, tmp_path / "runner", inventory, extravars, **kw)

    return run


@pytest.fixture
def run_dir(request):
    """The engine's run directory, under build/ and 0755: the engine runs as the unprivileged service
    user, so its files cannot live under pytest's 0700 tmp."""
    (REPO / "build").mkdir(exist_ok=True)
    name = request.module.__name__.rsplit(".", 1)[-1].replace("_", "-")
    path = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=REPO / "build"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def engine_port():
    """The layout's API port (sglang_base_port): a free one, so that tests running side by side
    (pytest -n) never meet on the default 30000."""
    return free_port()
