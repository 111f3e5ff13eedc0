"""Run one module of library/ through ansible-core itself (`ansible localhost -m ...`), so its
plumbing (argument spec, check mode, warnings, failing, facts) runs as on a host."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers.playbook import CALLBACK_PLUGINS

REPO = Path(__file__).resolve().parents[2]
ANSIBLE = Path(sys.executable).with_name("ansible")


def run_module(
    tmp_path,
    module: str,
    args: str | dict,
    python: str = sys.executable,
    extra=(),
    check_rc=False,
    with_stderr=False,
):
    """The module's result for localhost; args as key=value text or a dict; extra: more ansible options;
    check_rc: ansible itself must exit 0 too; with_stderr: (result, what ansible wrote on stderr)."""
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        # ansiballz_shared_cache: the test session's payloads, built (and compiled) once
        ANSIBLE_CALLBACK_PLUGINS=CALLBACK_PLUGINS,
        ANSIBLE_STDOUT_CALLBACK="json",
        ANSIBLE_LOCAL_TEMP=str(Path(tmp_path) / "tmp"),
        ANSIBLE_CACHE_PLUGIN="memory",
    )
    text = args if isinstance(args, str) else json.dumps(args)
    cmd = [str(ANSIBLE), "localhost", "-i", "localhost,", "-c", "local", "-m", module, "-a", text]
    cmd += ["-e", f"ansible_python_interpreter={python}", *extra]
    # a ceiling only a hang reaches: one run is ~2 CPU-s, but at load 40 (make test-under-load
    # beside molecule) a run of ansible was seen to take over 120 s
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    # profile_tasks (ansible.cfg) prints timing lines around the json callback's document
    assert "{" in proc.stdout, f"no JSON from ansible: {proc.stdout}\n{proc.stderr}"
    doc = json.JSONDecoder().raw_decode(proc.stdout[proc.stdout.index("{") :])[0]
    result = doc["plays"][0]["tasks"][0]["hosts"]["localhost"]
    assert not check_rc or proc.returncode == 0, (proc.returncode, result)
    return (result, proc.stderr) if with_stderr else result


def module_main(monkeypatch, capsys, module: str, args: dict) -> dict:
    """library/<module>.py's main() in this process, as a module process runs it (its arguments as
    Ansible hands them, ansible.module_utils.sglang_layouts importable): its JSON answer."""
    import importlib.util

    import ansible.module_utils
    import pytest
    from ansible.module_utils import basic

    monkeypatch.setattr(
        ansible.module_utils, "__path__", [*ansible.module_utils.__path__, str(REPO / "module_utils")]
    )
    spec = importlib.util.spec_from_file_location(f"_{module}_module", REPO / "library" / f"{module}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    payload = {"ANSIBLE_MODULE_ARGS": {**args, "_ansible_check_mode": False}}
    monkeypatch.setattr(basic, "_ANSIBLE_ARGS", json.dumps(payload).encode())
    monkeypatch.setattr(basic, "_ANSIBLE_PROFILE", "legacy")
    with pytest.raises(SystemExit):
        mod.main()
    return json.loads(capsys.readouterr().out)
