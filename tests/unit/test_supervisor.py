"""The process supervisor with real processes: process groups, pidfile, log, exit status, stop escalation."""

import json
import os
import sys
import time

import pytest
from sglang_layouts.serve import supervisor

PY = sys.executable
# Waits end on their event; this ceiling only catches a hang. The test processes outlive any
# test however slow the host (the fixture stops them), so none ends before a test is done with it.
HANG_S = 300.0  # only a hang reaches it, at any load
LONG = 3600


def wait_for(pred, timeout=HANG_S):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.05)
    return False


def log_text(run_dir, name):
    with open(supervisor.paths(str(run_dir), name)["log"]) as f:
        return f.read()


@pytest.fixture
def run_dir(tmp_path):
    d = tmp_path / "run"
    yield d
    # never leave a process behind
    for f in d.glob("*.pid"):
        supervisor.stop(str(d), f.name[: -len(".pid")], timeout=1, kill_timeout=5)


SLEEPER = [PY, "-u", "-c", f"import time; print('up', flush=True); time.sleep({LONG})"]


def test_start_is_idempotent_and_a_changed_command_restarts(run_dir):
    r1 = supervisor.ensure("started", str(run_dir), "a", argv=SLEEPER)
    assert r1["changed"] and r1["pid"]
    assert wait_for(lambda: "up" in log_text(run_dir, "a"))
    r2 = supervisor.ensure("started", str(run_dir), "a", argv=SLEEPER)
    assert not r2["changed"]
    assert r2["pid"] == r1["pid"]
    r3 = supervisor.ensure("started", str(run_dir), "a", argv=SLEEPER, env={"X": "1"})
    assert r3["changed"] and r3["restarted"]
    assert r3["pid"] != r1["pid"]
    assert not supervisor.group_members(r1["pid"])


def test_own_process_group_and_stop_takes_the_whole_group(run_dir):
    # the engine forks a grandchild (like SGLang's schedulers); stop must leave none of them
    code = (
        "import subprocess, sys, time;"
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep({LONG})']);"
        f"print('forked', flush=True); time.sleep({LONG})"
    )
    r = supervisor.ensure("started", str(run_dir), "g", argv=[PY, "-u", "-c", code])
    pgid = r["pid"]
    assert os.getpgid(pgid) == pgid != os.getpgrp()
    assert wait_for(lambda: len(supervisor.group_members(pgid)) >= 3)
    res = supervisor.ensure("stopped", str(run_dir), "g")
    assert res["changed"]
    assert res["stop"]["signal"] == "SIGTERM"
    assert supervisor.group_members(pgid) == []
    assert not os.path.exists(supervisor.paths(str(run_dir), "g")["pid"])
    assert not supervisor.ensure("stopped", str(run_dir), "g")["changed"]


def test_sigterm_is_escalated_to_sigkill_after_the_timeout(run_dir):
    code = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('stubborn', flush=True); "
        f"time.sleep({LONG})"
    )
    supervisor.start(str(run_dir), "k", [PY, "-u", "-c", code])
    assert wait_for(lambda: "stubborn" in log_text(run_dir, "k"))
    t0 = time.monotonic()
    res = supervisor.stop(str(run_dir), "k", timeout=0.5)
    assert res["signal"] == "SIGKILL"
    assert time.monotonic() - t0 >= 0.5  # it waited the timeout out first (how much longer: the host's speed)
    st = supervisor.status(str(run_dir), "k")
    assert not st["running"]
    assert st["exit"]["signal"] == 9


def test_exit_status_is_recorded(run_dir):
    supervisor.start(str(run_dir), "e", [PY, "-c", "import sys; print('bye'); sys.exit(3)"])
    # the wrapper writes the exit file just before it exits itself: wait for both
    assert wait_for(
        lambda: (
            supervisor.status(str(run_dir), "e")["exit"] is not None
            and not supervisor.status(str(run_dir), "e")["running"]
        )
    )
    st = supervisor.status(str(run_dir), "e")
    assert not st["running"]
    assert st["exit"]["exit_code"] == 3
    assert "bye" in log_text(run_dir, "e")


