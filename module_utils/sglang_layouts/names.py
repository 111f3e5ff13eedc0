"""What a layout name may be: one rule for the planner, the units, the stop path and the result store.

A layout name becomes a results file name (results/<run>/<host>/<name>.json), a unit name (slugged) and
a word in a unit's Description=, and `-e layout=<name>` selects it in stop.yml. So it is what the
result store accepts (letters, digits, '_', '-', '.', '@', '+', '=', at most 128 characters, starting
with a letter or digit), and it is none of the words the tools give a meaning of their own. '=' is
there for the search's generated names (auto-8x1x1-kv_cache_dtype=fp8_e4m3, plan/search.py): `-e
layout=<name>` splits at the first '=' only, and a unit name turns it into '-'.
Standard library only (and estimate/model.py's kind_of).
"""

from __future__ import annotations

import re

from .estimate.model import kind_of

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@+=-]{0,127}$")
NAME_RULE = (
    "letters, digits, '_', '-', '.', '@', '+', '=', starting with a letter or digit, at most 128 characters"
)
# Words a tool reads as something else: `-e layout=all` (stop.yml, the sweep) means every layout,
# `latest` is the results folder's link to the newest run.
RESERVED = {
    "all": "stop.yml -e layout=all means every layout",
    "latest": "results/latest names the newest run",
}


def layout_name_problem(name) -> str | None:
    """Why `name` cannot name a layout (a sentence without the name), or None. Values are not echoed
    whole: a name given by mistake may be anything, a secret included."""
    if isinstance(name, int | float) and not isinstance(name, bool):
        return f"must be text, not a number: quote it (name: '{name}')"
    if not isinstance(name, str):
        return f"must be text, not {kind_of(name)}"
    if name in RESERVED:
        return f"is reserved ({RESERVED[name]})"
    if len(name) > 128:
        return f"is {len(name)} characters long; at most 128"
    if not NAME.match(name):
        bad = sorted({c for c in name if not re.match(r"[A-Za-z0-9_.@+=-]", c)})
        if not bad:
            return f"must start with a letter or digit; use {NAME_RULE}"
        shown = " ".join(repr(c) for c in bad[:5])
        return f"has characters a results file or unit cannot carry ({shown}); use {NAME_RULE}"
    return None


def suggest(name: str) -> str:
    """A name that passes the rule, close to the one given."""
    out = re.sub(r"[^A-Za-z0-9_.@+=-]+", "-", str(name)).strip("-._@+=")[:128]
    if out in RESERVED:
        out = f"{out}-1"
    return out or "tp8"
