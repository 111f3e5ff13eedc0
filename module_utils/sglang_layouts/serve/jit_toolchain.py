"""The PATH an engine's unit gets, and whether what the engine's JIT builds run is reachable on it.

SGLang and flashinfer compile kernels on first use (flashinfer's RMSNorm at the first CUDA-graph
capture): they run `ninja`, `nvcc` and a C++ compiler found on the process's PATH, and flashinfer
compiles from the sources in its package's data/ folder. On GPU images those programs sit beside
the Python environment torch came with (ninja in its bin/) and in the CUDA toolkit, not on a
service's default PATH, so a venv built over that environment must put both on the unit's PATH.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess

from ..engines import engine as engine_of
from ..engines import role_facts

# What a service gets when nothing else is said (systemd's and the supervisor's default).
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"

# What each JIT piece is, and how to provide it. The C++ compiler is c++ or g++ (what torch's and
# flashinfer's builds call when CXX is unset).
_FIX = {
    "nvcc": "install the CUDA toolkit (cuda_method) or point cuda_home/CUDA_HOME at the one the host has",
    "ninja": "install ninja into the venv (pip install ninja) or set sglang_venv_base_env to the environment that has it",
    "c++": "install a C++ compiler (Debian/Ubuntu: apt-get install g++)",
    "flashinfer data": "reinstall flashinfer-python from its full wheel (its data/ folder holds the kernel sources)",
}


def env_bin(env: str | None) -> str:
    """The bin/ folder of a Python environment given as its folder or as its python (sglang_venv_base_env)."""
    env = (env or "").rstrip("/")
    if not env:
        return ""
    if os.path.basename(os.path.dirname(env)) == "bin" and os.path.basename(env).startswith("python"):
        return os.path.dirname(env)
    return env + "/bin"


def unit_path(engine: str | None, venv_dir: str, base_env: str = "", cuda_home: str = "", extra=()) -> str:
    """The PATH of an engine's unit: the engine's venv bin, the bin of the environment that venv was
    built over (SGLang with sglang_venv_base_env), the CUDA toolkit's bin (cuda_home, provision's
    fact), the extra folders, then SYSTEM_PATH; without duplicates. "" for the simulator (it
    runs the host's python3 and compiles nothing: the supervisor's default PATH stays)."""
    if role_facts(engine)["simulated"]:
        return ""
    parts = [env_bin(venv_dir)]
    if engine_of(engine).venv_over_base_env:
        parts.append(env_bin(base_env))
    if cuda_home:
        parts.append(cuda_home.rstrip("/") + "/bin")
    parts += [str(p) for p in (extra or [])]
    parts += SYSTEM_PATH.split(":")
    seen = []
    for p in parts:
        if p and p not in seen:
            seen.append(p)
    return ":".join(seen)


# Run by the engine's python as the service user with the unit's environment: what it finds is
# what the engine's JIT finds. Standard library only, and flashinfer is located, not imported
# (importing it imports torch and needs a GPU).
PROBE = r"""
import importlib.util, json, os, shutil
path = os.environ.get("PATH", "")
cuda_home = os.environ.get("CUDA_HOME", "")
nvcc = shutil.which("nvcc", path=path)
if not nvcc and cuda_home and os.access(os.path.join(cuda_home, "bin", "nvcc"), os.X_OK):
    nvcc = os.path.join(cuda_home, "bin", "nvcc")
cxx = os.environ.get("CXX") or ""
cxx = shutil.which(cxx, path=path) if cxx else (shutil.which("c++", path=path) or shutil.which("g++", path=path))
out = {"nvcc": nvcc, "ninja": shutil.which("ninja", path=path), "c++": cxx, "flashinfer": None}
try:
    spec = importlib.util.find_spec("flashinfer")
except (ImportError, ValueError):
    spec = None
if spec is not None and spec.submodule_search_locations:
    data = os.path.join(list(spec.submodule_search_locations)[0], "data")
    out["flashinfer"] = {"data": data, "readable": os.path.isdir(data) and os.access(data, os.R_OK | os.X_OK)}
print(json.dumps(out))
"""


def jit_needs(engine: str | None) -> list[str]:
    """What the engine's JIT builds run (engines.py: an engine's jit_tools; none for the simulator)."""
    return list(role_facts(engine)["jit_tools"])


def run_python(python: str, args, env: dict, user: str | None = None, timeout: float = 120):
    """Run `python ARGS` with exactly `env` (plus HOME, and PATH when unset), as `user` when this process
    is root: what the service user's unit would see. Returns (CompletedProcess, the user it ran as)."""
    env = {str(k): str(v) for k, v in (env or {}).items()}
    kwargs = {}
    as_user = None
    if user and os.geteuid() == 0:
        try:
            pw = pwd.getpwnam(user)
        except KeyError:
            pw = None
        if pw is not None:
            as_user = user
            gids = sorted(set(os.getgrouplist(user, pw.pw_gid)))
            kwargs = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": gids}
            env.setdefault("HOME", pw.pw_dir)
    env.setdefault("HOME", os.environ.get("HOME", "/"))
    env.setdefault("PATH", SYSTEM_PATH)
    proc = subprocess.run(
        [python, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd="/",
        check=False,
        **kwargs,
    )
    return proc, as_user or pwd.getpwuid(os.geteuid()).pw_name


def probe(python: str, env: dict, user: str | None = None, timeout: float = 120) -> dict:
    """Run PROBE with `python` and exactly `env` (plus HOME), as `user` when this process is root."""
    proc, as_user = run_python(python, ["-c", PROBE], env, user, timeout)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"{python} could not run the JIT probe (exit {proc.returncode}): {tail[0]}")
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    found["as_user"] = as_user
    return found


def missing(found: dict, needs, path: str) -> list[str]:
    """One message per piece of `needs` that `found` (probe's result) lacks, each with its fix."""
    msgs = []
    for need in needs:
        if need == "flashinfer data":
            fi = found.get("flashinfer")
            if fi and not fi.get("readable"):
                msgs.append(
                    f"flashinfer's data/ folder ({fi['data']}) is missing or unreadable: {_FIX[need]}"
                )
        elif not found.get(need):
            what = "a C++ compiler (c++, g++ or $CXX)" if need == "c++" else need
            msgs.append(f"{what} not found on the unit's PATH ({path}): {_FIX[need]}")
    return msgs
