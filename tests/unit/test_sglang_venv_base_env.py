"""sglang_venv over a base env and from a wheelhouse: the pin helpers (module_utils serve/wheels.py),
the host probes (roles/sglang_venv/files/venv_probe.py) and the molecule wheel builder.

The probes run under real venvs made here: a "base env" venv holding a stand-in package (as an
image's venv holds torch) and a venv over it made the way the role makes it.
"""

import importlib.util
import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "module_utils"))

from sglang_layouts.serve import wheels  # noqa: E402

FILES = REPO / "roles" / "sglang_venv" / "files"
PROBE = FILES / "venv_probe.py"
LIBS = FILES / "nvidia_lib_dirs.py"
MAKE_WHEEL = REPO / "molecule" / "provision" / "files" / "make_wheel.py"


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


make_wheel = _load(MAKE_WHEEL, "make_wheel").make_wheel


# -- pins --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("filename", "pin"),
    [
        ("sglang-0.5.16-cp312-cp312-manylinux_2_34_x86_64.whl", "sglang==0.5.16"),
        ("/opt/wheels/sglang_kernel-0.4.5-cp310-abi3-manylinux2014_x86_64.whl", "sglang-kernel==0.4.5"),
        ("torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl", "torch==2.13.0+cpu"),
        ("Flashinfer_Python-0.6.14-1-py3-none-any.whl", "flashinfer-python==0.6.14"),  # build tag
    ],
)
def test_wheel_pin(filename, pin):
    assert wheels.wheel_pin(filename) == pin


@pytest.mark.parametrize("bad", ["sglang-0.5.16.tar.gz", "sglang-0.5.16-py3.whl", "a-b-c-d-e-f-g.whl"])
def test_wheel_pin_rejects(bad):
    with pytest.raises(wheels.WheelError):
        wheels.wheel_pin(bad)


def test_wheel_pins_sorted_and_one_version_per_name():
    names = ["b_pkg-1.0-py3-none-any.whl", "a-2.0-py3-none-any.whl", "A-2.0-py3-none-any.whl"]
    assert wheels.wheel_pins(names) == ["a==2.0", "b-pkg==1.0"]
    with pytest.raises(wheels.WheelError, match="two versions of a"):
        wheels.wheel_pins(["a-1.0-py3-none-any.whl", "a-2.0-py3-none-any.whl"])


def test_drop_pins_removes_torch_and_its_now_empty_step():
    steps = [
        {"name": ["torch==2.14.1"], "extra_args": "--index-url https://download.pytorch.org/whl/cu130"},
        {"name": ["sglang[all]==0.5.23", "Triton==3.9.0", "numpy==2.4.6"], "extra_args": "--no-deps"},
    ]
    assert wheels.drop_pins(steps, ["Torch", "triton"]) == [
        {"name": ["sglang[all]==0.5.23", "numpy==2.4.6"], "extra_args": "--no-deps"}
    ]
    assert wheels.drop_pins(steps, []) == steps


# -- venvs -------------------------------------------------------------------------------


def _site(venv: Path) -> Path:
    (sp,) = (venv / "lib").glob("python3*/site-packages")
    return sp


@pytest.fixture(scope="module")
def base_env(tmp_path_factory) -> Path:
    """A venv holding sglmol-base 1.0, unpacked from a wheel (the stand-in for an image's torch)."""
    root = tmp_path_factory.mktemp("base")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "env")], check=True)
    whl = make_wheel(root / "wheels", "sglmol-base", "1.0", [])
    zipfile.ZipFile(whl).extractall(_site(root / "env"))
    return root / "env"


