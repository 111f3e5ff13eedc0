"""playbooks/provision.yml through ansible-playbook on this machine, GPU parts only.

An `nvidia-smi` on PATH replays the H200 recording and a CUDA folder's `nvcc` prints the
recorded `nvcc --version`; gpu_facts and the cuda role (method existing) run for real.
The venv part is covered by molecule/provision (it installs GBs).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
H200 = REPO / "tests" / "fixtures" / "gpu" / "h200-1gpu"
PLAYBOOK = Path(sys.executable).with_name("ansible-playbook")

pytestmark = pytest.mark.skipif(
    not PLAYBOOK.exists(), reason="ansible-core is not installed beside this python"
)

SMI = """#!/bin/sh
case "$*" in
  "-q -x") cat "{d}/nvidia-smi-q.xml" ;;
  --query-compute-apps=*) cat "{d}/compute-apps-full.csv" ;;
  "topo -m") cat "{d}/topo-m.txt" ;;
  "--query-gpu=driver_version --format=csv,noheader") echo "{driver}" ;;
  *) echo "fake nvidia-smi: unexpected arguments: $*" >&2; exit 2 ;;
esac
"""


def setup(tmp_path: Path, driver: str = "580.159.04", nvcc: str | None = None) -> dict:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(SMI.format(d=H200, driver=driver))
    smi.chmod(0o755)
    cuda = tmp_path / "cuda"
    (cuda / "bin").mkdir(parents=True)
    fake_nvcc = cuda / "bin" / "nvcc"
    fake_nvcc.write_text(f"#!/bin/sh\ncat '{nvcc or H200 / 'nvcc.txt'}'\n")
    fake_nvcc.chmod(0o755)
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


def plain(value):
    """A cached value without ansible-core 2.19's serialized tags ({'value': ..., 'tags': ...})."""
    return value["value"] if isinstance(value, dict) and "__ansible_type" in value else value


def provision(tmp_path: Path, env: dict, *args: str) -> tuple[int, str]:
    penv = dict(
        os.environ,
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_CACHE_PLUGIN="jsonfile",  # as ansible.cfg, but in tmp_path
        ANSIBLE_CACHE_PLUGIN_CONNECTION=str(tmp_path / "facts"),
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"),
        ANSIBLE_FORCE_COLOR="0",
        ANSIBLE_CALLBACK_RESULT_FORMAT="json",  # one line per value: long paths are not wrapped
        PATH=f"{env['bin']}:{os.environ['PATH']}",
    )
    cmd = [str(PLAYBOOK), "-i", str(env["inv"]), "playbooks/provision.yml", "--tags", "gpu_facts,cuda"]
    cmd += ["-e", "cuda_method=existing", "-e", f"cuda_existing_home={env['cuda']}", *args]
    proc = subprocess.run(cmd, cwd=REPO, env=penv, capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stdout + proc.stderr


def test_facts_outrank_inventory_and_cuda_existing_passes(tmp_path):
    env = setup(tmp_path)
    rc, out = provision(tmp_path, env)
    assert rc == 0, out
    # The summary shows the recorded GPU, not the inventory's 8 x 94.97 GiB PCIe.
    assert "1 x NVIDIA H200 (139.8 GiB, none)" in out
    assert "NVIDIA driver 580.159.04 (>= 580.65.06)" in out
    assert f"nvcc in {env['cuda']} is release 13.0" in out
    assert f'"cuda_home": "{env["cuda"]}"' in out
    # deploy.yml is a later run: it reads these from the fact cache.
    (cache_file,) = (tmp_path / "facts").glob("*gpu-host")  # ansible-core 2.19 names it s1_gpu-host
    cached = json.loads(cache_file.read_text())
    cached = json.loads(cached["__payload__"]) if "__payload__" in cached else cached
    assert plain(cached["cuda_home"]) == str(env["cuda"])
    hw = tuple(plain(cached[k]) for k in ("gpu_count", "gpu_memory_gib", "gpu_interconnect"))
    assert hw == (1, 139.8, "none")


def test_check_mode_runs_the_same_reads(tmp_path):
    env = setup(tmp_path)
    rc, out = provision(tmp_path, env, "--check")
    assert rc == 0, out
    assert "1 x NVIDIA H200 (139.8 GiB, none)" in out
    assert "changed=0" in out


def test_old_driver_is_refused_clearly(tmp_path):
    env = setup(tmp_path, driver="535.104.05")
    rc, out = provision(tmp_path, env)
    assert rc != 0
    assert "The NVIDIA driver 535.104.05 on gpu-host is too old for CUDA 13.0: it needs >= 580.65.06" in out


def test_wrong_nvcc_release_is_refused(tmp_path):
    other = tmp_path / "nvcc-12.txt"
    other.write_text(
        (H200 / "nvcc.txt").read_text().replace("release 13.0, V13.0.88", "release 12.8, V12.8.93")
    )
    env = setup(tmp_path, nvcc=str(other))
    rc, out = provision(tmp_path, env)
    assert rc != 0
    assert "nvcc is release 12.8" in out
    assert "not 13.0" in out


def test_sim_hosts_are_skipped(tmp_path):
    env = setup(tmp_path)
    env["inv"].write_text(
        env["inv"].read_text().replace('"sglang_engine": "sglang"', '"sglang_engine": "sim"')
    )
    rc, out = provision(tmp_path, env)
    assert rc == 0, out
    assert "sglang_engine is sim: nothing to provision" in out
    assert "Read the GPUs" not in out


def test_unknown_cuda_method_is_refused_before_anything(tmp_path):
    env = setup(tmp_path)
    rc, out = provision(tmp_path, env, "-e", "cuda_method=yum")
    assert rc != 0
    assert "cuda_method" in out
    assert "apt, existing, wheels" in out
