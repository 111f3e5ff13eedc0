"""What the sglang_write_files task does, one function for its two faces.

The module (library/sglang_write_files.py) runs it where Ansible sends modules; the action plugin of
the same name runs it in the controller's worker when the task runs on the controller, where plan.yml
writes every host's plan and unit previews (delegated to localhost): a plan of many hosts then costs
no module process per host.
"""

from __future__ import annotations

import fnmatch
import os

from .fileio import write_atomic

ARGUMENT_SPEC = {
    "dest": {"type": "path", "required": True},
    "files": {"type": "dict", "required": True},
    "mode": {"type": "str", "default": "0644"},
    "dir_mode": {"type": "str", "default": "0755"},
    "prune_glob": {"type": "str"},
}


class WriteFilesError(ValueError):
    """A file name or mode the task refuses before anything is written."""


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        return None


def _mode(text: str, option: str) -> int:
    try:
        return int(str(text), 8)
    except ValueError:
        raise WriteFilesError(f"{option} must be an octal mode such as 0644, not {text!r}") from None


def run(params: dict, check_mode: bool = False, diff: bool = False) -> dict:
    """The task's result for validated `params` (ARGUMENT_SPEC); raises WriteFilesError or OSError."""
    dest = params["dest"]
    mode, dir_mode = _mode(params["mode"], "mode"), _mode(params["dir_mode"], "dir_mode")
    files = {}
    for name, content in params["files"].items():
        norm = os.path.normpath(name)
        if os.path.isabs(norm) or norm.startswith(".."):
            raise WriteFilesError(f"file name {name!r} must stay inside dest")
        files[norm] = "" if content is None else str(content)
    written, removed, diffs = [], [], []
    if not os.path.isdir(dest) and not check_mode:
        os.makedirs(dest, mode=dir_mode, exist_ok=True)
    for name, content in sorted(files.items()):
        path = os.path.join(dest, name)
        old = _read(path)
        if old == content:
            continue
        written.append(path)
        diffs.append({"before_header": path, "after_header": path, "before": old or "", "after": content})
        if not check_mode:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            write_atomic(path, content, mode=mode)
    prune = params.get("prune_glob")
    if prune and os.path.isdir(dest):
        for entry in sorted(os.listdir(dest)):
            if fnmatch.fnmatch(entry, prune) and entry not in files:
                path = os.path.join(dest, entry)
                removed.append(path)
                diffs.append(
                    {
                        "before_header": path,
                        "after_header": "(removed)",
                        "before": _read(path) or "",
                        "after": "",
                    }
                )
                if not check_mode:
                    os.unlink(path)
    changed = bool(written or removed)
    result = {"changed": changed, "written": written, "removed": removed}
    if diff and changed:
        result["diff"] = diffs
    return result


def task(params: dict, check_mode: bool = False, diff: bool = False) -> dict:
    """The task's answer for validated `params`, as both faces give it: run()'s, or its error as
    {failed, msg}."""
    try:
        return run(params, check_mode=check_mode, diff=diff)
    except WriteFilesError as exc:
        return {"failed": True, "msg": str(exc)}
    except OSError as exc:
        return {"failed": True, "msg": f"writing under {params['dest']}: {exc}"}
