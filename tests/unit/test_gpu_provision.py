"""playbooks/provision.yml through ansible-playbook on this machine, GPU parts only.

An `nvidia-smi` on PATH replays the H200 recording and a CUDA folder's `nvcc` prints the
recorded `nvcc --version`; gpu_facts and the cuda role (method existing) run for real.
The venv part is covered by molecule/provision (it installs GBs).
"""

import json
import os
import sys
from pathlib import Path

import pytest

from tests.helpers.gpu_fakes import fake_nvidia_smi, write_script
from tests.helpers.playbook import REPO, VENV_BIN, cached_facts, run_playbook

H200 = REPO / "tests" / "fixtures" / "gpu" / "h200-1gpu"

pytestmark = pytest.mark.skipif(
    not (VENV_BIN / "ansible-playbook").exists(), reason="ansible-core is not installed in .venv"
)


def setup(tmp_path: Path, driver: str = "580.159.04", nvcc: str | None = None) -> dict:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_nvidia_smi(bin_dir / "nvidia-smi", H200, driver=driver)
    cuda = tmp_path / "cuda"
    (cuda / "bin").mkdir(parents=True)
    write_script(cuda / "bin" / "nvcc", f"#!/bin/sh\ncat '{nvcc or H200 / 'nvcc.txt'}'\n")
    inv = tmp_path / "hosts.yml"
    inv.write_text(
        json.dumps(
            {
                "sglang_hosts": {
                    "hosts": {
                        "gpu-host": {
                            "ansible_connection": "local",
                            "ansible_python_interpreter": sys.executable,
                            "sglang_engine": "sglang",
                            "gpu_count": 8,
                            "gpu_memory_gib": 94.97,
                            "gpu_interconnect": "pcie",
                        }
                    }
                }
            }
        )
    )
    return {"inv": inv, "bin": bin_dir, "cuda": cuda}


def provision(tmp_path: Path, env: dict, check: bool = False, tags: str = "gpu_facts,cuda", **extravars):
    """provision.yml's GPU parts; returns (rc, the playbook's output, the runner)."""
    r = run_playbook(
        "provision.yml",
        tmp_path / "runner",
        inventory=str(env["inv"]),
        extravars={"cuda_method": "existing", "cuda_existing_home": str(env["cuda"]), **extravars},
        envvars={
            "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"),
            "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",  # one line per value: long paths are not wrapped
            "PATH": f"{env['bin']}{os.pathsep}{VENV_BIN}{os.pathsep}{os.environ['PATH']}",
        },
        tags=tags,
        cmdline="--check" if check else None,
        timeout=300,
    )
    return r.rc, r.stdout.read(), r


def test_facts_outrank_inventory_and_cuda_existing_passes(tmp_path):
    env = setup(tmp_path)
    rc, out, runner = provision(tmp_path, env)
    assert rc == 0, out
    # The summary shows the recorded GPU, not the inventory's 8 x 94.97 GiB PCIe.
    assert "1 x NVIDIA H200 (139.8 GiB, none)" in out
    assert "NVIDIA driver 580.159.04 (>= 580.65.06)" in out
    assert f"nvcc in {env['cuda']} is release 13.0" in out
    assert f'"cuda_home": "{env["cuda"]}"' in out
    # deploy.yml is a later run: it reads these from the fact cache.
    cached = cached_facts(runner, "gpu-host")
    assert cached["cuda_home"] == str(env["cuda"])
    hw = tuple(cached[k] for k in ("gpu_count", "gpu_memory_gib", "gpu_interconnect"))
    assert hw == (1, 139.8, "none")


def test_check_mode_runs_the_same_reads(tmp_path):
    env = setup(tmp_path)
    rc, out, _ = provision(tmp_path, env, check=True)
    assert rc == 0, out
    assert "1 x NVIDIA H200 (139.8 GiB, none)" in out
    assert "changed=0" in out


