#!/usr/bin/python
# Copyright: sglang-layouts contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_health
short_description: Wait until an SGLang or vLLM server is really ready, or say why it died
description:
  - Polls the server. A closed port means loading, C(/health) 503 means warming, and 200 means
    ready. Readiness is confirmed by a one-token C(/generate). On success the module reads
    C(/server_info) (memory per rank, C(max_total_num_tokens)) and C(/model_info).
  - "With I(engine=vllm) readiness is C(/health) 200 (vLLM keeps its port closed while it starts) confirmed by a
    one-token C(/v1/completions) for the served model name from C(/v1/models). C(max_total_num_tokens) comes from
    vLLM's start-up line C(KV cache size: N tokens) and C(model_info) from C(/v1/models) (vLLM has no C(/server_info))."
  - Meanwhile it follows the engine's log from this start only, and polls the unit's or process's state.
    For systemd that log is the journal after I(journal_cursor); for the process supervisor it is
    the log file from I(log_offset). As soon as the process exits (with any status, 0 included) or a fatal line
    appears, the module fails with C(failure_class) (cuda_oom, kv_cache_no_memory, nccl_timeout, rank_died,
    jit_build_failed, gpu_unavailable, port_in_use, bad_args, import_error, model_not_found, crashed, ready_timeout)
    and C(evidence) (the line, the last 30 log lines, the exit status).
  - A traceback is read whole. Its header decides nothing; the verdict waits for its final exception (the next log
    record, the process's exit, or 0.5 s without a line), and the evidence line is the one that says what happened.
  - Changes nothing on the host.
options:
  mode:
    description:
      - C(wait) waits for readiness.
      - C(preflight) only checks, before anything on the host changes, that the layout may start.
        The planner's I(verdict) must not be oom or invalid unless I(force) is set. The port must be free or held by
        one of I(own_units). I(model_path) must exist. A refusal fails with C(failure_class=refused) and C(reasons).
      - C(alive) checks, without HTTP, that the engine still runs and logged no fatal line since the start
        (node ranks >= 1 of a multi-node layout, whose C(/health) proves nothing).
    type: str
    choices: [wait, preflight, alive]
    default: wait
  verdict:
    description: The planner's verdict for the layout (mode=preflight).
    type: str
    choices: [fits, oom, invalid]
    default: fits
  reasons:
    description: The planner's reasons, quoted in a refusal.
    type: list
    elements: str
    default: []
  force:
    description: Start even when the planner says oom or invalid.
    type: bool
    default: false
  read_as:
    description:
      - The unprivileged user the engine runs as (mode=preflight). Each of I(read_paths) must be readable by it,
        every folder above it included; a refusal names the folder and the fix.
    type: str
  read_paths:
    description: Paths the engine reads (its code, the model's config, the run dir); a path not created yet is judged by the folders above it.
    type: list
    elements: path
    default: []
  ports:
    description: Further ports of the layout that must be free (mode=preflight), besides the port of I(url).
    type: list
    elements: int
    default: []
  model_path:
    description: Must exist on the host (mode=preflight).
    type: path
  python:
    description:
      - The unit's Python (mode=preflight). With I(imports), each module must import when this Python runs with
        I(env) as I(read_as), as the unit's start will import it.
    type: path
  imports:
    description:
      - Modules the unit's start imports beyond the engine's own (the planner's unit key C(imports), such as a pd
        layout's transfer backend). A module that does not import refuses the layout with the exception's line and
        the package to install.
    type: list
    elements: dict
    default: []
    suboptions:
      module:
        description: The module's dotted name.
        type: str
        required: true
      package:
        description: The package that provides it (named in the fix).
        type: str
      for:
        description: What needs it (named in the refusal).
        type: str
  env:
    description: The unit's environment without its secrets (mode=preflight, with I(imports)).
    type: dict
    default: {}
  own_units:
    description: The layout's unit and the units it conflicts with. The port may be held by one of them that runs.
    type: list
    elements: str
    default: []
  engine:
    description:
      - The engine behind I(url). C(sim) answers like C(sglang).
      - Empty means C(vllm) when I(unit) starts with C(vllm-) (the planner's unit name of a vLLM layout), else C(sglang).
    type: str
    choices: [sglang, sim, vllm]
  url:
    description: Base URL of the server, for example C(http://127.0.0.1:30000).
    type: str
    required: true
  manager:
    description: How the engine runs, which decides where its log and state are read.
    type: str
    choices: [systemd, process]
    required: true
  unit:
    description: The systemd unit (manager=systemd), or the supervisor's process name (manager=process).
    type: str
    required: true
  journal_cursor:
    description: Follow the unit's journal after this cursor (taken before the start). Empty means the unit's whole journal.
    type: str
  invocation_id:
    description: Follow only this invocation of the unit, instead of using a cursor.
    type: str
  run_dir:
    description: The process supervisor's directory (manager=process).
    type: path
  log_offset:
    description: Read the supervisor's log file from this byte offset (its size at start).
    type: int
    default: 0
  timeout:
    description: Seconds to wait for readiness before failing with C(ready_timeout).
    type: float
    default: 1800
  poll:
    description: Seconds between polls.
    type: float
    default: 0.2
  grace:
    description:
      - Seconds a generic fatal line (a traceback, C(Scheduler hit an exception)) may stand while the process
        still runs and the server is not ready, before the gate fails with C(crashed).
      - SGLang kills itself right after such a line, so the process exit normally decides first.
    type: float
    default: 30
  confirm:
    description:
      - Confirm readiness with a one-token C(/generate), then read C(/server_info) and C(/model_info).
      - With I(engine=vllm), a one-token C(/v1/completions), then C(/v1/models) and C(/version).
    type: bool
    default: true
  api_key:
    description: The server's API key, for servers started with one. Never returned.
    type: str
  slice_s:
    description:
      - Return after this many seconds without a verdict, with C(pending=true), the start-up C(phase) reached
        and a C(resume) state; 0 waits for the verdict in one call.
      - The action plugin of the same name uses it to show the phase while it waits (loading weights,
        KV cache allocated, capturing CUDA graphs, JIT compiling kernels), so a cold start of several minutes
        is never silent. Playbooks set I(progress_every) on the action instead.
    type: float
    default: 0
  progress_every:
    description:
      - Seconds between progress lines of the action plugin C(sglang_health) (it runs this module in slices of
        that length and prints the phase between them); 0 = one silent call.
      - The module alone, without the action plugin, ignores it.
    type: float
    default: 15
  resume:
    description: The C(resume) state a pending call returned; the wait goes on from there (same log position and clock).
    type: dict
extends_documentation_fragment: ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: In check mode the module only reports what it would wait for.
  diff_mode:
    support: none
    details: It waits and reports (changed is always false); it changes nothing it could show a diff of.
  platform:
    support: full
    platforms: posix
author: sglang-layouts maintainers (@sglang-layouts)
"""

EXAMPLES = r"""
- name: Wait until the layout serves
  ansible.legacy.sglang_health:
    url: http://127.0.0.1:30000
    manager: systemd
    unit: sglang-kimi-k2-6-ep8.service
    journal_cursor: "{{ cursor.stdout }}"
    timeout: 2400
  register: health
"""

RETURN = r"""
ready_after_s:
  description: Seconds from the engine's start to readiness, as observed by this gate.
  returned: success
  type: float
waited_s:
  description: Seconds this module waited.
  returned: success
  type: float
engine:
  description: The engine the gate talked to (I(engine), or the one derived from I(unit)).
  returned: success
  type: str
max_total_num_tokens:
  description:
    - KV cache capacity in tokens (per scheduler) from C(/server_info).
    - "vLLM: from its start-up line C(KV cache size: N tokens) (the smallest over DP engine cores); null when
      the line was not seen."
  returned: success
  type: int
memory_per_rank:
  description: C(internal_states[].memory_usage) of C(/server_info) (weight, kvcache, graph in GB; token_capacity).
  returned: success
  type: list
  elements: dict
model_info:
  description: C(/model_info); for vLLM C(served_model_name), C(model_path), C(max_model_len) from C(/v1/models).
  returned: success
  type: dict
server_args:
  description: The resolved server arguments from C(/server_info), with secrets masked.
  returned: success
  type: dict
phases:
  description: Seconds from the start of the wait to each start-up phase the log announced.
  returned: success
  type: dict
  sample: {"loading weights": 38.2, "KV cache allocated": 41.0, "capturing CUDA graphs": 41.1, "ready": 79.8}
log_figures:
  description:
    - Start-up figures from the engine's log (SGLang), the largest over ranks - C(weights_gib) (C(Load weight end ...
      mem usage)), C(kv_tokens) (C(max_total_num_tokens=)), C(cuda_graph_gib), C(avail_gib_before_load).
  returned: success
  type: dict
pending:
  description: True when I(slice_s) ran out before a verdict (then C(phase) and C(resume) are returned).
  returned: when slice_s is set and no verdict was reached
  type: bool
failure_class:
  description:
    - Why the server is not ready, one of the classes above; C(hint) says what to check.
    - "C(jit_build_failed): a JIT kernel build failed or could not start its tool (C(FileNotFoundError) of ninja, nvcc,
      a compiler). Hint: nvcc and ninja on the service's PATH, CUDA_HOME, flashinfer's data/, writable JIT caches."
    - "C(gpu_unavailable): a rank's GPU index is past the GPUs the process sees (C(CUDA error: invalid device ordinal)).
      Hint: the layout asks for more GPUs than the host shows."
  returned: failure
  type: str
hint:
  description: What to check for this failure class.
  returned: failure
  type: str
evidence:
  description: C(line) (the fatal line or null), C(log_tail) (last 30 lines), C(exit_status).
  returned: failure
  type: dict
"""

import os
from urllib.parse import urlsplit

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_layouts import engines
from ansible.module_utils.sglang_layouts.gate.logs import FileFollower, JournalFollower
from ansible.module_utils.sglang_layouts.gate.preflight import preflight as host_preflight
from ansible.module_utils.sglang_layouts.gate.proc import process_state, systemd_state
from ansible.module_utils.sglang_layouts.gate.readiness import (
    HealthFailure,
    check_alive,
    engine_of,
    wait_ready,
)
from ansible.module_utils.sglang_layouts.serve import supervisor


def _own_active(module, units) -> bool:
    p = module.params
    for unit in units:
        if p["manager"] == "systemd":
            systemctl = module.get_bin_path("systemctl", required=True)
            rc, _out, _err = module.run_command([systemctl, "is-active", "--quiet", unit])
            if rc == 0:
                return True
        elif p["run_dir"] and supervisor.status(p["run_dir"], unit)["running"]:
            return True
    return False


def _fail(module, exc: HealthFailure, url: str):
    module.fail_json(
        msg=exc.msg,
        failure_class=exc.failure_class,
        evidence=exc.evidence,
        hint=exc.hint,
        unit=module.params["unit"],
        url=url,
    )


# the options of mode=wait that reach the gate (readiness.wait_ready) as they are
WAIT_OPTIONS = ("timeout", "poll", "grace", "api_key", "confirm", "resume")


def preflight(module, url):
    """Read-only: exits (ok) or fails with failure_class=refused."""
    p = module.params
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    port = parts.port or 80
    own = _own_active(module, [p["unit"], *p["own_units"]])
    imports = p["imports"]
    if imports and module.check_mode and not (p["python"] and os.access(p["python"], os.X_OK)):
        # check mode before provision built the venv: the imports are tried on the real run
        imports = []
    try:
        problems = host_preflight(
            p["verdict"],
            p["reasons"],
            p["force"],
            p["model_path"],
            host,
            port,
            own,
            read_as=p["read_as"],
            read_paths=p["read_paths"],
            ports=p["ports"],
            python=p["python"],
            imports=imports,
            env=p["env"],
        )
    except OSError as exc:
        problems = [f"cannot check port {port} on {host}: {exc}"]
    if problems:
        module.fail_json(
            msg="refused: " + " | ".join(problems),
            failure_class="refused",
            reasons=problems,
            evidence={"line": None, "log_tail": [], "exit_status": None},
            unit=p["unit"],
        )
    module.exit_json(
        changed=False, msg=f"{p['unit']}: preflight passed", forced=p["force"] and p["verdict"] != "fits"
    )


def main():
    module = AnsibleModule(
        argument_spec={
            "mode": {"type": "str", "choices": ["wait", "preflight", "alive"], "default": "wait"},
            "verdict": {"type": "str", "choices": ["fits", "oom", "invalid"], "default": "fits"},
            "reasons": {"type": "list", "elements": "str", "default": []},
            "force": {"type": "bool", "default": False},
            "model_path": {"type": "path"},
            "own_units": {"type": "list", "elements": "str", "default": []},
            "engine": {"type": "str", "choices": ["sglang", "sim", "vllm"]},
            "url": {"type": "str", "required": True},
            "manager": {"type": "str", "choices": ["systemd", "process"], "required": True},
            "unit": {"type": "str", "required": True},
            "journal_cursor": {"type": "str"},
            "invocation_id": {"type": "str"},
            "run_dir": {"type": "path"},
            "log_offset": {"type": "int", "default": 0},
            "timeout": {"type": "float", "default": 1800},
            "poll": {"type": "float", "default": 0.2},
            "grace": {"type": "float", "default": 30.0},
            "confirm": {"type": "bool", "default": True},
            "api_key": {"type": "str", "no_log": True},
            "slice_s": {"type": "float", "default": 0},
            "progress_every": {"type": "float", "default": 15},
            "resume": {"type": "dict"},
            "read_as": {"type": "str"},
            "read_paths": {"type": "list", "elements": "path", "default": []},
            "ports": {"type": "list", "elements": "int", "default": []},
            "python": {"type": "path"},
            "imports": {
                "type": "list",
                "elements": "dict",
                "default": [],
                "options": {
                    "module": {"type": "str", "required": True},
                    "package": {"type": "str"},
                    "for": {"type": "str"},
                },
            },
            "env": {"type": "dict", "default": {}},
        },
        required_if=[("manager", "process", ["run_dir"])],
        supports_check_mode=True,
    )
    p = module.params
    url = p["url"].rstrip("/")
    if p["mode"] == "preflight":
        preflight(module, url)
    engine = engine_of(p["engine"], p["unit"])
    source = f"journal of {p['unit']}" if p["manager"] == "systemd" else f"{p['run_dir']}/{p['unit']}.log"
    confirm = engines.engine(engine).confirm_route
    if module.check_mode:
        module.exit_json(
            changed=False,
            engine=engine,
            msg=f"would wait up to {p['timeout']:.0f} s for {url}/health = 200 and a one-token {confirm} ({engine}), following {source}",
        )
    if p["manager"] == "systemd":
        journalctl = module.get_bin_path("journalctl", required=True)
        systemctl = module.get_bin_path("systemctl", required=True)
        cursor = (p["journal_cursor"] or "").strip()
        for line in cursor.splitlines():  # the raw output of journalctl -n 0 --show-cursor
            if line.startswith("-- cursor:"):
                cursor = line[len("-- cursor:") :].strip()
                break
        if cursor.startswith("--"):  # "-- No entries --" and nothing else: an empty journal
            cursor = ""
        follower = JournalFollower(p["unit"], cursor or None, p["invocation_id"] or None, journalctl)

        def state_fn():
            return systemd_state(p["unit"], systemctl)

    else:
        follower = FileFollower(supervisor.paths(p["run_dir"], p["unit"])["log"], p["log_offset"])

        def state_fn():
            return process_state(p["run_dir"], p["unit"])

    if p["mode"] == "alive":
        try:
            check_alive(follower, state_fn, engine=engine)
        except HealthFailure as exc:
            _fail(module, exc, url)
        module.exit_json(changed=False, unit=p["unit"], msg=f"{p['unit']} runs and logged no fatal line")
    try:
        passed = {k: p[k] for k in WAIT_OPTIONS}
        facts = wait_ready(url, follower, state_fn, engine=engine, slice_s=p["slice_s"] or None, **passed)
    except HealthFailure as exc:
        _fail(module, exc, url)
    module.exit_json(changed=False, unit=p["unit"], **facts)


if __name__ == "__main__":
    main()
