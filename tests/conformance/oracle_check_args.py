"""Have the pinned SGLang's own code judge command lines. Run by the ORACLE python, not pytest's.

    <oracle python> tests/conformance/oracle_check_args.py CASES.json RESULTS.json [FLAGS.json]

CASES.json: [{"id": str, "argv": [flags of sglang.launch_server, without the launcher]}, ...]
RESULTS.json: {"sglang_version": str, "import_s": float, "warm_up_s": float,
               "results": {id: {"verdict": "accepted" | "argparse_error" | "rejected",
                                "exit_code": int | None, "error_type": str | None,
                                "message": str, "resolved": {...} | None, "widths": {...} | None,
                                "deprecations": [str], "seconds": float}}}

FLAGS.json (optional): what ci/dump_sglang_flags.py prints, made in the same process (one
import of ServerArgs for both jobs).

Each argv goes through what `python -m sglang.launch_server` runs before it touches a GPU:
`prepare_server_args(argv + ["--device", "cpu"])` (argparse, then ServerArgs), `resolve_once()`
where the pinned SGLang has it (0.5.23 defers resolution to it), and `check_server_args()`.
`--device cpu` is the one addition: without it SGLang looks for an accelerator and raises
"No accelerator ... is available" on a CPU-only machine.

ServerArgs is imported once (about 5 s) and warmed up with the first case (its model dir copied
to a scratch dir, so the warm-up shares no cache entry with the cases; os.environ restored): that
imports what SGLang imports lazily (ModelConfig, quantization, ...; about 2 s). Every case then
runs in a forked child (tens of ms), so no case sees state a previous case left behind (env vars,
lru caches, logging set-up, the config objects SGLang's handlers mutate).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import time
import traceback
import types

RESOLVED_FIELDS = (
    "tp_size",
    "pp_size",
    "ep_size",
    "dp_size",
    "enable_dp_attention",
    "nnodes",
    "mem_fraction_static",
    "context_length",
    "max_running_requests",
    "attention_backend",
    "grammar_backend",
    "trust_remote_code",
    "host",
    "port",
    "api_key",
    "device",
    "attn_dp_size",
    "attn_cp_size",
    "moe_dp_size",
)


def _widths(args) -> dict | None:
    """SGLang's own derivation of the parallel widths and of every rank's place (0.5.23 has
    these as pure functions in sglang.srt.runtime_context; None where the pin lacks them).
    "rank_error" is what deriving the ranks raises (e.g. ZeroDivisionError when ep > tp), i.e.
    what the scheduler processes would hit at start, after the parser let the argv through."""
    try:
        from sglang.srt.runtime_context import (
            derive_spawn_ranks,
            launch_world_size_of,
            num_dp_ranks_of,
            parallel_widths_of,
        )
    except ImportError:
        return None
    out = {
        "world_size": launch_world_size_of(args),
        "num_dp_ranks": num_dp_ranks_of(args),
        "rank_error": None,
    }
    try:
        out.update(parallel_widths_of(args))
        for world_rank in range(out["world_size"]):
            derive_spawn_ranks(
                world_rank=world_rank,
                tp_size=args.tp_size,
                ep_join_rank_offset=args.ep_join_rank_offset,
                attn_cp_size=args.attn_cp_size,
                attn_tp_size=out["attn_tp_size"],
                moe_dp_size=args.moe_dp_size,
                moe_ep_size=out["moe_ep_size"],
            )
    except Exception as e:
        out["rank_error"] = f"{type(e).__name__}: {e}"
    return out


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class _Deprecations(logging.Handler):
    """SGLang's own deprecation warnings (e.g. 0.5.23: '--enable-dp-attention' is deprecated ...)."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record):
        msg = _ANSI.sub("", record.getMessage()).strip()
        if "deprecat" in msg.lower() and msg not in self.messages:
            self.messages.append(msg)


def _judge(argv: list[str]) -> dict:
    handler = _Deprecations()
    # prepare_server_args re-configures the root logger (basicConfig(force=True)); a handler on
    # the "sglang" logger survives that and sees every sglang.* record on its way up.
    logging.getLogger("sglang").addHandler(handler)
    try:
        out = _judge_argv(argv)
    finally:
        logging.getLogger("sglang").removeHandler(handler)
    out["deprecations"] = handler.messages
    return out


