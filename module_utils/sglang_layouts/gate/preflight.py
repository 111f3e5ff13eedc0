"""Read-only checks before anything on the host changes: the planner's verdict, the model path,
the ports, whether the unprivileged engine user can read what it needs, and whether the unit's
Python imports the modules its start will (a pd layout's transfer backend)."""

from __future__ import annotations

import errno
import grp
import os
import pwd
import socket
import stat
import subprocess

from ..serve.jit_toolchain import run_python

# imports every module given on the command line; on failure prints the module and the exception's
# last line (the one that says what is missing: a package, or a shared library its extension links)
_IMPORT_PROBE = """
import importlib, sys
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except BaseException as exc:
        print(name + "\t" + (type(exc).__name__ + ": " + str(exc)).splitlines()[0])
        sys.exit(3)
"""


def port_in_use(host: str, port: int) -> bool:
    """True when something listens on host:port (a bind test, as the server's own bind would fail)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return True
            raise
    return False


def _identity(user: str) -> tuple[int | None, set[int]]:
    """uid and every gid of a user; (None, set()) when it does not exist yet (only 'other' bits count)."""
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        return None, set()
    gids = {pw.pw_gid} | {g.gr_gid for g in grp.getgrall() if user in g.gr_mem}
    return pw.pw_uid, gids


def _may(st, uid, gids, bits: int) -> bool:
    """bits: 4 read, 1 search/execute; the owner, group or other class that applies, as the kernel picks it."""
    if uid == 0:
        return True
    if uid is not None and st.st_uid == uid:
        return (st.st_mode >> 6) & bits == bits
    if st.st_gid in gids:
        return (st.st_mode >> 3) & bits == bits
    return st.st_mode & bits == bits


def unreadable(user: str, path: str) -> str | None:
    """Why `user` cannot read `path` (a folder on the way it cannot enter, or the file itself), or None.
    A path that does not exist yet is judged by the folders above it (it will be created readable)."""
    uid, gids = _identity(user)
    path = os.path.abspath(path)
    parts = path.split(os.sep)
    for i in range(2, len(parts) + 1):
        here = os.sep.join(parts[:i]) or os.sep
        try:
            st = os.stat(here)
        except FileNotFoundError:
            return None
        last = i == len(parts)
        need = (4 | (1 if stat.S_ISDIR(st.st_mode) else 0)) if last else 1
        if not _may(st, uid, gids, need):
            try:
                owner = pwd.getpwuid(st.st_uid).pw_name
            except KeyError:
                owner = str(st.st_uid)
            try:
                group = grp.getgrgid(st.st_gid).gr_name
            except KeyError:
                group = str(st.st_gid)
            what = "read" if last else "enter"
            return (
                f"the engine runs as {user}, who cannot {what} {here} (mode {stat.S_IMODE(st.st_mode):04o} "
                f"{owner}:{group}), so it cannot read {path}. Fix: clone or copy the files into a folder {user} "
                f"can read (e.g. /opt or /srv), or `chmod o+x` each folder above {path}, or set "
                "sglang_run_dir / sglang_model.path to such a place"
            )
    return None


def import_problems(
    python: str, imports, env: dict, user: str | None = None, timeout: float = 120
) -> list[str]:
    """One problem per module of `imports` ({module, package, for}) that `python`, run with the unit's
    environment and as its user, cannot import, with the exception's line and the fix."""
    imports = [i for i in imports or () if i.get("module")]
    if not imports:
        return []
    if not os.access(python, os.X_OK):
        return [f"{python} does not exist or cannot run: build the engine's venv first (sglang_venv)"]
    names = [i["module"] for i in imports]
    # read-only: no bytecode written into the venv
    env = {**(env or {}), "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        proc, as_user = run_python(python, ["-c", _IMPORT_PROBE, *names], env, user, timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [f"{python} could not check the imports {', '.join(names)}: {exc}"]
    if proc.returncode == 0:
        return []
    lines = (proc.stdout or "").strip().splitlines()
    module, _tab, why = lines[-1].partition("\t") if lines else ("", "", "")
    if not why:
        tail = (proc.stderr or proc.stdout or "no output").strip().splitlines()[-1:]
        return [
            f"{python} could not check the imports {', '.join(names)} (exit {proc.returncode}): {tail[0]}"
        ]
    need = next((i for i in imports if i["module"] == module), imports[0])
    return [
        f"{need.get('for') or 'the engine'} needs the Python module {module} ({need.get('package') or module}), "
        f"which the unit's Python cannot import as {as_user}: {why}. Install {need.get('package') or module} "
        "into the engine's venv (sglang_venv_packages, or its wheel in the wheelhouse); a shared library it "
        "links that the host lacks goes on the layout's env: LD_LIBRARY_PATH"
    ]


def preflight(
    verdict: str,
    reasons,
    force: bool,
    model_path: str | None,
    host: str,
    port: int,
    own_active: bool,
    read_as: str | None = None,
    read_paths=(),
    ports=(),
    python: str | None = None,
    imports=(),
    env: dict | None = None,
) -> list[str]:
    """Read-only checks before anything on the host changes; returns the problems (empty = go).

    own_active: the layout's unit, or one that conflicts with it (and will be stopped), is running.
    read_as / read_paths: the unprivileged user the engine runs as must be able to read these
    (its code, the model's config, the run dir); ports: the layout's other listening ports;
    python / imports / env: modules the unit's Python must import with the unit's environment, as read_as.
    """
    problems = []
    if read_as:
        for path in read_paths or ():
            why = unreadable(read_as, path)
            if why:
                problems.append(why)
    if python and imports:
        problems += import_problems(python, imports, env or {}, read_as)
    if verdict in ("oom", "invalid") and not force:
        problems.append(
            f"the planner's verdict is {verdict}: "
            + " ".join(reasons or [])
            + " (override with -e sglang_force=true)"
        )
    if model_path and not os.path.exists(model_path):
        problems.append(f"the model path {model_path} does not exist on this host")
    for p in [port, *[int(x) for x in ports or () if int(x) != port]]:
        if port_in_use(host, p) and not own_active:
            problems.append(
                f"port {p} on {host} is in use by a process that is not one of our layout units: an engine "
                "started there would answer its warm-up with that server's replies and die minutes later. "
                "Stop that process or give the layout another port:"
            )
    return problems
