"""A plain process supervisor for hosts where systemd is not PID 1.

The engine runs under a tiny wrapper (WRAPPER below, run as `python3 -c`):
the wrapper is a session leader, so the engine and every process it forks
share one process group whose id is the wrapper's pid (the pidfile holds it).
The wrapper waits for the engine and writes its exit status to `<name>.exit`.
Stop = SIGTERM to the whole group, then SIGKILL of the group after a timeout,
then wait until no live process of the group is left.

Files in `run_dir` for a process called NAME (the layout's unit name):
  NAME.pid   the process group id (= the wrapper's pid)
  NAME.log   the engine's stdout+stderr, appended across starts
  NAME.json  what was started (argv, env, cwd, user) and when: decides idempotence
  NAME.exit  the last exit status, written by the wrapper (or by stop after SIGKILL)
  NAME.stop  present when the last exit was asked for by stop()

Secrets never reach these files: an API key and the secret variables
(sglang_secret_env) travel in the wrapper's environment only (readable by
its owner). `${SGLANG_API_KEY_CONFIG}` in argv becomes a 0600 SGLang --config
YAML file holding the key (removed when the engine exits), so the key is not
on the engine's command line; `${SGLANG_API_KEY}` is still substituted for
engines without --config. Every secret value is masked as *** in NAME.log.

Standard library only; used by library/sglang_process.py, sglang_health and
benchmarks/bench_health.py.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import time

from ..engines import SGLANG
from ..fileio import write_atomic
from ..gate.logclass import STOP_MARKER
from ..secrets import KEY_CONFIG_PLACEHOLDER, KEY_PLACEHOLDER

SECRET_ENV = "SGLANG_API_KEY"

# Run as: python3 -c WRAPPER <spec.json>. Keep it self-contained (no imports from here).
WRAPPER = r"""
import json, os, signal, subprocess, sys, time
spec_path = sys.argv[1]
spec = json.load(open(spec_path))
os.setsid() if os.getpgrp() != os.getpid() else None
signal.signal(signal.SIGTERM, lambda *a: None)   # the group gets SIGTERM; the engine decides
signal.signal(signal.SIGHUP, signal.SIG_IGN)
env = dict(spec["env"])
secret = os.environ.get("SGLANG_API_KEY")
# secret variables travel in this wrapper's environment (readable by its owner only), never in spec
names = [n for n in os.environ.get("SGLANG_SUPERVISE_SECRET_NAMES", "").split(",") if n]
for n in names:
    env[n] = os.environ.get(n, "")
masked = sorted({v for v in [secret] + [env[n] for n in names] if v}, key=len, reverse=True)
kw = {}
if spec.get("user") and os.geteuid() == 0:
    kw = {"user": spec["user"], "group": spec.get("group") or None, "extra_groups": spec.get("extra_groups") or []}
