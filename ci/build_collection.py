"""Assemble the collection sglang.layouts from the repo, and build its tarball.

Usage: build_collection.py [--tree DIR] [--output-path DIR] [--no-build]

The repo stays a playbook project (library/, module_utils/, filter_plugins/, ... at its top level);
this script lays the same files out as Ansible expects a collection
(ansible_collections/sglang/layouts/plugins/modules, plugins/module_utils, ...), then runs
`ansible-galaxy collection build` on that tree. One source: nothing is edited by hand in the tree.

Two rewrites. A module imports its shared code as `ansible.module_utils.sglang_layouts` in the repo
(ansible.cfg's module_utils path) and as
`ansible_collections.sglang.layouts.plugins.module_utils.sglang_layouts` in the collection, the only
name AnsiballZ packs for a collection module. The package itself imports its modules relatively, and
the filter plugin finds it as `<its folder's parent>/module_utils` (filter_plugins/.. in the repo,
plugins/ in the collection). And the roles and playbooks call this project's filters by their
short names, which Ansible finds only through the repo's ansible.cfg: the collection's copies call
them by FQCN (rewrite_filters).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
NAMESPACE, NAME = "sglang", "layouts"
LEGACY_IMPORT = "ansible.module_utils.sglang_layouts"
COLLECTION_IMPORT = f"ansible_collections.{NAMESPACE}.{NAME}.plugins.module_utils.sglang_layouts"

# repo folder -> collection folder (files copied as they are, but for the modules' imports)
PLUGIN_DIRS = {
    "library": "plugins/modules",
    "module_utils": "plugins/module_utils",
    "filter_plugins": "plugins/filter",
    "action_plugins": "plugins/action",
    "plugin_utils": "plugins/plugin_utils",
    "callback_plugins": "plugins/callback",
    "cache_plugins": "plugins/cache",
}
# folders taken whole; the simulator is what the sglang_service role ships to a host for engine sim
TREES = ("roles", "sglang_sim", "docs", "meta")
FILES = ("galaxy.yml", "README.md", "CHANGELOG.md")
# the repo's own site settings stay in the repo: a collection's playbooks take a user's inventory
PLAYBOOK_SKIP = {"group_vars", "vars.yml"}
SKIP_NAMES = {"__pycache__", ".pytest_cache"}

_IMPORT_RE = re.compile(rf"\b{re.escape(LEGACY_IMPORT)}\b")


def rewrite_imports(text: str) -> str:
    """A module's source with its shared code imported under the collection's name."""
    return _IMPORT_RE.sub(COLLECTION_IMPORT, text)


def filter_names(repo: Path = REPO) -> list[str]:
    """The names filter_plugins/sglang_layouts.py registers (read from its source: no Ansible import)."""
    text = (repo / "filter_plugins" / "sglang_layouts.py").read_text()
    faces = re.search(r"^_FACES = \{(.*?)^\}", text, re.M | re.S).group(1)
    names = set(re.findall(r'^    "(sglang_\w+)":', faces, re.M))
    names |= set(re.findall(r'"(sglang_\w+)": sglang_\w+', text))
    return sorted(names)


def rewrite_filters(text: str, names) -> str:
    """Jinja in a role or playbook with this collection's filters called by FQCN.

    Ansible looks a filter's short name up among ansible.builtin and the configured filter paths
    (the repo's ansible.cfg names filter_plugins/), never in the collection a role or playbook comes
    from, so the collection's copies say sglang.layouts.<filter>. A filter follows a pipe (on the same
    line or the next) or is named in map()/select(); a YAML block scalar's `|` is not a pipe."""
    alt = "|".join(sorted(map(re.escape, names), key=len, reverse=True))
    pipe = re.compile(rf"\|(?P<sep>[ \t]*(?:\n[ \t]*)?)(?P<name>{alt})\b(?![\w.])")

    def fqcn(m):
        line_start = text.rfind("\n", 0, m.start()) + 1
        before = text[line_start : m.start()]
        if "\n" in m.group("sep") and re.fullmatch(r"\s*(-\s+)?([^\s:]+:\s*)?", before):
            return m.group(0)  # `key: |` then a line of text
        return f"|{m.group('sep')}{NAMESPACE}.{NAME}.{m.group('name')}"

    text = pipe.sub(fqcn, text)
    return re.sub(
        rf"\b(map|select|reject)\((\s*)(['\"])(?P<name>{alt})\3",
        lambda m: f"{m.group(1)}({m.group(2)}{m.group(3)}{NAMESPACE}.{NAME}.{m.group('name')}{m.group(3)}",
        text,
    )


def galaxy() -> dict:
    return yaml.safe_load((REPO / "galaxy.yml").read_text())


def tarball_name(meta: dict | None = None) -> str:
    meta = meta or galaxy()
    return f"{meta['namespace']}-{meta['name']}-{meta['version']}.tar.gz"


def _ignore(_dir, names):
    return {n for n in names if n in SKIP_NAMES or n.endswith((".pyc", ".pyo"))}


def assemble(tree: Path, repo: Path = REPO) -> Path:
    """Lay the repo out as the collection under `tree` (emptied first). Returns `tree`."""
    meta = yaml.safe_load((repo / "galaxy.yml").read_text())
    if (meta["namespace"], meta["name"]) != (NAMESPACE, NAME):
        raise SystemExit(f"galaxy.yml names {meta['namespace']}.{meta['name']}, not {NAMESPACE}.{NAME}")
    if tree.exists():
        shutil.rmtree(tree)
    tree.mkdir(parents=True)
    for name in FILES:
        shutil.copy2(repo / name, tree / name)
    for name in TREES:
        shutil.copytree(repo / name, tree / name, ignore=_ignore)
    for src, dest in PLUGIN_DIRS.items():
        shutil.copytree(repo / src, tree / dest, ignore=_ignore)
    for module in sorted((tree / "plugins" / "modules").glob("*.py")):
        module.write_text(rewrite_imports(module.read_text()))
    playbooks = tree / "playbooks"
    shutil.copytree(
        repo / "playbooks",
        playbooks,
        ignore=lambda d, names: _ignore(d, names) | (PLAYBOOK_SKIP & set(names)),
    )
    names = filter_names(repo)
    for folder in (tree / "roles", playbooks):
        for path in sorted(folder.rglob("*")):
            if path.suffix in (".yml", ".yaml", ".j2") and path.is_file():
                path.write_text(rewrite_filters(path.read_text(), names))
    return tree


def build(tree: Path, output: Path) -> Path:
    """`ansible-galaxy collection build` of the assembled tree; the tarball's path."""
    galaxy_bin = Path(sys.executable).with_name("ansible-galaxy")
    output.mkdir(parents=True, exist_ok=True)
    cmd = [str(galaxy_bin), "collection", "build", str(tree), "--output-path", str(output), "--force"]
    subprocess.run(cmd, check=True)
    return output / tarball_name(yaml.safe_load((tree / "galaxy.yml").read_text()))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--tree",
        type=Path,
        default=REPO / "build" / "collection" / "ansible_collections" / NAMESPACE / NAME,
        help="where the collection's tree is laid out (ansible-test needs ansible_collections/<ns>/<name>)",
    )
    parser.add_argument("--output-path", type=Path, default=REPO / "build", help="folder of the tarball")
    parser.add_argument("--no-build", action="store_true", help="lay out the tree only")
    args = parser.parse_args(argv)
    tree = assemble(args.tree)
    print(f"collection tree: {tree}")
    if not args.no_build:
        print(f"collection: {build(tree, args.output_path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
