"""The plan as a fixed-width table for the console (plan.yml, README)."""

from __future__ import annotations

COLUMNS = (
    "layout",
    "GPUs",
    "weights GiB/GPU",
    "budget GiB",
    "KV tokens",
    "single tok/s*",
    "peak tok/s*",
    "verdict",
    "reason",
)
NUMERIC = range(1, 7)


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.1f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def short_reason(entry: dict) -> str:
    """The first sentence of the deciding reason, without the layout name."""
    texts = entry["reasons"] or ([] if entry["verdict"] == "fits" else ["-"])
    if entry["failure"] == "oom_at_load":
        return "weights do not fit in GPU memory at load"
    if entry["failure"] == "kv_no_memory":
        return "no memory left for the KV cache"
    if not texts:
        return ""
    text = texts[0].split(": ", 1)[-1]
    first = text.split(". ")[0]
    return first if len(first) <= 60 else first[:57] + "..."


def _peak(speed: dict | None) -> str:
    if not speed:
        return "-"
    return f"{speed['peak_tok_s']:.0f} @{speed['peak_concurrency']}"


# Serving values the inventory adds to every layout's command line (group variable -> flag); unset
# ones leave SGLang's own default.
SITE_FLAGS = {
    "mem_fraction_static": ("sglang_mem_fraction_static", "--mem-fraction-static"),
    "context_length": ("sglang_context_length", "--context-length"),
    "max_running_requests": ("sglang_max_running_requests", "--max-running-requests"),
    "attention_backend": ("sglang_attention_backend", "--attention-backend"),
    "grammar_backend": ("sglang_grammar_backend", "--grammar-backend"),
    "trust_remote_code": ("sglang_trust_remote_code", "--trust-remote-code"),
    "kv_cache_dtype": ("sglang_kv_cache_dtype", "--kv-cache-dtype"),
}


def site_flags(serving: dict) -> list[str]:
    """What the inventory adds to every layout, and why (sglang_serving_reason), as console lines."""
    added = []
    for key, (var, flag) in SITE_FLAGS.items():
        value = serving.get(key)
        if value is None or value is False:
            continue
        added.append(f"{flag}{'' if value is True else f' {value}'} ({var})")
    if not added:
        return ["serving flags: SGLang's own defaults (the inventory adds none)"]
    out = [f"serving flags the inventory adds to every layout: {', '.join(added)}"]
    reason = str(serving.get("reason") or "").strip()
    out.append(
        f"  why: {reason}" if reason else "  why: not given (set sglang_serving_reason in the inventory)"
    )
    return out


def _gpus_available(plan: dict, e: dict) -> int:
    """GPUs on the hosts the layout spans: nnodes hosts, or the hosts its replicas fill."""
    hosts = len((e.get("placement") or {}).get("hosts") or []) if e.get("replicas") else 0
    return plan["hardware"]["gpu_count"] * max(e["nnodes"], hosts, 1)


def _pd_cells(plan: dict, e: dict) -> tuple:
    """A pd layout's GPUs, weights, budget and KV cells: prefill's / decode's (one row)."""
    p, d = e["pd"]["prefill"], e["pd"]["decode"]
    gpus = plan["hardware"]["gpu_count"] * max(len(e["pd"].get("hosts") or []), 1)
    return (
        f"P{p['gpus_used']}+D{d['gpus_used']} of {gpus}",
        f"{_fmt(p['weights_gib_per_gpu'])}/{_fmt(d['weights_gib_per_gpu'])}",
        f"{_fmt(p['budget_gib'])}/{_fmt(d['budget_gib'])}",
        f"{_fmt(p['kv_tokens'])}/{_fmt(d['kv_tokens'])}",
    )