def _probe(python: Path, *args: str) -> dict:
    out = subprocess.run([str(python), str(PROBE), *args], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def _venv_over(base_env: Path, path: Path) -> Path:
    """The venv the role makes: from the base env's interpreter, plus the .pth of its folders."""
    info = _probe(base_env / "bin" / "python", "describe")
    subprocess.run([info["base_python"], "-m", "venv", "--without-pip", str(path)], check=True)
    (_site(path) / "_sglang_venv_base_env.pth").write_text("".join(d + "\n" for d in info["site_dirs"]))
    return path


def _imports(python: Path, module: str) -> bool:
    return subprocess.run([str(python), "-c", f"import {module}"], capture_output=True).returncode == 0


def test_describe_a_venv(base_env):
    info = _probe(base_env / "bin" / "python", "describe")
    assert info["is_venv"] is True
    assert info["prefix"] == str(base_env)
    assert info["version"] == f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert os.path.realpath(_site(base_env)) in info["site_dirs"]
    # The interpreter the base env was made from, outside it.
    assert not info["base_python"].startswith(str(base_env))
    assert os.access(info["base_python"], os.X_OK)


def test_system_site_packages_from_a_venv_misses_its_packages(base_env, tmp_path):
    """Why the role writes a .pth file: --system-site-packages from a venv's python exposes the
    base interpreter's site-packages, not the venv's, so the stand-in is not importable."""
    child = tmp_path / "sys-site"
    subprocess.run(
        [
            str(base_env / "bin" / "python"),
            "-m",
            "venv",
            "--without-pip",
            "--system-site-packages",
            str(child),
        ],
        check=True,
    )
    assert not _imports(child / "bin" / "python", "sglmol_base")
    assert _imports(_venv_over(base_env, tmp_path / "pth") / "bin" / "python", "sglmol_base")


def test_provides_from_the_base_env(base_env, tmp_path):
    venv = _venv_over(base_env, tmp_path / "v")
    base_dirs = _probe(base_env / "bin" / "python", "describe")["site_dirs"]
    spec = json.dumps({"names": ["sglmol-base", "not-installed"], "base_dirs": base_dirs})
    got = _probe(venv / "bin" / "python", "provides", spec)["provides"]
    assert got["sglmol-base"]["found"] and got["sglmol-base"]["from_base"]
    assert got["sglmol-base"]["version"] == "1.0"
    assert got["sglmol-base"]["own_copy"] == []
    assert got["sglmol-base"]["module_file"].startswith(base_dirs[0])
    assert got["not-installed"]["found"] is False

    # A copy pip put into the venv shadows the base env's: reported as not from the base env.
    zipfile.ZipFile(make_wheel(tmp_path / "w", "sglmol-base", "2.0", [])).extractall(_site(venv))
    got = _probe(venv / "bin" / "python", "provides", spec)["provides"]["sglmol-base"]
    assert got["version"] == "2.0"
    assert not got["from_base"]
    assert [Path(p).name for p in got["own_copy"]] == ["sglmol_base-2.0.dist-info"]


def test_missing_counts_the_base_env_as_installed(base_env, tmp_path):
    venv = _venv_over(base_env, tmp_path / "v")
    steps = [["sglmol-base==1.0"], ["SGLMOL_base==1.0", "sglmol-base==2.0"], ["sglmol-app==1.0"], []]
    got = _probe(venv / "bin" / "python", "missing", json.dumps(steps))
    assert got == {"missing": [[], ["sglmol-base==2.0"], ["sglmol-app==1.0"], []]}


def test_missing_versions_and_specifiers():
    """With pip importable, versions compare as versions; anything but == leaves it to pip."""
    import pip

    ver = pip.__version__
    steps = [[f"pip=={ver}", f"pip=={ver}.0", "pip==0.0.1", "pip>=1", "pip", "no-such-dist==1"]]
    got = _probe(Path(sys.executable), "missing", json.dumps(steps))["missing"][0]
    assert got == ["pip==0.0.1", "pip>=1", "no-such-dist==1"]


def test_nvidia_libs_of_the_base_env_are_found(base_env, tmp_path):
    """torch's nvidia-* wheels sit in the base env: LD_LIBRARY_PATH must still list them."""
    lib = Path(os.path.realpath(_site(base_env))) / "nvidia" / "cu13" / "lib"
    lib.mkdir(parents=True)
    (lib / "libcudart.so.13").touch()
    try:
        venv = _venv_over(base_env, tmp_path / "v")
        out = subprocess.run(
            [str(venv / "bin" / "python"), str(LIBS)], check=True, capture_output=True, text=True
        )
        res = json.loads(out.stdout)
        assert res["lib_dirs"] == [str(lib)]
        assert res["cuda_wheels_home"] == str(lib.parent)
    finally:
        (lib / "libcudart.so.13").unlink()


def pip_install(target, whl, *opts):
    """pip installs the wheel into folder `target`, offline (--no-index); output captured."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "-q",
        "--no-index",
        *opts,
        "--target",
        str(target),
        str(whl),
    ]
    return subprocess.run(cmd, capture_output=True, text=True)


def test_make_wheel_installs_with_pip(tmp_path):
    whl = make_wheel(tmp_path / "w", "sglmol-app", "1.0", ["sglmol-base>=1.0", "sglmol-not-anywhere"])
    assert whl.name == "sglmol_app-1.0-py3-none-any.whl"
    assert make_wheel(
        tmp_path / "w2", "sglmol-app", "1.0", ["sglmol-base>=1.0", "sglmol-not-anywhere"]
    ).read_bytes() == (whl.read_bytes())  # same bytes each time: copying it again changes nothing
    target = tmp_path / "t"
    installed = pip_install(target, whl, "--no-deps")
    assert installed.returncode == 0, installed.stderr
    meta = (target / "sglmol_app-1.0.dist-info" / "METADATA").read_text()
    assert "Requires-Dist: sglmol-not-anywhere" in meta
    assert (target / "sglmol_app" / "__init__.py").read_text() == '__version__ = "1.0"\n'
    # Without --no-deps the missing requirement stops pip: the wheel really declares it.
    r = pip_install(tmp_path / "t2", whl)
    assert r.returncode != 0 and "sglmol-base" in (r.stdout + r.stderr)


def test_sysconfig_purelib_is_a_site_dir():
    assert os.path.realpath(sysconfig.get_paths()["purelib"]) in _load(PROBE, "venv_probe").site_dirs()
