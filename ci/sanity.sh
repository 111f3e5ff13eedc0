#!/usr/bin/env bash
# make sanity: `ansible-test sanity` on the collection sglang.layouts as ci/build_collection.py
# lays it out. Not part of `make test` (its time budget); run it before a release of the collection.
#
#   ci/sanity.sh [ansible-test sanity option...]      e.g. ci/sanity.sh --test pylint
#
# 1. The tree: build/sanity/ansible_collections/sglang/layouts (ansible-test needs the
#    ansible_collections/<namespace>/<name> path), laid out by build_collection.py --no-build, with
#    the repo's tests/sanity/ignore-<ansible-core X.Y>.txt copied to its tests/sanity/ (the repo's
#    tests/ is no part of the collection). Each entry of that file says why in its comment; three are
#    not ones Galaxy certification permits, and .ansible-lint-ignore says why lint accepts them.
# 2. ansible-test finds the files to test through the version control of its content root. From
#    its working folder it walks up to the first .git, here the repo's, and asks git for the files
#    below the tree: build/ is ignored, so none, and it says "All targets skipped" with exit 0.
#    ANSIBLE_TEST_CONTENT_ROOT names the tree as the root (no walk): every file in it is tested.
# 3. ansible-test is the one in .venv (ansible-core, pinned in requirements.txt), run on .venv's
#    Python (--local: no venv of its own for the controller, which --venv would rebuild in the
#    tree on every run). Each test that needs packages (pylint, voluptuous, yamllint, ... at the
#    versions ansible-test pins) runs in a venv that ansible-test builds from PyPI under
#    ~/.ansible/test/venv, keyed by a hash of its requirements; .venv itself is left alone. Its HOME here
#    is <machine cache>/ansible-test (ci/steps.sh: SGLANG_LAYOUTS_CACHE, else
#    /var/cache/sglang-layouts, else ~/.cache/sglang-layouts), so every clone and CI run on the
#    machine shares them: built on the first run, reused after. A lock (flock) serialises runs, as
#    ansible-test does not guard a venv it is building. The user's pip settings (~/.config/pip,
#    ~/.pip: indexes, find-links) are linked into that HOME, so its pip asks the same indexes.
#    The venvs' paths must stay short (ansible-test: shebangs over 127 characters break), so a
#    long SGLANG_LAYOUTS_CACHE is refused.
# 4. get-pip: ansible-test creates each venv without pip and bootstraps pip with a script it
#    downloads once from ci-files.testing.ansible.com into ~/.ansible/test/cache/. That host is
#    not reachable from CI (PyPI is), so a fresh machine failed there ("does not have pip
#    available"). The script's place gets ci/ansible_test_get_pip.py instead, and beside it the
#    pip wheel of the version ansible-test asks for, downloaded from PyPI by .venv's pip: the
#    stand-in installs pip from that wheel, as get-pip.py does from the pip packed into it.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="$REPO/.venv/bin/python"
NAME=sanity
# shellcheck source=ci/steps.sh
source "$REPO/ci/steps.sh"
T0=$SECONDS
TREE="$REPO/build/sanity/ansible_collections/sglang/layouts"

# the Makefile's settings for the repo's playbooks are no part of a collection's test
unset ANSIBLE_CONFIG ANSIBLE_COLLECTIONS_PATH ANSIBLE_CALLBACKS_ENABLED

CORE="$("$PY" -c 'from ansible.release import __version__ as v; print(".".join(v.split(".")[:2]))')"
PYVER="$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
PIP_VERSION="$("$PY" -c '
import types
from ansible_test._internal.python_requirements import get_venv_packages
print(get_venv_packages(types.SimpleNamespace(version="'"$PYVER"'"))["pip"])')"

"$PY" "$REPO/ci/build_collection.py" --no-build --tree "$TREE" >/dev/null
IGNORE="tests/sanity/ignore-$CORE.txt"
if [[ -f "$REPO/$IGNORE" ]]; then
  mkdir -p "$TREE/tests/sanity"
  cp "$REPO/$IGNORE" "$TREE/$IGNORE"
else
  echo "sanity: no $IGNORE for ansible-core $CORE: move the entries of the older file there" >&2
fi

ROOT="$(machine_cache_root)"
TEST_HOME="$ROOT/ansible-test"
if ((${#TEST_HOME} > 60)); then
  echo "sanity: $TEST_HOME is too long for ansible-test's venv paths (60 characters at most); set SGLANG_LAYOUTS_CACHE to a shorter folder" >&2
  exit 2
fi
mkdir -p "$TEST_HOME/.ansible/test/cache" "$TEST_HOME/.config"
exec 9>"$TEST_HOME.lock"
flock 9
for conf in .config/pip .pip; do
  if [[ -e "$HOME/$conf" ]]; then ln -sfn "$HOME/$conf" "$TEST_HOME/$conf"; else rm -f "$TEST_HOME/$conf"; fi
done
CACHE="$TEST_HOME/.ansible/test/cache"
WHEEL="$CACHE/pip-$PIP_VERSION-py3-none-any.whl"
if [[ ! -f "$WHEEL" ]]; then
  "$PY" -m pip download -q --disable-pip-version-check --no-deps -d "$CACHE" "pip==$PIP_VERSION"
fi
cp "$REPO/ci/ansible_test_get_pip.py" "$CACHE/get_pip_${PIP_VERSION//./_}.py"

echo "sanity: ansible-test $CORE sanity, Python $PYVER, tree $TREE, venvs in $TEST_HOME/.ansible/test/venv"
rc=0
(cd "$TREE" && HOME="$TEST_HOME" ANSIBLE_TEST_CONTENT_ROOT="$TREE" \
  "$REPO/.venv/bin/ansible-test" sanity --python "$PYVER" --local "$@") || rc=$?
echo "sanity: $((SECONDS - T0)) s, exit $rc"
exit "$rc"
