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
        "from ansible.module_utils.sglang_layouts.health_gate import wait_ready\n"
        "# ansible.module_utils.sglang_layoutsX is another name\n"
    )
    out = build_collection.rewrite_imports(src)
    assert out.splitlines() == [
        "from ansible.module_utils.basic import AnsibleModule",
        "from ansible_collections.sglang.layouts.plugins.module_utils.sglang_layouts import gpu",
        "from ansible_collections.sglang.layouts.plugins.module_utils.sglang_layouts.health_gate import wait_ready",
        "# ansible.module_utils.sglang_layoutsX is another name",
    ]


def test_the_tarball_is_named_after_galaxy_yml(build_collection, repo):
    meta = yaml.safe_load((repo / "galaxy.yml").read_text())
    assert build_collection.tarball_name() == f"sglang-layouts-{meta['version']}.tar.gz"
