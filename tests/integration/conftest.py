"""Drive playbooks the way CI and users do: ansible-runner over the real repo (tests/helpers/playbook.py).

The `run_playbook` fixture runs one playbook with the test's own private_data_dir; tests that
run playbooks from module-scoped fixtures call tests.helpers.playbook.run_playbook themselves.
"""

from __future__ import annotations

import pytest

from tests.helpers.playbook import run_playbook as _run_playbook


@pytest.fixture
def run_playbook(tmp_path):
    def run(playbook: str, inventory: str = "inventory/demo", extravars: dict | None = None, **kw):
        return _run_playbook(playbook, tmp_path / "runner", inventory, extravars, **kw)

    return run
