#!/usr/bin/env bash
# sglang-router (PyPI) in a venv in the machine-level cache, for tests that put a router in front
# of simulated replicas; the role's pip task then finds the pin installed and changes nothing.
#
#   ci/router.sh [version]       prints the venv's path (default version: group_vars/all/engine.yml)
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
