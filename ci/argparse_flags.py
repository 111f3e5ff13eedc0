"""An engine's argparse parser as data: what the planner needs to validate a layout's args:.

Shared by ci/dump_sglang_flags.py and ci/dump_vllm_flags.py, each run by its engine's venv.
Each flag is keyed by its canonical spelling (the option string that matches the dest, else
the first long one); `aliases` are the other spellings, `takes_value` is false for switches,
`nargs` is argparse's, `choices` are strings (sorted when the engine declares a set, so a
regenerated file diffs cleanly), or null. `deprecated` is null, or the spelling the engine says
to use instead (SGLang's Deprecated*Action carries it as `new_flag`; true where a deprecated
flag names none): the planner renders the current spelling, so the engine never warns.
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


def deprecation(action: argparse.Action) -> str | bool | None:
    """What the engine's parser says replaces a deprecated flag, True if it names nothing, else None."""
    if getattr(action, "new_flag", None):
        return str(action.new_flag)
    deprecated = getattr(action, "deprecated", False)  # argparse's own (Python 3.13+)
    if deprecated or type(action).__name__.startswith("Deprecated"):
        return True
    return None


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
            "deprecated": deprecation(action),
        }
    return dict(sorted(flags.items()))
