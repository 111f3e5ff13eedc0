"""Read-only checks before anything on the host changes: the planner's verdict, the model path,
the ports, and whether the unprivileged engine user can read what it needs."""

from __future__ import annotations

import errno
import grp
import os
import pwd
import socket
import stat


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
) -> list[str]:
    """Read-only checks before anything on the host changes; returns the problems (empty = go).

    own_active: the layout's unit, or one that conflicts with it (and will be stopped), is running.
    read_as / read_paths: the unprivileged user the engine runs as must be able to read these
    (its code, the model's config, the run dir); ports: the layout's other listening ports.
    """
    problems = []
    if read_as:
        for path in read_paths or ():
            why = unreadable(read_as, path)
            if why:
                problems.append(why)
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
