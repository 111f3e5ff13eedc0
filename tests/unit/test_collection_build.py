"""ci/build_collection.py: the repo laid out as the collection sglang.layouts (make collection).

Installing the built tarball and running a playbook of a user's own against it is
tests/integration/test_collection.py."""

from __future__ import annotations

import ast
import importlib.util

import pytest
import yaml


@pytest.fixture(scope="module")
def build_collection(repo):
    spec = importlib.util.spec_from_file_location("build_collection", repo / "ci" / "build_collection.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def tree(build_collection, tmp_path_factory):
    return build_collection.assemble(
        tmp_path_factory.mktemp("coll") / "ansible_collections" / "sglang" / "layouts"
    )


def _imports(path):
    """Every module name a Python file imports (absolute imports only)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0:
            names += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names += [a.name for a in node.names]
    return names


def test_the_layout_ansible_expects(repo, tree):
    for src, dest in (
        ("library", "plugins/modules"),
        ("filter_plugins", "plugins/filter"),
        ("action_plugins", "plugins/action"),
        ("callback_plugins", "plugins/callback"),
        ("cache_plugins", "plugins/cache"),
    ):
        assert sorted(p.name for p in (repo / src).glob("*.py")) == sorted(
            p.name for p in (tree / dest).glob("*.py")
        ), dest
    lib = repo / "module_utils" / "sglang_layouts"
    assert sorted(str(p.relative_to(lib)) for p in lib.rglob("*") if "__pycache__" not in p.parts) == sorted(
        str(p.relative_to(tree / "plugins/module_utils/sglang_layouts"))
        for p in (tree / "plugins/module_utils/sglang_layouts").rglob("*")
    )
    assert sorted(p.name for p in (repo / "roles").iterdir()) == sorted(
        p.name for p in (tree / "roles").iterdir()
    )
    assert (tree / "sglang_sim" / "__main__.py").is_file()
    assert yaml.safe_load((tree / "meta" / "runtime.yml").read_text())["requires_ansible"].startswith(">=2.")
    meta = yaml.safe_load((tree / "galaxy.yml").read_text())
    assert (meta["namespace"], meta["name"]) == ("sglang", "layouts")


def test_every_playbook_of_the_issue_is_in_the_collection_and_no_site_settings(tree):
    names = {"plan", "sweep", "deploy", "bench", "stop", "provision", "gpu_sweep", "report"}
    assert names <= {p.stem for p in (tree / "playbooks").glob("*.yml")}
    assert (tree / "playbooks" / "tasks" / "sweep_layout.yml").is_file()
    # the repo's group_vars are its own site's settings: a collection's playbooks read the user's inventory
    assert not (tree / "playbooks" / "group_vars").exists()
    assert not (tree / "group_vars").exists()


def test_modules_import_the_shared_code_under_the_collections_name(build_collection, tree):
    lib = tree / "plugins" / "module_utils"
    prefix = "ansible_collections.sglang.layouts.plugins.module_utils."
    for module in (tree / "plugins" / "modules").glob("*.py"):
        names = _imports(module)
        assert not [n for n in names if n.startswith("ansible.module_utils.sglang_layouts")], module.name
        ours = [n for n in names if n.startswith(prefix)]
        assert ours, f"{module.name} imports nothing of sglang_layouts"
        for name in ours:
            parts = name[len(prefix) :].split(".")
            # a package, a module, or a name inside a module that exists in the collection's tree
            assert any(
                (lib.joinpath(*parts[:i]).with_suffix(".py")).is_file()
                or (lib.joinpath(*parts[:i]) / "__init__.py").is_file()
                for i in range(len(parts), 0, -1)
            ), f"{module.name}: {name} is not in the collection"


def test_the_rewrite_touches_only_the_shared_codes_imports(build_collection):
    src = (
        "from ansible.module_utils.basic import AnsibleModule\n"
        "from ansible.module_utils.sglang_layouts import gpu\n"
        "from ansible.module_utils.sglang_layouts.gate.readiness import wait_ready\n"
        "# ansible.module_utils.sglang_layoutsX is another name\n"
    )
    out = build_collection.rewrite_imports(src)
    assert out.splitlines() == [
        "from ansible.module_utils.basic import AnsibleModule",
        "from ansible_collections.sglang.layouts.plugins.module_utils.sglang_layouts import gpu",
        "from ansible_collections.sglang.layouts.plugins.module_utils.sglang_layouts.gate.readiness import wait_ready",
        "# ansible.module_utils.sglang_layoutsX is another name",
    ]


def test_the_tarball_is_named_after_galaxy_yml(build_collection, repo):
    meta = yaml.safe_load((repo / "galaxy.yml").read_text())
    assert build_collection.tarball_name() == f"sglang-layouts-{meta['version']}.tar.gz"


def test_filter_names_are_the_plugins_own(build_collection, repo):
    spec = importlib.util.spec_from_file_location("filters", repo / "filter_plugins" / "sglang_layouts.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert build_collection.filter_names() == sorted(mod.FilterModule().filters())


def test_filters_are_called_by_fqcn_in_the_collections_roles_and_playbooks(build_collection):
    names = ["sglang_plan", "sglang_plan_table", "sglang_layout_plan", "sglang_bench_rate_label"]
    src = (
        "- name: Plan\n"
        "  ansible.builtin.set_fact:\n"
        '    sglang_plan: "{{ sglang_plan_inputs | sglang_plan }}"\n'
        "    lp: >-\n"
        "      {{ sglang_plan |\n"
        "         sglang_layout_plan(x) }}\n"
        '    rows: "{{ sglang_plan.layouts | list\n'
        '         | sglang_plan_table }}"\n'
        "    labels: \"{{ rates | map('sglang_bench_rate_label') | list }}\"\n"
        "  when: not (sglang_plan | default({}) | sglang_plan_tables)\n"
        "- ansible.builtin.debug:\n"
        "    msg: |\n"
        "      sglang_plan_table shows it\n"
    )
    out = build_collection.rewrite_filters(src, names).splitlines()
    assert out[2] == '    sglang_plan: "{{ sglang_plan_inputs | sglang.layouts.sglang_plan }}"'
    assert out[4:6] == ["      {{ sglang_plan |", "         sglang.layouts.sglang_layout_plan(x) }}"]
    assert out[7] == '         | sglang.layouts.sglang_plan_table }}"'
    assert out[8] == "    labels: \"{{ rates | map('sglang.layouts.sglang_bench_rate_label') | list }}\""
    # another name that starts like one, a variable of the same name, a YAML block scalar: as they were
    assert out[9] == "  when: not (sglang_plan | default({}) | sglang_plan_tables)"
    assert out[11:] == ["    msg: |", "      sglang_plan_table shows it"]


def test_every_fqcn_in_the_tree_names_a_filter_and_no_short_name_is_left(build_collection, tree):
    import re

    names = set(build_collection.filter_names())
    used = set()
    for path in [*(tree / "roles").rglob("*.yml"), *(tree / "playbooks").rglob("*.yml")]:
        text = path.read_text()
        used |= set(re.findall(r"sglang\.layouts\.(\w+)", text))
        short = re.findall(r"\|\s*(sglang_\w+)\s*[(|}\n)]", text)
        assert not set(short) & names, f"{path}: {set(short) & names}"
    assert used and used <= names
    # the roles use most of them: the plan, the units, the stop order, the secrets
    assert {"sglang_plan_outcome", "sglang_unit_spec", "sglang_stop_order", "sglang_layout_plan"} <= used
