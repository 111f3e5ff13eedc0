"""library/sglang_process.py run by ansible-core itself: a list of names is stopped in one run, and a
start takes exactly one name."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path

import pytest

from tests.helpers import ansible_module

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the supervisor reads /proc")


def _alive(pid) -> bool:
    """A process that runs (a zombie waiting for its reaper does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _process(tmp_path, args: dict, check=False):
    return ansible_module.run_module(
        tmp_path,
        "sglang_process",
        {"run_dir": str(tmp_path / "run"), **args},
        extra=["--check"] if check else [],
    )


@pytest.fixture
def pids():
    """name -> pid of the test's engines; a test that fails half-way leaves none of them behind."""
    started: dict[str, int] = {}
    yield started
    for pid in started.values():
        if _alive(pid):  # the supervisor's own process group, led by the pid it reports
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)


def test_two_units_stop_in_one_run_and_a_start_takes_one_name(tmp_path, pids):
    names = ["sglang-a.service", "sglang-b.service"]
    # the engines outlive the test however slow the host: the test stops them (or the fixture)
    for name in names:
        res = _process(tmp_path, {"name": name, "argv": ["sleep", "3600"]})
        assert res["changed"] and res["pid"], res
        assert [u["name"] for u in res["units"]] == [name]
        pids[name] = res["pid"]

    both = _process(tmp_path, {"name": names, "argv": ["sleep", "3600"]})
    assert both["failed"] and "takes one name, got 2" in both["msg"]

    # check mode reports the change and stops nothing
    res = _process(tmp_path, {"name": names, "state": "stopped"}, check=True)
    assert res["changed"] and all(_alive(pid) for pid in pids.values())

    res = _process(tmp_path, {"name": [*names, "sglang-never-started.service"], "state": "stopped"})
    assert res["changed"] and "pid" not in res, "several names: the results are per unit"
    assert [(u["name"], u["changed"], u["pid"]) for u in res["units"]] == [
        ("sglang-a.service", True, None),
        ("sglang-b.service", True, None),
        ("sglang-never-started.service", False, None),
    ]
    assert all(u["stop"]["signal"] == "SIGTERM" for u in res["units"][:2])
    assert not any(_alive(pid) for pid in pids.values())

    again = _process(tmp_path, {"name": names, "state": "stopped"})
    assert not again["changed"]


def test_a_start_stops_its_conflicts_first_in_the_same_run(tmp_path, pids):
    """What Conflicts= does under systemd: the layout sharing the GPU stops before this one starts."""
    old = _process(tmp_path, {"name": "sglang-old.service", "argv": ["sleep", "3600"]})
    pids["old"] = old["pid"]
    new = _process(
        tmp_path,
        {
            "name": "sglang-new.service",
            "argv": ["sleep", "3600"],
            "conflicts": ["sglang-old.service", "sglang-never-started.service"],
        },
    )
    pids["new"] = new["pid"]
    assert new["changed"] and _alive(new["pid"]) and not _alive(old["pid"]), new
    assert [(u["name"], u["changed"]) for u in new["stopped"]] == [
        ("sglang-old.service", True),
        ("sglang-never-started.service", False),
    ]
    # a stop ignores conflicts: they name what a start displaces
    stop = _process(tmp_path, {"name": "sglang-new.service", "state": "stopped", "conflicts": ["x"]})
    assert stop["stopped"] == [] and not _alive(new["pid"])