keyfile = None
if secret and @KEY_CONFIG_PLACEHOLDER@ in spec["argv"]:
    # SGLang's --config YAML file keeps the key off the command line (/proc/PID/cmdline is world-readable)
    keyfile = spec["exit"][: -len(".exit")] + ".key.yaml"
    if os.path.exists(keyfile):
        os.unlink(keyfile)
    fd = os.open(keyfile, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    if kw:
        import pwd
        os.fchown(fd, pwd.getpwnam(spec["user"]).pw_uid, -1)
    os.write(fd, json.dumps({@CONFIG_KEY@: secret}).encode() + b"\n")
    os.close(fd)
argv = [a.replace(@KEY_CONFIG_PLACEHOLDER@, keyfile or "").replace(@KEY_PLACEHOLDER@, secret or "")
        for a in spec["argv"]]
log = open(spec["log"], "ab", buffering=0)
env.pop("SGLANG_API_KEY", None)   # the key reaches the engine through --config (or --api-key) only
try:
    child = subprocess.Popen(argv, env=env, cwd=spec.get("cwd") or None, stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE if masked else log, stderr=subprocess.STDOUT, **kw)
except OSError as exc:
    log.write(("sglang-supervise: cannot start %s: %s\n" % (argv[0], exc)).encode())
    rc = 203
else:
    if masked:   # SGLang logs server_args (api_key included): mask every secret in the log
        for line in iter(child.stdout.readline, b""):
            for v in masked:
                line = line.replace(v.encode(), b"***")
            log.write(line)
    while True:
        try:
            rc = child.wait()
            break
        except InterruptedError:
            continue
status = {"exit_code": rc if rc >= 0 else None, "signal": -rc if rc < 0 else None, "at": time.time(),
          "pid": getattr(locals().get("child"), "pid", None)}
tmp = spec["exit"] + ".tmp"
with open(tmp, "w") as f:
    json.dump(status, f)
os.replace(tmp, spec["exit"])
if keyfile and os.path.exists(keyfile):
    os.unlink(keyfile)
"""
# The spellings the wrapper needs come from their one place: SGLang's --config key for the API key
# (engines.py) and the argv placeholders the role writes (secrets.py).
for _name, _value in (
    ("@CONFIG_KEY@", SGLANG.api_key_config_key),
    ("@KEY_CONFIG_PLACEHOLDER@", KEY_CONFIG_PLACEHOLDER),
    ("@KEY_PLACEHOLDER@", KEY_PLACEHOLDER),
):
    WRAPPER = WRAPPER.replace(_name, json.dumps(_value))


class SupervisorError(RuntimeError):
    pass


def paths(run_dir: str, name: str) -> dict:
    base = os.path.join(run_dir, name)
    return {
        "pid": base + ".pid",
        "log": base + ".log",
        "spec": base + ".json",
        "exit": base + ".exit",
        "stop": base + ".stop",
    }


def digest(argv, env, cwd=None, user=None, api_key_set=False, secret_env=None) -> str:
    """What decides 'unchanged': the command, its environment, cwd, user, whether a key is set,
    and a hash of the secret variables (a new token restarts the engine; the hash reveals nothing)."""
    secrets = hashlib.sha256(json.dumps(sorted((secret_env or {}).items())).encode()).hexdigest()
    blob = json.dumps(
        {
            "argv": list(argv),
            "env": dict(sorted((env or {}).items())),
            "cwd": cwd,
            "user": user,
            "key": bool(api_key_set),
            **({"secrets": secrets} if secret_env else {}),
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def _read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _write_json(path, data, mode=0o600):
    write_atomic(path, json.dumps(data, indent=1, sort_keys=True), mode=mode)


def read_pid(run_dir: str, name: str) -> int | None:
    try:
        with open(paths(run_dir, name)["pid"]) as f:
            return int(f.read().strip() or 0) or None
    except (OSError, ValueError):
        return None


def _stat(pid: int):
    """(state, ppid, pgrp) of a pid from /proc, or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except OSError:
        return None
    rest = data.rsplit(")", 1)[1].split()
    return rest[0], int(rest[1]), int(rest[2])


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is pgid."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        st = _stat(int(entry))
        if st and st[2] == pgid and st[0] != "Z":
            out.append(int(entry))
    return sorted(out)


def _is_ours(pid: int, run_dir: str, name: str) -> bool:
    """The pid is our wrapper for this name (guards against pid reuse)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().split(b"\0")
    except OSError:
        return False
    return paths(run_dir, name)["spec"].encode() in cmd


def status(run_dir: str, name: str) -> dict:
    """{running, pid, members, spec, exit, log, log_size}."""
    p = paths(run_dir, name)
    pid = read_pid(run_dir, name)
    members = group_members(pid) if pid else []
    running = bool(pid) and bool(members) and (_is_ours(pid, run_dir, name) or pid not in members)
    try:
        log_size = os.path.getsize(p["log"])
    except OSError:
        log_size = 0
    return {
        "name": name,
        "running": running,
        "pid": pid if running else None,
        "members": members if running else [],
        "spec": _read_json(p["spec"]),
        "exit": _read_json(p["exit"]),
        "log": p["log"],
        "log_size": log_size,
    }


def start(
    run_dir: str,
    name: str,
    argv,
    env=None,
    cwd=None,
    user=None,
    group=None,
    api_key=None,
    python=None,
    secret_env=None,
) -> dict:
    """Start the engine under the wrapper; returns status() plus log_offset (the log's size before)."""
    # pid, spec and logs; read by the gate as any user (the unit's own files stay its user's)
    os.makedirs(run_dir, mode=0o755, exist_ok=True)
    p = paths(run_dir, name)
    base_env = {
        "PATH": os.environ.get("PATH") or "/usr/local/bin:/usr/bin:/bin",
        "LANG": os.environ.get("LANG", "C.UTF-8"),
    }
    home = None
    if user and os.geteuid() == 0:
        import pwd

        try:
            home = pwd.getpwnam(user).pw_dir
        except KeyError as exc:
            raise SupervisorError(f"user {user!r} does not exist on this host") from exc
    base_env["HOME"] = home or os.environ.get("HOME", "/")
    full_env = {**base_env, **{str(k): str(v) for k, v in (env or {}).items()}}
    full_env.pop(SECRET_ENV, None)
    secret_env = {str(k): str(v) for k, v in (secret_env or {}).items() if str(k) != SECRET_ENV}
    for k in secret_env:
        full_env.pop(k, None)
    spec = {
        "name": name,
        "argv": [str(a) for a in argv],
        "env": full_env,
        "cwd": cwd,
        "user": user,
        "group": group,
        "log": p["log"],
        "exit": p["exit"],
        "digest": digest(argv, env, cwd, user, bool(api_key), secret_env),
        "started_at": time.time(),
    }
    try:
        log_offset = os.path.getsize(p["log"])
    except OSError:
        log_offset = 0
    # The log must exist (and be ours) before the engine writes to it.
    fd = os.open(p["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
    os.close(fd)
    for stale in (p["exit"], p["stop"]):
        if os.path.exists(stale):
            os.unlink(stale)
    _write_json(p["spec"], spec)
    wenv = dict(os.environ)
    wenv.pop(SECRET_ENV, None)
    if api_key:
        wenv[SECRET_ENV] = api_key
    wenv.pop("SGLANG_SUPERVISE_SECRET_NAMES", None)
    if secret_env:
        wenv.update(secret_env)
        wenv["SGLANG_SUPERVISE_SECRET_NAMES"] = ",".join(sorted(secret_env))
    with open(os.devnull, "rb") as devnull, open(p["log"], "ab") as log:
        proc = subprocess.Popen(
            [python or sys.executable, "-c", WRAPPER, p["spec"]],
            stdin=devnull,
            stdout=log,
            stderr=log,
            close_fds=True,
            start_new_session=True,
            env=wenv,
            cwd="/",
        )
    write_atomic(p["pid"], f"{proc.pid}\n")
    # The Popen object is dropped on purpose: the wrapper outlives this process.
    proc.returncode = 0
    st = status(run_dir, name)
    st["log_offset"] = log_offset
    st["pid"] = proc.pid
    return st


def _wait_empty(pgid: int, timeout: float, poll: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if not group_members(pgid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll)


def stop(run_dir: str, name: str, timeout: float = 30.0, kill_timeout: float = 10.0) -> dict:
    """SIGTERM the group, SIGKILL it after `timeout`; returns {changed, signal, waited_s}."""
    st = status(run_dir, name)
    p = paths(run_dir, name)
    if not st["running"]:
        if os.path.exists(p["pid"]):
            os.unlink(p["pid"])
        return {"changed": False, "signal": None, "waited_s": 0.0}
    pgid = st["pid"]
    t0 = time.monotonic()
    used = "SIGTERM"
    # Say in the engine's log, and beside it, that this stop was asked for: the gate and the
    # classifier then read SGLang's stop cascade (a child "crashed with exit code -15", SIGQUIT,
    # exit 137) as the end of a stop, not as a failure.
    _write_json(p["stop"], {"at": time.time()})
    with contextlib.suppress(OSError), open(p["log"], "a") as log:
        log.write(f"{STOP_MARKER} (SIGTERM to process group {pgid})\n")
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    if not _wait_empty(pgid, timeout):
        used = "SIGKILL"
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        if not _wait_empty(pgid, kill_timeout):
            raise SupervisorError(f"{name}: processes {group_members(pgid)} survive SIGKILL of group {pgid}")
        if not os.path.exists(p["exit"]):
            _write_json(
                p["exit"], {"exit_code": None, "signal": 9, "at": time.time(), "stopped_by": "supervisor"}
            )
    if os.path.exists(p["pid"]):
        os.unlink(p["pid"])
    return {"changed": True, "signal": used, "waited_s": round(time.monotonic() - t0, 3)}


def ensure(
    state: str,
    run_dir: str,
    name: str,
    argv=None,
    env=None,
    cwd=None,
    user=None,
    group=None,
    api_key=None,
    stop_timeout: float = 30.0,
    check_mode: bool = False,
    python=None,
    secret_env=None,
) -> dict:
    """Idempotent entry point: state started | restarted | stopped | absent. Returns a module-ready dict.

    restarted replaces a running process even when its command is the same (the files it reads changed)."""
    st = status(run_dir, name)
    res = {
        "name": name,
        "state": state,
        "changed": False,
        "pid": st["pid"],
        "log": st["log"],
        "log_offset": st["log_size"],
    }
    if state in ("started", "restarted"):
        want = digest(argv or [], env, cwd, user, bool(api_key), secret_env)
        have = (st["spec"] or {}).get("digest")
        if st["running"] and have == want and state == "started":
            res["started_at"] = (st["spec"] or {}).get("started_at")
            return res
        res["changed"] = True
        res["restarted"] = bool(st["running"])
        if check_mode:
            return res
        if st["running"]:
            res["stop"] = stop(run_dir, name, stop_timeout)
        new = start(run_dir, name, argv, env, cwd, user, group, api_key, python, secret_env)
        res.update(
            pid=new["pid"], log_offset=new["log_offset"], started_at=(new["spec"] or {}).get("started_at")
        )
        return res
    if state in ("stopped", "absent"):
        stale = paths(run_dir, name)["pid"]
        if not st["running"] and os.path.exists(stale) and not check_mode:
            os.unlink(stale)  # the process died on its own: a stale pidfile is not a change
        if st["running"]:
            res["changed"] = True
            if not check_mode:
                res["stop"] = stop(run_dir, name, stop_timeout)
            res["pid"] = None
        if state == "absent":
            p = paths(run_dir, name)
            present = [f for f in (p["pid"], p["spec"], p["exit"]) if os.path.exists(f)]
            if present:
                res["changed"] = True
                if not check_mode:
                    for f in present:
                        os.unlink(f)
        return res
    raise SupervisorError(f"unknown state {state!r}")
