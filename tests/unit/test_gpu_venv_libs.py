"""roles/sglang_venv/files/nvidia_lib_dirs.py: LD_LIBRARY_PATH from a venv's NVIDIA wheels.

The layout is the one recorded in a torch 2.11.0+cu130 venv on the H200
(tests/fixtures/gpu/h200-1gpu/nvidia-wheels.txt): the script runs under a real venv's
interpreter whose site-packages holds that layout (empty .so files).
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "roles" / "sglang_venv" / "files" / "nvidia_lib_dirs.py"
RECORDED = REPO / "tests" / "fixtures" / "gpu" / "h200-1gpu" / "nvidia-wheels.txt"


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    return path


def site_packages(venv: Path) -> Path:
    (sp,) = (venv / "lib").glob("python3*/site-packages")
    return sp


def run(venv: Path) -> dict:
    out = subprocess.run(
        [str(venv / "bin" / "python"), str(SCRIPT)], check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout)


def test_recorded_cu13_layout(venv):
    """Re-create every lib folder the H200's venv had, with as many .so files as it had."""
    sp = site_packages(venv)
    recorded = {}
    for line in RECORDED.read_text().splitlines()[1:]:
        path, count = line.rsplit(" ", 1)
        rel = path.split("/site-packages/", 1)[1]
        recorded[rel] = int(count)
        lib = sp / rel
        lib.mkdir(parents=True)
        for i in range(int(count)):
            (lib / f"lib{i}.so.13").touch()
    # A folder with no library in it is not put on the path.
    (sp / "nvidia" / "empty" / "lib").mkdir(parents=True)
    res = run(venv)
    rels = [d.split("/site-packages/", 1)[1] for d in res["lib_dirs"]]
    assert rels[0] == "nvidia/cu13/lib"  # the CUDA runtime before what is built on it
    assert sorted(rels) == sorted(recorded)
    assert res["ld_library_path"] == ":".join(res["lib_dirs"])
    assert res["cuda_wheels_home"].endswith("/site-packages/nvidia/cu13")
    assert res["python"].startswith(str(venv))


def test_venv_without_nvidia_wheels(tmp_path):
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "v")], check=True)
    res = run(tmp_path / "v")
    assert (res["lib_dirs"], res["ld_library_path"], res["cuda_wheels_home"]) == ([], "", "")
