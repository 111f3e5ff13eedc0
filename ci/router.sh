#!/usr/bin/env bash
# sglang-router (PyPI) in a venv in the machine-level cache, for tests that put a router in front
# of simulated replicas; the role's pip task then finds the pin installed and changes nothing.
#
#   ci/router.sh [version]       prints the venv's path (default version: group_vars/all/engine.yml)
#   ci/router.sh --wheels [version]
#                                prints the path of a wheelhouse holding sglang-router and every
#                                dependency as wheels for PYTHON: what an offline host installs with
#                                --no-index --find-links (the Molecule scenarios with a router);
#                                <that path>.tar holds the same files
#
# The venv: ${SGLANG_LAYOUTS_CACHE:-/var/cache/sglang-layouts}/sglang-router-<version>-py<X.Y>/
#           (falls back to ${XDG_CACHE_HOME:-~/.cache}/sglang-layouts when that is not writable)
# Idempotent: a venv with the stamp and an importable sglang_router is reused (well under 1 s);
# otherwise it is rebuilt (python3 -m venv + pip install sglang-router==<version>). A lock (flock)
# serialises concurrent runs. ROUTER_REBUILD=1 forces a rebuild. Logs go to stderr.
# PYTHON (default /usr/bin/python3, else python3): the system interpreter, because the router runs
# as the unprivileged service user, who cannot reach an interpreter under /root (pyenv).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WHEELS=0
if [[ "${1:-}" == --wheels ]]; then
  WHEELS=1
  shift
fi
VERSION="${1:-$(awk -F'"' '/^sglang_router_version:/{print $2}' "$REPO/group_vars/all/engine.yml")}"
[[ "$VERSION" =~ ^[0-9]+(\.[0-9A-Za-z]+)+$ ]] || { echo "router.sh: '$VERSION' is not a version" >&2; exit 2; }
if [[ -z "${PYTHON:-}" ]]; then
  PYTHON=python3
  [[ -x /usr/bin/python3 ]] && PYTHON=/usr/bin/python3
fi
PYVER="$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
CACHE_ROOT="${SGLANG_LAYOUTS_CACHE:-/var/cache/sglang-layouts}"
if ! mkdir -p "$CACHE_ROOT" 2>/dev/null || [[ ! -w "$CACHE_ROOT" ]]; then
  CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/sglang-layouts"
  mkdir -p "$CACHE_ROOT"
fi
VENV="$CACHE_ROOT/sglang-router-$VERSION-py$PYVER"
if [[ $WHEELS == 1 ]]; then
  DIR="$CACHE_ROOT/sglang-router-$VERSION-wheels-py$PYVER"
  exec 9>"$DIR.lock"
  flock 9
  if [[ "${ROUTER_REBUILD:-0}" != 1 && -f "$DIR/.wheels-ok" && -f "$DIR.tar" ]] && ls "$DIR"/sglang_router-"$VERSION"-*.whl >/dev/null 2>&1; then
    echo "$DIR"
    exit 0
  fi
  rm -rf "$DIR"
  mkdir -p "$DIR"
  T0=$SECONDS
  # pip wheel: a dependency published only as an sdist is built here, not on the offline host
  out=$(PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PIP_CACHE_DIR="$CACHE_ROOT/pip" \
    "$PYTHON" -m pip wheel -q -w "$DIR" "sglang-router==$VERSION" 2>&1) ||
    { echo "$out" | grep -v "^WARNING: Location" >&2; echo "router.sh: pip wheel sglang-router==$VERSION failed" >&2; exit 1; }
  # and as one archive beside it: a host gets it in one transfer, not one per file
  tar -cf "$DIR.tar" -C "$DIR" . || exit 1
  touch "$DIR/.wheels-ok"
  echo "router.sh: $(ls "$DIR" | wc -l) wheels in $((SECONDS - T0)) s ($(du -sh "$DIR" | cut -f1))" >&2
  echo "$DIR"
  exit 0
fi
STAMP="$VENV/.router-ok"
FP="sglang-router==$VERSION python=$("$PYTHON" -c 'import sys; print(sys.version.split()[0])')"
exec 9>"$VENV.lock"
flock 9
T0=$SECONDS
imports() {
  (cd / && "$VENV/bin/python" -c 'import importlib.metadata as m, sys, sglang_router.launch_router; sys.exit(m.version("sglang-router") != sys.argv[1])' "$VERSION") 2>/dev/null
}
ok() { [[ -f "$STAMP" && "$(cat "$STAMP")" == "$FP" ]] && imports; }
if [[ "${ROUTER_REBUILD:-0}" != 1 ]] && ok; then
  echo "$VENV"
  exit 0
fi
rm -rf "$VENV"
echo "router.sh: building $VENV (sglang-router==$VERSION)" >&2
"$PYTHON" -m venv "$VENV" >&2
PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PIP_CACHE_DIR="$CACHE_ROOT/pip" \
  "$VENV/bin/python" -m pip install -q "sglang-router==$VERSION" 2>&1 | grep -v "^WARNING: Location" >&2 || true
imports || { echo "router.sh: sglang_router does not import from $VENV" >&2; exit 1; }
echo "$FP" >"$STAMP"
echo "router.sh: built in $((SECONDS - T0)) s ($(du -sh "$VENV" | cut -f1))" >&2
echo "$VENV"
