#!/usr/bin/env bash
# Collections come from the `ansible` wheel on PyPI: Galaxy is not reachable from CI.
# Usage: ci/collections.sh <python> <dest>
set -euo pipefail
PY=$1 DEST=$2
ANSIBLE_WHEEL_VERSION=12.3.0
if [[ -d $DEST/ansible_collections/containers/podman ]]; then exit 0; fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$PY" -m pip download -q --no-deps --disable-pip-version-check -d "$tmp" "ansible==$ANSIBLE_WHEEL_VERSION"
mkdir -p "$DEST"
"$PY" - "$tmp"/ansible-$ANSIBLE_WHEEL_VERSION-py3-none-any.whl "$DEST" <<'PY'
import sys, zipfile
whl, dest = sys.argv[1:]
keep = tuple("ansible_collections/" + c + "/" for c in
             ("containers/podman", "community/general", "ansible/posix", "community/docker"))
with zipfile.ZipFile(whl) as z:
    z.extractall(dest, [m for m in z.namelist() if m.startswith(keep)])
PY