def test_old_driver_is_refused_clearly(tmp_path):
    env = setup(tmp_path, driver="535.104.05")
    rc, out, _ = provision(tmp_path, env)
    assert rc != 0
    assert "The NVIDIA driver 535.104.05 on gpu-host is too old for CUDA 13.0: it needs >= 580.65.06" in out


def test_wrong_nvcc_release_is_refused(tmp_path):
    other = tmp_path / "nvcc-12.txt"
    other.write_text(
        (H200 / "nvcc.txt").read_text().replace("release 13.0, V13.0.88", "release 12.8, V12.8.93")
    )
    env = setup(tmp_path, nvcc=str(other))
    rc, out, _ = provision(tmp_path, env)
    assert rc != 0
    assert "nvcc is release 12.8" in out
    assert "not 13.0" in out


def test_sim_hosts_are_skipped(tmp_path):
    env = setup(tmp_path)
    env["inv"].write_text(
        env["inv"].read_text().replace('"sglang_engine": "sglang"', '"sglang_engine": "sim"')
    )
    rc, out, _ = provision(tmp_path, env)
    assert rc == 0, out
    assert "sglang_engine is sim: nothing to provision" in out
    assert "Read the GPUs" not in out


def test_unknown_cuda_method_is_refused_before_anything(tmp_path):
    env = setup(tmp_path)
    rc, out, _ = provision(tmp_path, env, cuda_method="yum")
    assert rc != 0
    assert "cuda_method" in out
    assert "apt, existing, wheels" in out


def jit_host(tmp_path: Path) -> dict:
    """The H200's layout in a folder the service user can enter: a base env whose bin/ has ninja, a
    venv whose python is the host's, flashinfer installed without its data/ folder or with it."""
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="sglang-jit-", dir="/tmp"))
    root.chmod(0o755)
    (root / "torch" / "bin").mkdir(parents=True)
    write_script(root / "torch" / "bin" / "ninja", "#!/bin/sh\nexit 0\n")
    (root / "cuda" / "bin").mkdir(parents=True)
    write_script(root / "cuda" / "bin" / "nvcc", "#!/bin/sh\nexit 0\n")
    (root / "venv" / "bin").mkdir(parents=True)
    (root / "venv" / "bin" / "python").symlink_to("/usr/bin/python3")
    return {"root": root, "base": root / "torch", "venv": root / "venv", "cuda": root / "cuda"}


@pytest.mark.skipif(not os.path.exists("/usr/bin/python3"), reason="needs the host's /usr/bin/python3")
def test_the_readme_snippet_puts_the_base_envs_ninja_on_the_units_path_and_provision_checks_it(tmp_path):
    import shutil

    env = setup(tmp_path)
    jit = jit_host(tmp_path)
    try:
        rc, out, _ = provision(
            tmp_path,
            env,
            tags="jit_check",
            sglang_venv_path=str(jit["venv"]),
            sglang_venv_base_env=str(jit["base"]),
            cuda_home=str(jit["cuda"]),
        )
        assert rc == 0, out
        assert f"ninja {jit['base']}/bin/ninja" in out
        assert f"nvcc {jit['cuda']}/bin/nvcc" in out
        # the unit's PATH, as the summary shows it, is what the probe searched
        assert f"{jit['venv']}/bin:{jit['base']}/bin:{jit['cuda']}/bin:/usr/local/bin:/usr/bin:/bin" in out

        # a PATH without them (here given outright, as sglang_service_extra_env may): named, with the fix
        rc, out, _ = provision(
            tmp_path,
            env,
            tags="jit_check",
            sglang_venv_path=str(jit["venv"]),
            sglang_service_extra_env={"PATH": str(jit["root"])},
        )
        assert rc != 0
        assert "JIT builds would fail" in out
        assert f"ninja not found on the unit's PATH ({jit['root']})" in out
        assert "set sglang_venv_base_env to the environment that has it" in out
        assert "a C++ compiler (c++, g++ or $CXX) not found" in out
    finally:
        shutil.rmtree(jit["root"])
