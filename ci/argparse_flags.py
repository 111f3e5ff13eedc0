"""An engine's argparse parser as data: what the planner needs to validate a layout's args:.

Shared by ci/dump_sglang_flags.py and ci/dump_vllm_flags.py, each run by its engine's venv.
Each flag is keyed by its canonical spelling (the option string that matches the dest, else
the first long one); `aliases` are the other spellings, `takes_value` is false for switches,
`nargs` is argparse's, `choices` are strings (sorted when the engine declares a set, so a
regenerated file diffs cleanly), or null.
"""

from __future__ import annotations

import argparse

SWITCH_ACTIONS = (
    argparse._StoreTrueAction,
    argparse._StoreFalseAction,
    argparse._StoreConstAction,
    argparse._AppendConstAction,
    argparse._CountAction,
    argparse.BooleanOptionalAction,
)


def takes_value(action: argparse.Action) -> bool:
    if isinstance(action, SWITCH_ACTIONS):
        return False
    return action.nargs != 0


def canonical(action: argparse.Action) -> str:
    longs = [s for s in action.option_strings if s.startswith("--")]
    want = "--" + action.dest.replace("_", "-")
    if want in longs:
        return want
    return (longs or action.option_strings)[0]


def describe(parser: argparse.ArgumentParser, who: str) -> dict[str, dict]:
    flags: dict[str, dict] = {}
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or not action.option_strings:
            continue
        key = canonical(action)
        if key in flags:
            raise SystemExit(f"{who}: two actions claim {key}")
        choices = None
        if action.choices is not None:
            choices = [str(c) for c in action.choices]
            if not isinstance(action.choices, list | tuple | range | dict):
                choices.sort()  # a set: no order to keep
        value = takes_value(action)
        flags[key] = {
            "dest": action.dest,
            "aliases": [s for s in action.option_strings if s != key],
            "takes_value": value,
            "nargs": action.nargs if value else None,
            "choices": choices,
        }
    return dict(sorted(flags.items()))
