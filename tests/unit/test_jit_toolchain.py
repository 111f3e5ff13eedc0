"""jit_toolchain: the unit's PATH, and the probe that finds what SGLang's JIT builds run on it.

The probe runs for real (this interpreter, a PATH of folders holding fake executables, a fake
flashinfer package), the way provision runs it with the venv's python and the unit's environment.
"""

import os
import sys

import pytest
from sglang_layouts.engines import role_facts
from sglang_layouts.serve import jit_toolchain

SGLANG_NEEDS = ["nvcc", "ninja", "c++", "flashinfer data"]


def test_a_venv_over_a_base_env_gets_its_bin_then_the_cuda_toolkit_then_the_system():
    path = jit_toolchain.unit_path("sglang", "/opt/sglang/venv", "/opt/torch/.venv", "/usr/local/cuda")
    assert (
        path == "/opt/sglang/venv/bin:/opt/torch/.venv/bin:/usr/local/cuda/bin:/usr/local/bin:/usr/bin:/bin"
    )


def test_the_base_env_may_be_named_by_its_python_and_nothing_is_listed_twice():
    path = jit_toolchain.unit_path(
        "sglang", "/opt/sglang/venv/", "/usr/bin/python3.12", "/usr/local/cuda/", ["/opt/x"]
    )
    assert path == "/opt/sglang/venv/bin:/usr/bin:/usr/local/cuda/bin:/opt/x:/usr/local/bin:/bin"


def test_without_base_env_or_cuda_home_the_venv_and_the_system():
    assert jit_toolchain.unit_path("sglang", "/v", "", "") == "/v/bin:/usr/local/bin:/usr/bin:/bin"
    # vLLM's venv is never built over the base env
    assert jit_toolchain.unit_path("vllm", "/opt/vllm/venv", "/opt/torch/.venv", "") == (
        "/opt/vllm/venv/bin:/usr/local/bin:/usr/bin:/bin"
    )


def test_the_simulator_gets_no_path_and_needs_no_jit_tools():
    assert jit_toolchain.unit_path("sim", "/opt/sglang/venv", "/opt/torch/.venv", "/usr/local/cuda") == ""
    assert jit_toolchain.jit_needs("sim") == []
    assert jit_toolchain.jit_needs("sglang") == SGLANG_NEEDS == role_facts(None)["jit_tools"]


def fake_tool(folder, name):
    folder.mkdir(parents=True, exist_ok=True)
    tool = folder / name
    tool.write_text("#!/bin/sh\nexit 0\n")
    tool.chmod(0o755)
    return str(tool)


def fake_flashinfer(root, with_data=True):
    pkg = root / "flashinfer"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    if with_data:
        (pkg / "data" / "csrc").mkdir(parents=True)
    return str(pkg)


@pytest.fixture
def host(tmp_path):
    """A base env's bin with ninja, a CUDA toolkit's bin with nvcc, a system bin with g++."""
    base, cuda, system = tmp_path / "torch" / "bin", tmp_path / "cuda" / "bin", tmp_path / "usr" / "bin"
    tools = {
        "ninja": fake_tool(base, "ninja"),
        "nvcc": fake_tool(cuda, "nvcc"),
        "c++": fake_tool(system, "g++"),
    }
    return {"base": str(base), "cuda": str(cuda), "system": str(system), "tools": tools, "root": tmp_path}


def test_everything_on_the_path_is_found_with_flashinfer_data(host):
    site = host["root"] / "site"
    pkg = fake_flashinfer(site)
    path = ":".join([host["base"], host["cuda"], host["system"]])
    found = jit_toolchain.probe(sys.executable, {"PATH": path, "PYTHONPATH": str(site)})
    assert {k: found[k] for k in ("nvcc", "ninja", "c++")} == host["tools"]
    assert found["flashinfer"] == {"data": os.path.join(pkg, "data"), "readable": True}
    assert jit_toolchain.missing(found, SGLANG_NEEDS, path) == []


def test_ninja_only_in_the_base_env_is_missing_without_its_bin_and_the_message_says_how_to_fix(host):
    # the H200's failure: the base env's bin/ (ninja) not on the unit's PATH
    path = ":".join([host["cuda"], host["system"]])
    found = jit_toolchain.probe(sys.executable, {"PATH": path})
    assert found["ninja"] is None and found["nvcc"] == host["tools"]["nvcc"]
    assert found["flashinfer"] is None  # not installed: nothing to check
    assert jit_toolchain.missing(found, SGLANG_NEEDS, path) == [
        f"ninja not found on the unit's PATH ({path}): install ninja into the venv (pip install ninja) "
        "or set sglang_venv_base_env to the environment that has it"
    ]


def test_every_missing_piece_is_named(host):
    site = host["root"] / "site"
    pkg = fake_flashinfer(site, with_data=False)
    path = str(host["root"] / "empty")
    found = jit_toolchain.probe(sys.executable, {"PATH": path, "PYTHONPATH": str(site)})
    msgs = jit_toolchain.missing(found, SGLANG_NEEDS, path)
    assert [m.split(" not found")[0].split(" (")[0] for m in msgs] == [
        "nvcc",
        "ninja",
        "a C++ compiler",
        "flashinfer's data/ folder",
    ]
    assert f"({os.path.join(pkg, 'data')}) is missing or unreadable" in msgs[3]


def test_nvcc_under_cuda_home_counts_and_cxx_names_the_compiler(host):
    cuda_home = os.path.dirname(host["cuda"])
    cxx = fake_tool(host["root"] / "opt" / "gcc" / "bin", "g++-13")
    found = jit_toolchain.probe(sys.executable, {"PATH": host["base"], "CUDA_HOME": cuda_home, "CXX": cxx})
    assert found["nvcc"] == host["tools"]["nvcc"]
    assert found["c++"] == cxx
    assert jit_toolchain.missing(found, ["nvcc", "ninja", "c++"], host["base"]) == []


def test_a_python_that_cannot_run_the_probe_is_an_error(tmp_path):
    bad = fake_tool(tmp_path, "python")
    (tmp_path / "python").write_text("#!/bin/sh\necho 'no module' >&2\nexit 3\n")
    with pytest.raises(RuntimeError, match=r"could not run the JIT probe \(exit 3\): no module"):
        jit_toolchain.probe(bad, {"PATH": "/usr/bin"})


@pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.exists("/usr/bin/python3"), reason="needs root and /usr/bin/python3"
)
def test_as_root_the_probe_runs_as_the_service_user_it_names(host):
    import pwd

    user = next((u for u in ("nobody", "daemon") if _exists(u)), None)
    if user is None:
        pytest.skip("no unprivileged user on this machine")
    os.chmod(host["root"], 0o755)
    # the host's python (this interpreter may sit in a home the other user cannot enter)
    found = jit_toolchain.probe("/usr/bin/python3", {"PATH": host["base"]}, user=user)
    assert found["as_user"] == user
    # a user that does not exist yet (check mode before the deploy creates it): this process's own
    found = jit_toolchain.probe("/usr/bin/python3", {"PATH": host["base"]}, user="no-such-user-xyz")
    assert found["as_user"] == pwd.getpwuid(os.geteuid()).pw_name


def _exists(user):
    import pwd

    try:
        pwd.getpwnam(user)
    except KeyError:
        return False
    return True
