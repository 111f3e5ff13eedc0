"""Predicted decode step beside the server's own decode ITL, per running-batch size (a check, never a fit).

SGLang logs a `Decode batch` line every decode_log_interval (40) steps with `#running-req` and
`gen throughput (token/s)` over those steps; ITL = running / throughput. The first decode line after
a `Prefill batch` line also timed the prefill, so it is left out; the median of the rest is the
server's decode step at that batch size (and `#token` its context). speed.SpeedModel.decode_terms
predicts the same step for the record's layout, with its terms.

    .venv/bin/python benchmarks/decode_itl.py [--logs DIR] [--write FILE] [--from FILE] [--json]

--logs reads the raw unit logs (every Decode batch line: /tmp/lease-raw of lease 2026-12-04b, not in
git); --write stores the per-batch medians derived from them (benchmarks/results/<lease>/decode-itl.json);
--from checks against such a file instead of logs.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import statistics
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "benchmarks"))

from bench_predict import record_model  # noqa: E402
from sglang_layouts.serve.render import unit_name  # noqa: E402

LEASE = os.path.join(REPO, "benchmarks", "results", "h200-2026-12-04b")
DEFAULT_DATA = os.path.join(LEASE, "decode-itl.json")
_DECODE = re.compile(
    r"Decode batch, #running-req: (\d+), #(?:full )?token: (\d+),.*gen throughput \(token/s\): ([\d.]+)"
)


def parse_log(path: str) -> dict[int, dict]:
    """{running: {itl_ms (median), tokens (median), lines}} from one server log."""
    by: dict[int, list[tuple[float, int]]] = {}
    after_prefill = True
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if "Prefill batch" in line:
                after_prefill = True
                continue
            m = _DECODE.search(line)
            if not m:
                continue
            if after_prefill:
                after_prefill = False  # this interval also timed a prefill (or an idle wait)
                continue
            running, tokens, tput = int(m.group(1)), int(m.group(2)), float(m.group(3))
            if tput > 0 and tokens > 0:
                by.setdefault(running, []).append((running / tput * 1e3, tokens))
    return {
        b: {
            "itl_ms": round(statistics.median(x[0] for x in v), 3),
            "tokens": int(statistics.median(x[1] for x in v)),
            "lines": len(v),
        }
        for b, v in sorted(by.items())
    }


def records(lease: str = LEASE):
    """(record path, record, model name, SpeedModel) of every ok record of the lease."""
    for path in sorted(glob.glob(os.path.join(lease, "**", "*.json"), recursive=True)):
        got = record_model(path)
        if got:
            rec, name, m, _ = got
            yield path, rec, name, m


def derive(logs: str, lease: str = LEASE) -> dict:
    out = {}
    for path, rec, name, _ in records(lease):
        # the layout's server; a pd layout's decode server (the planner names it <layout>-decode0)
        server = rec["layout"] + ("-decode0" if (rec.get("health") or {}).get("pd") else "")
        log = os.path.join(logs, unit_name(name, server) + ".log")
        if os.path.exists(log):
            out[os.path.relpath(path, REPO)] = {"model": name, "by_batch": parse_log(log)}
    return out


def check(data: dict, lease: str = LEASE) -> list[dict]:
    rows = []
    for path, _, name, m in records(lease):
        entry = data.get(os.path.relpath(path, REPO))
        if not entry:
            continue
        for b, meas in entry["by_batch"].items():
            b = int(b)
            t = m.decode_terms(b, meas["tokens"])
            rows.append(
                {
                    "model": name,
                    "batch": b,
                    "tokens": meas["tokens"],
                    "measured_ms": meas["itl_ms"],
                    "predicted_ms": round(t["step_s"] * 1e3, 3),
                    "error_pct": round(100 * (t["step_s"] * 1e3 - meas["itl_ms"]) / meas["itl_ms"], 1),
                    "terms_ms": {
                        k: round(t[k] * 1e3, 3)
                        for k in ("memory", "compute", "kernel_latency", "collective", "cpu", "fixed")
                    },
                    "unchecked": bool((m.cost or {}).get("unchecked")),
                }
            )
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--logs", help="folder of raw unit logs (<unit>.service.log)")
    ap.add_argument("--write", help="store the per-batch medians derived from --logs here")
    ap.add_argument(
        "--from", dest="src", default=DEFAULT_DATA, help="per-batch medians (default %(default)s)"
    )
    ap.add_argument(
        "--lease", default=LEASE, help="the lease folder whose records are checked (default %(default)s)"
    )
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if a.logs:
        data = derive(a.logs, a.lease)
        if a.write:
            with open(a.write, "w", encoding="utf-8") as f:
                json.dump(
                    {
                        "about": "server decode ITL per running-batch size (median of SGLang's Decode batch "
                        "lines, the first after each prefill left out), derived by benchmarks/decode_itl.py "
                        "from the lease's raw unit logs",
                        "command": ".venv/bin/python benchmarks/decode_itl.py --lease "
                        + os.path.relpath(os.path.abspath(a.lease), REPO)
                        + f" --logs {a.logs} --write "
                        + os.path.relpath(os.path.abspath(a.write), REPO),
                        "records": data,
                    },
                    f,
                    indent=1,
                    sort_keys=True,
                )
                f.write("\n")
    else:
        with open(a.src, encoding="utf-8") as f:
            data = json.load(f)["records"]
    rows = check(data, a.lease)
    if a.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{'model':<28} {'bs':>3} {'ctx':>6} {'meas ms':>8} {'pred ms':>8} {'err':>7}   terms ms")
    for r in rows:
        terms = " ".join(f"{k} {v:.2f}" for k, v in r["terms_ms"].items() if v)
        mark = " (unchecked)" if r["unchecked"] else ""
        print(
            f"{r['model']:<28} {r['batch']:>3} {r['tokens']:>6} {r['measured_ms']:>8.2f} {r['predicted_ms']:>8.2f} "
            f"{r['error_pct']:>+6.1f}%   {terms}{mark}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
