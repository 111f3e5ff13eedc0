"""Print the pinned SGLang's server flags as JSON, read from its real argparse parser.

Run by the oracle venv's python (`make flags`):

    .venv/sglang/bin/python ci/dump_sglang_flags.py > module_utils/sglang_layouts/data/sglang_flags.json

The parser is built exactly as `sglang.launch_server` builds it (`prepare_server_args`:
`argparse.ArgumentParser(prog="sglang serve")` + `ServerArgs.add_cli_args`). Output:

    {"sglang_version": "0.5.23",
     "flags": {"--tp-size": {"dest": "tp_size", "aliases": ["--tensor-parallel-size"],
                             "takes_value": true, "nargs": null, "choices": null}, ...}}

The key of each flag is its canonical spelling: the option string that matches the dest
(`--tp-size` for dest tp_size), else the first long option string. `aliases` are the other
option strings. `takes_value` is false for switches (store_true/store_false/store_const/count).
`nargs` is argparse's nargs (null for one value, "*", "+", "?" or a number). `choices` are
rendered as strings (what a command line carries), in the parser's order (sorted where SGLang
declares them as a set), or null. Keys are sorted so that a
regenerated file diffs cleanly. Nothing here depends on the machine (no device, no model).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys

SWITCH_ACTIONS = (
    argparse._StoreTrueAction,
    argparse._StoreFalseAction,
    argparse._StoreConstAction,
    argparse._AppendConstAction,
    argparse._CountAction,
)


def build_parser() -> argparse.ArgumentParser:
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return parser


def takes_value(action: argparse.Action) -> bool:
    if isinstance(action, SWITCH_ACTIONS):
        return False
    if isinstance(action, argparse.BooleanOptionalAction):
        return False
    return action.nargs != 0


def canonical(action: argparse.Action) -> str:
    longs = [s for s in action.option_strings if s.startswith("--")]
    want = "--" + action.dest.replace("_", "-")
    if want in longs:
        return want
    return (longs or action.option_strings)[0]


def describe(parser: argparse.ArgumentParser) -> dict[str, dict]:
    flags: dict[str, dict] = {}
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or not action.option_strings:
            continue
        key = canonical(action)
        if key in flags:
            raise SystemExit(f"dump_sglang_flags: two actions claim {key}")
        choices = None
        if action.choices is not None:
            choices = [str(c) for c in action.choices]
            if not isinstance(action.choices, (list, tuple, range, dict)):
                choices.sort()  # a set (e.g. --sampling-backend): no order to keep, keep the file stable
        flags[key] = {
            "dest": action.dest,
            "aliases": [s for s in action.option_strings if s != key],
            "takes_value": takes_value(action),
            "nargs": action.nargs if takes_value(action) else None,
            "choices": choices,
        }
    return dict(sorted(flags.items()))


def document() -> dict:
    return {
        "sglang_version": importlib.metadata.version("sglang"),
        "flags": describe(build_parser()),
    }


def main() -> int:
    json.dump(document(), sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