def plan_table(plan: dict) -> list[str]:
    rows = [
        (
            e["name"],
            *(
                _pd_cells(plan, e)
                if e.get("pd")
                else (
                    f"{e['gpus_used']} of {_gpus_available(plan, e)}",
                    _fmt(e["weights_gib_per_gpu"]),
                    _fmt(e["budget_gib"]),
                    _fmt(e["kv_tokens"]),
                )
            ),
            _fmt((e.get("speed") or {}).get("single_tok_s")),
            _peak(e.get("speed")),
            e["verdict"],
            short_reason(e),
        )
        for e in plan["layouts"]
    ]
    widths = [max(len(str(r[i])) for r in [COLUMNS, *rows]) for i in range(len(COLUMNS))]
    line = "  ".join(f"{{:{'>' if i in NUMERIC else '<'}{w}}}" for i, w in enumerate(widths)).rstrip()
    out = [
        f"{plan['host']}: {plan['model']['name']} ({plan['model']['architecture']}, {plan['model']['quantization']}; "
        f"sizes from {plan['mode']}) on {plan['hardware']['gpu_count']} x {plan['hardware']['gpu_memory_gib']:g} GiB "
        f"{plan['hardware']['gpu_interconnect']}",
        *site_flags(plan.get("serving") or {}),
        f"model config: {plan['model'].get('config_source') or '-'}",
        line.format(*COLUMNS),
    ]
    out += [line.format(*r) for r in rows]
    out.append(
        "  * predicted by module_utils/sglang_layouts/speed.py (docs/cost-model.md); peak: output tok/s @ concurrency"
        if not plan.get("speed_note")
        else f"  * {plan['speed_note']}"
    )
    if any(e.get("pd") for e in plan["layouts"]):
        out.append(
            "  pd layouts: prefill/decode per cell (P+D GPUs; KV tokens per server: decode holds the "
            "conversations, prefill only the prompts in flight)"
        )
        for e in plan["layouts"]:
            pds = (e.get("speed") or {}).get("pd")
            if pds:
                m, kv = pds["rate_matched"], pds["kv_transfer"]
                out.append(
                    f"  {e['name']}: prefill pool {pds['prefill']['req_s']:g} req/s, decode pool "
                    f"{pds['decode']['req_s']:g} req/s; rate-matched {m['req_s']:g} req/s = {m['output_tok_s']:g} "
                    f"output tok/s ({m['limited_by']}-bound); KV transfer {kv['ms_per_request']:g} ms a request "
                    f"over {kv['link']['name']} ({kv['link']['gbs']:g} GB/s)"
                )
    for e in plan["layouts"]:
        for reason in e["reasons"]:
            out.append(f"  {e['verdict']}: {reason}")
        for note in e["notes"]:
            out.append(f"  note: {note}")
    if plan.get("search"):
        out += search_table(plan["search"])
    return out


SEARCH_COLUMNS = (
    "rank",
    "layout",
    "GPUs",
    "weights GiB/GPU",
    "KV tokens",
    "single tok/s*",
    "peak tok/s*",
    "objective*",
    "",
)
# Rows of the console table; the plan JSON holds every ranked candidate.
SEARCH_ROWS = 20


def search_table(section: dict, rows: int = SEARCH_ROWS) -> list[str]:
    """The search's ranking (sglang_layout_search): the first rows, every hand-written layout, the
    dropped counts by reason."""
    ranked = section["ranked"]
    shown = [e for e in ranked if e["rank"] <= rows or e.get("named")]
    shortlist = set(section.get("shortlist") or [])
    table = [
        (
            e["rank"],
            e["name"],
            e["gpus_used"],
            _fmt(e["memory"].get("weights_gib_per_gpu")),
            _fmt(e["memory"].get("kv_tokens_total")),
            _fmt((e.get("speed") or {}).get("single_tok_s")),
            _peak(e.get("speed")),
            _fmt(e.get("value")),
            "hand-written"
            if e.get("named")
            else (
                "measure" if e["name"] in shortlist else (f"tie of {e['tie_of']}" if e.get("tie_of") else "")
            ),
        )
        for e in shown
    ]
    widths = [max(len(str(r[i])) for r in [SEARCH_COLUMNS, *table]) for i in range(len(SEARCH_COLUMNS))]
    line = "  ".join(
        f"{{:{'>' if i in (0, 2, 3, 4, 5, 6, 7) else '<'}{w}}}" for i, w in enumerate(widths)
    ).rstrip()
    dropped = section["dropped"]
    out = [
        "",
        f"search: {section['candidates']} candidates, {len(ranked)} ranked by {section['objective']} "
        f"({section['objective_text']}); the sweep measures up to {section['budget']} (top_k {section['top_k']})",
        line.format(*SEARCH_COLUMNS),
        *(line.format(*r).rstrip() for r in table),
    ]
    if len(shown) < len(ranked):
        out.append(
            f"  ... {len(ranked) - len(shown)} more ranked candidates in the plan JSON (search.ranked)"
        )
    if section.get("named_unranked"):
        out.append(
            "  hand-written, not ranked: "
            + ", ".join(f"{n} ({v})" for n, v in section["named_unranked"].items())
        )
    out.append(
        "  dropped: " + ", ".join(f"{n} {k} ({section['dropped_text'][k]})" for k, n in dropped.items() if n)
        if any(dropped.values())
        else "  dropped: none"
    )
    out.append(
        "  * predicted by speed.py at the inventory's benchmark; KV tokens: all DP groups and replicas"
    )
    return out