def _judge_argv(argv: list[str]) -> dict:
    from sglang.srt.server_args import prepare_server_args

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = prepare_server_args([*argv, "--device", "cpu"])
    except SystemExit as e:  # argparse: unknown flag, bad type, bad choice
        msg = err.getvalue().strip().splitlines()
        return {
            "verdict": "argparse_error",
            "exit_code": e.code if isinstance(e.code, int) else 1,
            "error_type": "SystemExit",
            "message": msg[-1] if msg else str(e),
        }
    except Exception as e:
        return _rejected(e)
    try:
        if hasattr(args, "resolve_once"):
            args.resolve_once()
        args.check_server_args()
    except SystemExit as e:
        return {"verdict": "rejected", "exit_code": e.code, "error_type": "SystemExit", "message": str(e)}
    except Exception as e:
        return _rejected(e)
    # 0.5.23 keeps what resolution decided as declarations over the input record (e.g. the
    # deprecated --dp-size N --enable-dp-attention becomes attn_dp_size N, dp_size 1);
    # resolved_dict() is what the launcher and /server_info see. Older pins: the attributes.
    if hasattr(args, "resolved_dict"):
        everything = args.resolved_dict()
    else:
        everything = {f: getattr(args, f, None) for f in dir(args) if not f.startswith("_")}
    resolved = {f: everything.get(f) for f in RESOLVED_FIELDS}
    return {
        "verdict": "accepted",
        "exit_code": None,
        "error_type": None,
        "message": "",
        "resolved": json.loads(json.dumps(resolved, default=str)),
        "widths": json.loads(json.dumps(_widths(types.SimpleNamespace(**everything)), default=str)),
    }


def _rejected(e: BaseException) -> dict:
    where = traceback.extract_tb(e.__traceback__)[-1]
    return {
        "verdict": "rejected",
        "exit_code": None,
        "error_type": type(e).__name__,
        "message": f"{e}".strip() or f"(empty {type(e).__name__} at {where.filename}:{where.lineno})",
    }


def _run_forked(argv: list[str]) -> dict:
    t0 = time.monotonic()
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(rfd)
        try:
            out = _judge(argv)
        except BaseException as e:  # never let a child escape into the parent's loop
            out = _rejected(e)
        with os.fdopen(wfd, "w") as w:
            json.dump(out, w, default=str)
        os._exit(0)
    os.close(wfd)
    with os.fdopen(rfd) as r:
        data = r.read()
    _, status = os.waitpid(pid, 0)
    if not data:
        out = {
            "verdict": "crashed",
            "exit_code": os.waitstatus_to_exitcode(status),
            "error_type": None,
            "message": "the child died without a verdict",
        }
    else:
        out = json.loads(data)
    out.setdefault("resolved", None)
    out.setdefault("widths", None)
    out.setdefault("deprecations", [])
    out["seconds"] = round(time.monotonic() - t0, 3)
    return out


def _warm_up(argv: list[str]) -> float:
    t0 = time.monotonic()
    env = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="sglang-oracle-warmup-") as tmp:
        argv = list(argv)
        if "--model-path" in argv:
            i = argv.index("--model-path") + 1
            if os.path.isdir(argv[i]):
                shutil.copytree(argv[i], os.path.join(tmp, "model"))
                argv[i] = os.path.join(tmp, "model")
        with contextlib.redirect_stderr(io.StringIO()):
            _judge(argv)
    os.environ.clear()
    os.environ.update(env)
    return round(time.monotonic() - t0, 2)


def main() -> int:
    cases_path, results_path = sys.argv[1:3]
    flags_path = sys.argv[3] if len(sys.argv) > 3 else None
    with open(cases_path, encoding="utf-8") as f:
        cases = json.load(f)
    t0 = time.monotonic()
    import importlib.metadata

    import sglang.srt.server_args  # noqa: F401  (import once, before forking)

    import_s = round(time.monotonic() - t0, 2)
    warm_up_s = _warm_up(cases[0]["argv"]) if cases else 0.0
    results = {c["id"]: _run_forked(c["argv"]) for c in cases}
    doc = {
        "sglang_version": importlib.metadata.version("sglang"),
        "import_s": import_s,
        "warm_up_s": warm_up_s,
        "results": results,
    }
    with open(results_path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
    if flags_path:
        import importlib.util

        dump = os.path.join(os.path.dirname(__file__), "..", "..", "ci", "dump_sglang_flags.py")
        spec = importlib.util.spec_from_file_location("dump_sglang_flags", dump)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        with open(flags_path, "w", encoding="utf-8") as f:
            json.dump(module.document(), f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
