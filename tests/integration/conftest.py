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

# make integration runs the files on two pytest-xdist workers (--dist loadfile), each file on one worker,
# handed out in collection order (--no-loadscope-reorder: xdist would otherwise order them by their
# number of tests, which put the few long sweeps last). Longest first, so that no long file starts
# last on one worker while the other has nothing left: seconds of each file's tests on two workers
# of an idle 2-core box (pytest --durations=0, 2026-12-05: 549 s for the suite). A file not listed counts as a minute.
FILE_SECONDS = {
    "test_sweep.py": 189,
    "test_replicas.py": 136,
    "test_search_sweep.py": 122,
    "test_pd.py": 119,
    "test_service_process.py": 119,
    "test_plan.py": 114,
    "test_vllm_sweep.py": 72,
    "test_multinode_process.py": 53,
    "test_collection.py": 49,
    "test_multinode_sim.py": 27,
    "test_faults.py": 17,
    "test_sim_server.py": 15,
    "test_sim_failures.py": 9,
    "test_sim_pd.py": 6,
}


def pytest_collection_modifyitems(items):
    here = Path(__file__).parent
    ours = [i for i in items if here in i.path.parents]
    rest = [i for i in items if here not in i.path.parents]
    # a stable sort: each file's tests stay together and in their order
    ours.sort(key=lambda i: -FILE_SECONDS.get(i.path.name, 60))
    items[:] = rest + ours


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


@pytest.fixture
def engine_vars(tmp_path, run_dir, engine_port):
    """The extra vars that put a test's engine in run_dir on engine_port and its records under
    tmp_path / "results"."""
    return {
        "sglang_results_dir": str(tmp_path / "results"),
        "sglang_run_dir": str(run_dir),
        "sglang_base_port": engine_port,
    }
