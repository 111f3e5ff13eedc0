"""The layout search's pd candidates: a prefill pool and a decode pool on GPUs of their own.

With `sglang_layout_search.pd` set, the search also enumerates prefill/decode disaggregated layouts
(plan/pd.py): every pair of role shapes from the search's own `vary` space (tp, dp, ep,
enable_dp_attention; pp 1 and one host per replica, as plan/pd.py plans roles) that fit as layouts
of their own, each with vary's replicas (else every count that fits), whose GPUs together pass the
search's `gpus` rule. The planner plans and refuses them as it
does a hand-written pd layout; `speed.predict_pd` ranks them beside the aggregated candidates.

Names (tests outside the repo use them): sglang_layout_search.pd: true | {transfer_backend, ib_device,
router}; generated names auto-pd-p<tp>x1x<dp>[-ep<N>][-dpa][-r<replicas>]+d<the same>[-<knob>=<v>...].
"""

from __future__ import annotations

import itertools

from ..estimate.model import PlanError, kind_of
from .inputs import PD_KEYS, normalize_layout, normalize_pd
from .rules import parallel_shape
from .validate import check_pd_transfer_backend

# What a search's pd: may set: the pd keys every candidate shares. The roles are what the search varies;
# share_gpus is for a one-GPU test layout, not a layout to find.
PD_SEARCH_KEYS = {k: PD_KEYS[k] for k in ("transfer_backend", "ib_device", "router")}


def normalize_pd_search(value, flag_table: dict) -> dict | None:
    """sglang_layout_search.pd as the enumeration reads it: None (no pd candidates) or the pd keys
    every candidate gets, checked by the planner's own reader of a pd layout and the transfer backend
    against the host's SGLang (flag_table)."""
    where = "sglang_layout_search.pd"
    if value is None or value is False:
        return None
    if value is True:
        value = {}
    if not isinstance(value, dict):
        raise PlanError(
            f"{where} must be true, false or a mapping like {{transfer_backend: mooncake}}, not {kind_of(value)}"
        )
    unknown = sorted(set(value) - set(PD_SEARCH_KEYS))
    if unknown:
        raise PlanError(
            f"{where}: unknown key(s) {', '.join(map(str, unknown))}. Known keys: {', '.join(PD_SEARCH_KEYS)} "
            "(the search varies the roles from vary:; its candidates get GPUs of their own)"
        )
    probe = {"name": "search-pd", "pd": {**value, "prefill": {}, "decode": {}}}
    try:
        pd = normalize_pd(probe)["pd"]
        check_pd_transfer_backend("search-pd", pd["transfer_backend"], flag_table)
    except PlanError as e:
        raise PlanError(
            str(e).replace("layout search-pd: pd", where, 1).replace("layout search-pd:", f"{where}:", 1)
        ) from None
    return {k: pd[k] for k in PD_SEARCH_KEYS if pd.get(k) not in (None, {}) or k == "transfer_backend"}


def role_shapes(space: dict, gpu_count: int, role_ok) -> list[tuple[dict, int]]:
    """Every role shape of the vary space that fits one host and that role_ok(shape) allows (the
    search's check: the planner's rules and memory for the shape as a layout of its own), with its
    GPUs per replica."""
    out = []
    for tp, dp, ep, dpa in itertools.product(
        space["tp"], space["dp"], space["ep"], space["enable_dp_attention"]
    ):
        if dpa and dp == 1:
            continue  # the same role as without it
        shape = {"tp": tp, "dp": dp, "ep": ep, "enable_dp_attention": dpa}
        try:
            gpus = parallel_shape(normalize_layout({"name": "role", **shape}))["gpus_per_engine"]
        except PlanError:
            continue
        if gpus <= gpu_count and role_ok(shape):
            out.append((shape, gpus))
    return out


def role_text(shape: dict, replicas: int) -> str:
    from .search import shape_text

    return shape_text({**shape, "pp": 1}) + (f"-r{replicas}" if replicas > 1 else "")


def pd_candidates(
    space: dict, pd_keys: dict, gpu_count: int, hosts: int, gpus_range, role_ok, pair_problems
) -> list[dict]:
    """The pd layouts of the search space without knobs: prefill and decode shapes that role_ok
    allows, pairs without pair_problems(pd) (reasons for the two together), and replicas (vary's
    replicas where it names them, else 1..n) whose GPUs pass the search's gpus: rule, with at most
    `hosts` hosts' GPUs."""
    from .search import gpus_pass

    shapes = role_shapes(space, gpu_count, role_ok)
    total = gpu_count * hosts
    out = []
    for (pre, p_gpus), (dec, d_gpus) in itertools.product(shapes, shapes):
        if pair_problems({"prefill": pre, "decode": dec}):
            continue
        for p_rep in space.get("pd_replicas") or range(1, total // p_gpus + 1):
            for d_rep in space.get("pd_replicas") or range(1, total // d_gpus + 1):
                used = p_rep * p_gpus + d_rep * d_gpus
                if used > total or not gpus_pass(used, gpu_count, gpus_range):
                    continue
                out.append(
                    {
                        "name": f"auto-pd-p{role_text(pre, p_rep)}+d{role_text(dec, d_rep)}",
                        "pd": {
                            **pd_keys,
                            "prefill": {**pre, "replicas": p_rep},
                            "decode": {**dec, "replicas": d_rep},
                        },
                    }
                )
    return out


def pd_shape_key(lay: dict) -> dict:
    """What makes two pd layouts the same engines (names, ports and policies aside)."""
    n = normalize_pd(lay)
    pd = n["pd"]
    return {
        "transfer_backend": pd["transfer_backend"],
        "share_gpus": pd["share_gpus"],
        **{
            role: {
                **{
                    k: pd[role][k]
                    for k in ("tp", "pp", "ep", "dp", "nnodes", "replicas", "mem_fraction_static", "gpus")
                },
                "enable_dp_attention": bool(pd[role]["enable_dp_attention"] and pd[role]["dp"] > 1),
                "args": {str(k): str(v) for k, v in sorted(pd[role]["args"].items())},
            }
            for role in ("prefill", "decode")
        },
        "args": {str(k): str(v) for k, v in sorted(n["args"].items())},
    }
