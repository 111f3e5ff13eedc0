"""Print the installed SGLang's server flags as JSON, read from its real argparse parser.

One table per SGLang release; the planner picks the one for the host's sglang_version.
`make flags [SGLANG_VERSION=0.5.16]` runs it in that release's CPU oracle venv. Any python
that imports sglang (a GPU host's venv) makes the same table; it needs only this folder:

    python ci/dump_sglang_flags.py > module_utils/sglang_layouts/data/sglang_flags/<version>.json

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
import contextlib
import importlib.metadata
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # also when loaded by file path
from argparse_flags import describe


def build_parser() -> argparse.ArgumentParser:
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return parser


def document() -> dict:
    return {
        "sglang_version": importlib.metadata.version("sglang"),
        "flags": describe(build_parser(), "dump_sglang_flags"),
    }


def main() -> int:
    # Whatever importing SGLang prints goes to stderr: stdout is the table and nothing else.
    with contextlib.redirect_stdout(sys.stderr):
        doc = document()
    json.dump(doc, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
