"""What a unit of a layout runs (its command line, environment, secret file) and its unit file text.

unit_spec is the one place that turns a unit of the planner's plan (placement.units_on) and the
service role's settings into what the unit runs: the role's variables read it for a deployment,
and render_previews renders the role's own templates from it for every unit of a plan at once
(plan.yml: 200 layouts templated unit by unit through Ansible took minutes).
"""

from __future__ import annotations

import re

from .. import engines, secrets
from ..plan import placement
from ..plan.planner import PlanError
from . import jit_toolchain

TEMPLATES = {"server": "sglang.service.j2", "router": "sglang-router.service.j2"}


def _plain_env(env, secret_names) -> dict:
    return secrets.split_env(env or {}, secret_names)[0]


def unit_spec(lp: dict, unit: dict, ctx: dict, secret_env: dict | None = None) -> dict:
    """What one unit of layout lp runs.

    ctx holds the service role's settings (keys as in roles/sglang_service/vars/main.yml's
    __sglang_service_unit_ctx); secret_env is the layout's secret variables (only their names
    show: in the unit's comment, and whether it needs an EnvironmentFile)."""
    engine = lp.get("engine") or ctx.get("default_engine") or "sglang"
    facts = engines.role_facts(engine)
    sim = bool(facts["simulated"])
    venv = str((ctx.get("venv_paths") or {}).get(facts["venv_var"]) or "")
    is_router = unit.get("role") == "router"
    if sim:
        python = str(ctx["sim_python"])
    elif not is_router and not venv:
        raise PlanError(f"layout {lp.get('name')}: engine {engine} needs {facts['venv_var']} (its venv)")
    else:
        python = venv + "/bin/python"
    stem = re.sub(r"\.service$", "", str(unit["name"]))
    config_dir = str(ctx["config_dir"])
    api_config = f"{config_dir}/{stem}.yaml"
    api_key_set = bool(ctx.get("api_key_set"))
    key_argv = []
    if api_key_set and not is_router:
        key_argv = secrets.api_key_argv(engine, api_config if ctx.get("manager") == "systemd" else None)
    argv_in = [str(a) for a in unit["argv"]]
    if is_router:
        argv = [str(ctx["router_venv"]) + "/bin/python", *argv_in[1:]]
    else:
        argv = [python, "-m", engines.engine(engine).unit_module or argv_in[2], *argv_in[3:], *key_argv]
    unit_argv = [argv[0], str(ctx["redact_path"]), *argv] if key_argv else argv
    env: dict = {}
    secret_env = {} if is_router else dict(secret_env or {})
    if not is_router:
        path = jit_toolchain.unit_path(
            engine, venv, ctx.get("base_env") or "", ctx.get("cuda_home") or "", ctx.get("extra_path") or []
        )
        if path:
            env["PATH"] = path
        env.update(_plain_env(ctx.get("extra_env"), ctx.get("secret_names")))
        env.update(_plain_env(unit.get("env"), ctx.get("secret_names")))
        if sim:
            # the simulator's code, staged by the role; the host it acts is in the plan's env
            env["PYTHONPATH"] = str(ctx["sim_dir"])
    return {
        "engine": engine,
        "engine_facts": facts,
        "simulated": sim,
        "is_router": is_router,
        "stem": stem,
        "api_config": api_config,
        "key_argv": key_argv,
        "argv": argv,
        "unit_argv": unit_argv,
        "env": env,
        "env_file": f"{config_dir}/{stem}.env",
        "env_file_needed": not is_router and (api_key_set or len(secret_env) > 0),
        "secret_names": sorted(secret_env),
    }


def _template_vars(lp: dict, unit: dict, spec: dict, ctx: dict, secret_env: dict) -> dict:
    """The names the role's templates read, as the role's variables would give them."""
    out = {f"sglang_service_{k}": v for k, v in (ctx.get("role") or {}).items()}
    out.update(
        {
            "__sglang_service_lp": lp,
            "__sglang_service_unit": unit,
            "__sglang_service_engine": spec["engine"],
            "__sglang_service_engine_facts": spec["engine_facts"],
            "__sglang_service_sim": spec["simulated"],
            "__sglang_service_is_router": spec["is_router"],
            "__sglang_service_unit_stem": spec["stem"],
            "__sglang_service_unit_argv": spec["unit_argv"],
            "__sglang_service_env": spec["env"],
            "__sglang_service_secret_env": {} if spec["is_router"] else secret_env,
            "__sglang_service_env_file_needed": spec["env_file_needed"],
            "__sglang_service_env_file": spec["env_file"],
            "__sglang_service_api_key_set": bool(ctx.get("api_key_set")),
            "__sglang_service_gpu_groups": (ctx.get("role") or {}).get("gpu_groups", []),
            "sglang_model": ctx.get("model") or {},
            "sglang_router_version": ctx.get("router_version", ""),
            "inventory_hostname": ctx.get("host"),
            "ansible_managed": ctx.get("ansible_managed", "Ansible managed"),
        }
    )
    return out


def render_previews(
    layouts: list,
    host: str,
    ctx: dict,
    template_dir: str,
    secret_envs: dict | None = None,
    filters: dict | None = None,
) -> dict[str, str]:
    """Every unit file of `layouts` (the plan's entries) that runs on `host`, by unit name: the role's
    templates rendered once each, then filled in per unit. filters are the Ansible filters the
    templates use (comment, bool, union), given by the caller that runs inside Ansible."""
    import jinja2  # the controller's (Ansible's own dependency); only this function needs it

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(template_dir),
        trim_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
        autoescape=False,
    )
    env.filters.update(filters or {})
    templates = {role: env.get_template(name) for role, name in TEMPLATES.items()}
    previews = {}
    for pair in placement.units_of_layouts(layouts, host):
        lp, unit = pair["layout"], pair["unit"]
        secret_env = (secret_envs or {}).get(str(lp.get("name"))) or {}
        spec = unit_spec(lp, unit, ctx, secret_env)
        template = templates["router" if spec["is_router"] else "server"]
        previews[str(unit["name"])] = template.render(_template_vars(lp, unit, spec, ctx, secret_env))
    return previews
