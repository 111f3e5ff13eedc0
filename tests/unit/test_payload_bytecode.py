"""Module payloads carry their Python compiled (callback_plugins/sglang_layouts_bytecode.py): a module
process imports the .pyc from the payload's zip instead of compiling each .py (issue 28's tool_s)."""

from __future__ import annotations

import base64
import importlib.util
import io
import re
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.helpers.playbook import VENV_BIN, ansible_env

REPO = Path(__file__).resolve().parents[2]


def _plugin():
    spec = importlib.util.spec_from_file_location(
        "sglang_layouts_bytecode", REPO / "callback_plugins" / "sglang_layouts_bytecode.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _zip(files: dict) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name, text in files.items():
            z.writestr(name, text)
    return base64.b64encode(out.getvalue())


def test_each_source_gets_bytecode_that_zipimport_uses_and_a_file_that_does_not_compile_keeps_its_source(
    tmp_path,
):
    payload = _zip({"pkg/__init__.py": "", "pkg/mod.py": "VALUE = 1\n", "pkg/newer.py": "def f(:\n"})
    built = zipfile.ZipFile(io.BytesIO(base64.b64decode(_plugin().with_bytecode(payload))))
    assert sorted(built.namelist()) == [
        "pkg/__init__.py",
        "pkg/__init__.pyc",
        "pkg/mod.py",
        "pkg/mod.pyc",
        "pkg/newer.py",
    ]
    # The same zip with mod.py's source changed after it was compiled: an import that reads the .pyc
    # (unchecked, so never compared with the source) sees 1, one that compiles the source sees 2.
    path = tmp_path / "payload.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for info in built.infolist():
            data = built.read(info)
            z.writestr(info, b"VALUE = 2\n" if info.filename == "pkg/mod.py" else data)
    code = f"import sys; sys.path.insert(0, {str(path)!r}); import pkg.mod; print(pkg.mod.VALUE)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1"


def _payload_names(tmp_path, env_extra: dict) -> tuple[str, list]:
    """Run ansible.builtin.ping on localhost with the payload kept; (the run's output, the payload's files)."""
    remote = tmp_path / "remote"
    env = {
        **ansible_env(),
        **env_extra,
        "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
        "ANSIBLE_KEEP_REMOTE_FILES": "1",
        "ANSIBLE_REMOTE_TMP": str(remote),
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "local"),
    }
    # the test session's shared payload cache would hand over a payload another run built
    env.pop("SGLANG_LAYOUTS_ANSIBALLZ_CACHE", None)
    cmd = [str(VENV_BIN / "ansible"), "localhost", "-i", "localhost,", "-c", "local", "-vvv"]
    cmd += ["-m", "ansible.builtin.ping", "-e", f"ansible_python_interpreter={sys.executable}"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=900)
    assert r.returncode == 0 and "ping: pong" in r.stdout, r.stdout + r.stderr
    (wrapper,) = remote.glob("ansible-tmp-*/AnsiballZ_ping.py")
    zip_data = re.search(r"zip_data='([^']+)'", wrapper.read_text()).group(1)
    return r.stdout, zipfile.ZipFile(io.BytesIO(base64.b64decode(zip_data))).namelist()


def test_a_real_module_runs_from_a_payload_with_bytecode_and_the_option_turns_it_off(tmp_path):
    out, names = _payload_names(tmp_path / "on", {})
    assert "sglang_layouts_bytecode: module payloads carry their Python compiled" in out
    assert "ansible/module_utils/basic.pyc" in names
    assert {n[:-1] for n in names if n.endswith(".pyc")} == {n for n in names if n.endswith(".py")}
    out, names = _payload_names(tmp_path / "off", {"SGLANG_LAYOUTS_PAYLOAD_BYTECODE": "false"})
    assert "sglang_layouts_bytecode" not in out
    assert "ansible/module_utils/basic.py" in names and not [n for n in names if n.endswith(".pyc")]