def test_missing_executable_reads_as_203(run_dir):
    supervisor.start(str(run_dir), "x", ["/nonexistent/python", "-m", "sglang.launch_server"])
    assert wait_for(lambda: supervisor.status(str(run_dir), "x")["exit"] is not None)
    assert supervisor.status(str(run_dir), "x")["exit"]["exit_code"] == 203


def test_log_offset_points_after_the_previous_run(run_dir):
    supervisor.start(str(run_dir), "o", [PY, "-c", "print('first')"])
    assert wait_for(lambda: supervisor.status(str(run_dir), "o")["exit"] is not None)
    r = supervisor.start(str(run_dir), "o", [PY, "-c", "print('second')"])
    assert wait_for(lambda: supervisor.status(str(run_dir), "o")["exit"] is not None)
    with open(r["log"]) as f:
        f.seek(r["log_offset"])
        assert f.read().strip() == "second"


def test_api_key_reaches_argv_only_and_is_masked_in_the_log(run_dir):
    key = "s3cret-canary-key"
    code = "import os, sys; print('argv', sys.argv[1:]); print('env', os.environ.get('SGLANG_API_KEY'))"
    supervisor.start(str(run_dir), "s", [PY, "-c", code, "--api-key", "${SGLANG_API_KEY}"], api_key=key)
    assert wait_for(lambda: supervisor.status(str(run_dir), "s")["exit"] is not None)
    log = log_text(run_dir, "s")
    assert "argv ['--api-key', '***']" in log  # the engine got the key, the log shows the mask
    assert "env None" in log
    for f in run_dir.iterdir():
        assert key not in f.read_text(errors="replace"), f
    with open(supervisor.paths(str(run_dir), "s")["spec"]) as f:
        spec = json.load(f)
    assert "${SGLANG_API_KEY}" in spec["argv"]


def test_api_key_config_file_and_secret_env_stay_off_argv_and_out_of_the_files(run_dir):
    """SGLang's --config file carries the key as `api-key:` (0600, gone when the engine exits); secret variables
    reach the engine's environment through the wrapper only; the log shows ***."""
    key, token = "s3cret-canary-key", "hf_canary_token"
    code = (
        "import json, os, stat, sys; p = sys.argv[2]; print('argv', sys.argv[1:]); "
        "print('cfg', json.load(open(p))['api-key'][::-1], oct(stat.S_IMODE(os.stat(p).st_mode))); "
        "print('token', os.environ.get('HF_TOKEN'))"
    )
    supervisor.start(
        str(run_dir),
        "c",
        [PY, "-c", code, "--config", "${SGLANG_API_KEY_CONFIG}"],
        api_key=key,
        secret_env={"HF_TOKEN": token},
    )
    assert wait_for(lambda: supervisor.status(str(run_dir), "c")["exit"] is not None)
    log = log_text(run_dir, "c")
    # the file held the key (printed reversed, so the mask does not hide it), mode 0600
    assert "--config" in log and key not in log and f"cfg {key[::-1]} 0o600" in log
    assert "token ***" in log  # the engine had the token; the log masks it
    for f in run_dir.iterdir():
        text = f.read_text(errors="replace")
        assert key not in text and token not in text, f
    assert not list(run_dir.glob("*.key.yaml"))  # removed when the engine exited


def test_check_mode_changes_nothing(run_dir):
    r = supervisor.ensure("started", str(run_dir), "c", argv=SLEEPER, check_mode=True)
    assert r["changed"]
    assert not supervisor.status(str(run_dir), "c")["running"]
    assert not (run_dir / "c.pid").exists()


def test_absent_removes_the_files(run_dir):
    supervisor.ensure("started", str(run_dir), "z", argv=SLEEPER)
    r = supervisor.ensure("absent", str(run_dir), "z")
    assert r["changed"]
    p = supervisor.paths(str(run_dir), "z")
    assert not any(os.path.exists(p[k]) for k in ("pid", "spec", "exit"))
