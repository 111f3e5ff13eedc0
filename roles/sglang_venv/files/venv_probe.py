"""Read-only probes of the sglang_venv role, printed as JSON. Standard library only.

  venv_probe.py describe             run by a base env's python: where its packages live and
                                     which interpreter a venv over it must be made from
  venv_probe.py missing STEPS_JSON   run by the venv's python: per pip step, the pins not
                                     installed (the role runs pip only for those steps)
  venv_probe.py provides SPEC_JSON   run by the venv's python: where each distribution the
                                     base env must supply resolves from, and whether the venv
                                     holds a copy of its own

Why `describe` exists: `python -m venv --system-site-packages` run by a python that is itself
a venv exposes the *base* interpreter's site-packages, not that venv's, so its torch would not
be visible. The role instead makes the venv with the base interpreter and lists these folders
in a .pth file of the new venv.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import os
import re
import site
import sys
import sysconfig

_SEP = re.compile(r"[-_.]+")


def canonical_name(name: str) -> str:
    return _SEP.sub("-", name).lower()


def base_interpreter() -> str:
    """The interpreter this environment was made from (itself outside a venv)."""
    if sys.prefix == sys.base_prefix:
        return sys.executable
    # The base prefix's own pythonX.Y first: _base_executable may name a python3 symlink.
    exact = os.path.join(sys.base_prefix, "bin", f"python{sys.version_info[0]}.{sys.version_info[1]}")
    if os.access(exact, os.X_OK):
        return exact
    return getattr(sys, "_base_executable", None) or exact


def site_dirs() -> list[str]:
    """This environment's package folders: purelib, platlib and site's list (a venv made with
    --system-site-packages, or a distribution's dist-packages, has more than one)."""
    found = []
    paths = sysconfig.get_paths()
    for d in [paths["purelib"], paths["platlib"], *site.getsitepackages()]:
        d = os.path.realpath(d)
        if os.path.isdir(d) and d not in found:
            found.append(d)
    return found


def describe() -> dict:
    return {
        "python": sys.executable,
        "version": f"{sys.version_info[0]}.{sys.version_info[1]}",
        "prefix": sys.prefix,
        "is_venv": sys.prefix != sys.base_prefix,
        "base_python": base_interpreter(),
        "site_dirs": site_dirs(),
    }


def _installed() -> dict[str, str]:
    """Canonical name -> version of every distribution on sys.path (what pip sees), first wins."""
    out: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            out.setdefault(canonical_name(name), dist.version)
    return out


def _satisfied(pin: str, installed: dict[str, str]) -> bool:
    """True when `pin` holds. Exact pins (name==version, what the role writes) are compared by
    canonical version where pip's packaging is importable, by string otherwise; any other
    specifier counts as not satisfied, so pip decides."""
    m = re.match(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(.*)$", pin)
    if not m:
        return False
    name, spec = canonical_name(m.group(1)), m.group(2).strip()
    if name not in installed:
        return False
    if not spec:
        return True
    if not spec.startswith("==") or "," in spec:
        return False
    want = spec[2:].strip()
    have = installed[name]
    try:
        from pip._vendor.packaging.version import Version

        return Version(want) == Version(have)
    except Exception:
        return want == have


def missing(steps: list[list[str]]) -> dict:
    installed = _installed()
    return {"missing": [[p for p in step if not _satisfied(p, installed)] for step in steps]}


def _top_module(dist) -> str:
    """The module to import for a distribution: its own name where top_level.txt lists it
    (torch lists functorch, torch, torchgen), else the first entry, else the name itself."""
    guess = canonical_name(dist.metadata["Name"]).replace("-", "_")
    listed = [t.strip() for t in (dist.read_text("top_level.txt") or "").splitlines() if t.strip()]
    if not listed or guess in listed:
        return guess
    return listed[0]


def _under(path: str, dirs: list[str]) -> bool:
    path = os.path.realpath(path)
    return any(path == d or path.startswith(d.rstrip(os.sep) + os.sep) for d in dirs)


def provides(names: list[str], base_dirs: list[str], own_dirs: list[str]) -> dict:
    base_dirs = [os.path.realpath(d) for d in base_dirs]
    own_dirs = [os.path.realpath(d) for d in own_dirs]
    out = {}
    for name in names:
        entry = {"found": False, "from_base": False, "own_copy": [], "location": "", "module_file": ""}
        want = canonical_name(name)
        # A copy pip put into the venv itself, shadowed or not.
        for d in own_dirs:
            if os.path.isdir(d):
                for f in sorted(os.listdir(d)):
                    if (
                        f.endswith(".dist-info")
                        and canonical_name(f[: -len(".dist-info")].split("-")[0]) == want
                    ):
                        entry["own_copy"].append(os.path.join(d, f))
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = entry
            continue
        entry["found"] = True
        entry["version"] = dist.version
        entry["location"] = str(dist.locate_file(""))
        module = _top_module(dist)
        entry["module"] = module
        try:
            entry["module_file"] = getattr(importlib.import_module(module), "__file__", "") or ""
        except Exception as e:  # reported, the role fails with it
            entry["import_error"] = f"{type(e).__name__}: {e}"
        entry["from_base"] = _under(entry["location"], base_dirs) and (
            not entry["module_file"] or _under(entry["module_file"], base_dirs)
        )
        out[name] = entry
    return {"provides": out}


def main(argv: list[str]) -> int:
    if len(argv) >= 1 and argv[0] == "describe":
        result = describe()
    elif len(argv) == 2 and argv[0] == "missing":
        result = missing(json.loads(argv[1]))
    elif len(argv) == 2 and argv[0] == "provides":
        spec = json.loads(argv[1])
        own = site_dirs() if sys.prefix != sys.base_prefix else []
        result = provides(spec["names"], spec["base_dirs"], own)
    else:
        print(__doc__, file=sys.stderr)
        return 2
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
