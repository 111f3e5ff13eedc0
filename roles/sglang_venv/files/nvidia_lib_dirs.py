"""Print, as JSON, the library folders of the NVIDIA pip wheels in this interpreter's site-packages.

Run with the venv's python by the sglang_venv role; the service role puts the result on
LD_LIBRARY_PATH. CUDA 13 wheels keep the runtime libraries in nvidia/cu13/lib (older CUDA 12
wheels in nvidia/cuda_runtime/lib, ...); cuDNN, NCCL, NVSHMEM, cuSPARSELt each in nvidia/<name>/lib.
"""

import glob
import json
import os
import site
import sys

FIRST = ("cu13", "cuda_runtime")  # the CUDA runtime before the libraries built on it


def package_dirs():
    """The venv's site-packages, then the other folders on sys.path: a venv built over a base
    env (sglang_venv_base_env) reaches the base env's torch and its nvidia-* wheels through a
    .pth file, which puts those folders on sys.path but not in site.getsitepackages()."""
    out = []
    for d in [*site.getsitepackages(), *sys.path]:
        if d and os.path.isdir(d) and d not in out:
            out.append(d)
    return out


def lib_dirs():
    found = []
    for sp in package_dirs():
        for lib in sorted(glob.glob(os.path.join(sp, "nvidia", "*", "lib"))):
            if glob.glob(os.path.join(lib, "*.so*")) and lib not in found:
                found.append(lib)
    return sorted(found, key=lambda d: (os.path.basename(os.path.dirname(d)) not in FIRST, d))


dirs = lib_dirs()
cu13 = [os.path.dirname(d) for d in dirs if os.path.basename(os.path.dirname(d)) == "cu13"]
json.dump(
    {
        "python": sys.executable,
        "python_version": ".".join(str(n) for n in sys.version_info[:3]),
        "lib_dirs": dirs,
        "ld_library_path": os.pathsep.join(dirs),
        "cuda_wheels_home": cu13[0] if cu13 else "",
    },
    sys.stdout,
)
