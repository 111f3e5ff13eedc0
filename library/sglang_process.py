#!/usr/bin/python
# Copyright: sglang-layouts contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_process
short_description: Run one SGLang layout under a plain process supervisor
description:
  - For hosts where systemd is not PID 1 (GPU containers, CI, a laptop running the
    simulated engine). The engine runs in its own process group under a small wrapper
    that records its exit status; a pidfile, a log file and a spec file live in I(run_dir).
  - C(started) is idempotent. It changes nothing when the same command, environment, cwd
    and user already run, and restarts the process when any of them changed.
  - Stopping sends SIGTERM to the whole process group, then SIGKILL after I(stop_timeout).
    It then waits until no live process of the group is left.
  - When the module runs as root and I(user) is set, the engine runs as that user.
options:
  name:
    description:
      - Process name, normally the layout's unit name.
      - With I(state=stopped) or I(state=absent), a list of names is stopped in one run, one after
        the other (a loop would start the module once per name).
    type: list
    elements: str
    required: true
  state:
    description:
      - C(started), C(restarted) (a running process is replaced even when its command is the same,
        as after a change of the files it reads), C(stopped), or C(absent), which is stopped plus
        its pid, spec and exit files removed.
    type: str
    choices: [started, restarted, stopped, absent]
    default: started
  run_dir:
    description: Directory for the pidfile, log, spec and exit files.
    type: path
    required: true
  argv:
    description:
      - The command. A literal C(${SGLANG_API_KEY}) argument is replaced by I(api_key) at exec time.
      - Required when I(state=started) or I(state=restarted).
    type: list
    elements: str
  env:
    description: Extra environment of the engine.
    type: dict
    default: {}
  cwd:
    description: Working directory of the engine.
    type: path
  user:
    description: Run the engine as this user. Only applies when the module runs as root.
    type: str
  group:
    description: Group to run the engine as, together with I(user).
    type: str
  secret_env:
    description:
      - Secret variables of the engine (sglang_secret_env). They reach the engine through the wrapper's
        environment only, never the spec file, and are masked as *** in the log.
    type: dict
    default: {}
  api_key:
    description:
      - The server's API key, passed in the wrapper's environment. A literal C(${SGLANG_API_KEY_CONFIG}) argument
        becomes a 0600 SGLang --config file holding it (removed when the engine exits), so the key stays off argv.
    type: str
  stop_timeout:
    description: Seconds between SIGTERM and SIGKILL of the group.
    type: float
    default: 30
  conflicts:
    description:
      - With I(state=started) or I(state=restarted), processes stopped before this one starts, in the same
        run (what C(Conflicts=) does under systemd), such as the layouts that share its GPUs.
      - They are reported under RV(stopped); a name that does not run is left as it is.
    type: list
    elements: str
    default: []
extends_documentation_fragment: ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: In check mode nothing is started, stopped or removed; changed (and restarted) say what would be.
  diff_mode:
    support: none
    details: It starts and stops processes; it changes no file it could show a diff of.
  platform:
    support: full
    platforms: posix
    details: The supervisor finds the processes of a group in /proc, so it needs Linux.
author: sglang-layouts maintainers (@sglang-layouts)
"""

EXAMPLES = r"""
- name: Run the layout's engine
  ansible.legacy.sglang_process:
    name: sglang-kimi-k2-6-ep8.service
    run_dir: /var/lib/sglang/run
    argv: [python3, -m, sglang_sim, --model-path, /models/Kimi-K2.6, --tp-size, "8", --ep-size, "8"]
    env: {PYTHONPATH: /opt/sglang/sim}

- name: Stop it (SIGTERM, then SIGKILL of the group after 30 s)
  ansible.legacy.sglang_process:
    name: sglang-kimi-k2-6-ep8.service
    run_dir: /var/lib/sglang/run
    state: stopped
- name: Stop the layouts that share its GPUs, in one run
  ansible.legacy.sglang_process:
    name: [sglang-kimi-k2-6-tp8.service, sglang-kimi-k2-6-pp8.service]
    run_dir: /var/lib/sglang/run
    state: stopped
"""

RETURN = r"""
units:
  description: One result per name (the fields below, and C(name) and C(changed)), in the order given.
  returned: always
  type: list
  elements: dict
pid:
  description: Process group id (the wrapper's pid) when running, else null.
  returned: when one name is given
  type: int
log:
  description: The log file.
  returned: when one name is given
  type: str
log_offset:
  description: Size of the log before this start. The readiness gate reads the log from here.
  returned: when one name is given
  type: int
started_at:
  description: Epoch seconds of the current process's start.
  returned: when running
  type: float
restarted:
  description: Whether a running process was replaced (its command changed, or state=restarted).
  returned: when state=started or restarted and changed
  type: bool
stop:
  description: How the stop went (signal used, seconds waited).
  returned: when a process was stopped
  type: dict
stopped:
  description: One result per name of O(conflicts) (as in RV(units)), stopped before the start.
  returned: always
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_layouts.serve import supervisor


def main():
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "list", "elements": "str", "required": True},
            "state": {
                "type": "str",
                "choices": ["started", "restarted", "stopped", "absent"],
                "default": "started",
            },
            "run_dir": {"type": "path", "required": True},
            "argv": {"type": "list", "elements": "str"},
            "env": {"type": "dict", "default": {}},
            "cwd": {"type": "path"},
            "user": {"type": "str"},
            "group": {"type": "str"},
            "api_key": {"type": "str", "no_log": True},
            "secret_env": {"type": "dict", "default": {}, "no_log": True},
            "stop_timeout": {"type": "float", "default": 30},
            "conflicts": {"type": "list", "elements": "str", "default": []},
        },
        required_if=[("state", "started", ["argv"]), ("state", "restarted", ["argv"])],
        supports_check_mode=True,
    )
    p = module.params
    names = p["name"]
    if p["state"] in ("started", "restarted") and len(names) != 1:
        module.fail_json(msg=f"state={p['state']} takes one name, got {len(names)}: {', '.join(names)}")
    common = dict(
        argv=p["argv"],
        env={k: str(v) for k, v in (p["env"] or {}).items()},
        cwd=p["cwd"],
        user=p["user"],
        group=p["group"],
        api_key=p["api_key"],
        secret_env={k: str(v) for k, v in (p["secret_env"] or {}).items()},
        stop_timeout=p["stop_timeout"],
        check_mode=module.check_mode,
    )
    stopped = []
    if p["state"] in ("started", "restarted"):
        for name in p["conflicts"]:
            try:
                stopped.append(supervisor.ensure("stopped", p["run_dir"], name, **common))
            except (supervisor.SupervisorError, OSError) as exc:
                module.fail_json(msg=f"{name} (a conflicting process): {exc}", stopped=stopped)
    units = []
    for name in names:
        try:
            units.append(supervisor.ensure(p["state"], p["run_dir"], name, **common))
        except (supervisor.SupervisorError, OSError) as exc:
            module.fail_json(msg=f"{name}: {exc}", units=units)
    result = dict(units[0]) if len(units) == 1 else {}
    result.update(changed=any(u["changed"] for u in units + stopped), units=units, stopped=stopped)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
