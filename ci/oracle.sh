#!/usr/bin/env bash
# Build the SGLang "oracle" venv: the pinned SGLang's own Python code (argument parser,
# ServerArgs validation, bench_serving) on a machine with no GPU, for tests/conformance.
#
#   ci/oracle.sh <link> <sglang-version>      # make oracle: ci/oracle.sh .venv/sglang 0.5.23
#
# The venv lives in a machine-level cache shared by every clone and CI run on this machine,
# one folder per fingerprint of its inputs (below), and <link> points at it (as ci/vllm.sh):
#   ${SGLANG_LAYOUTS_CACHE:-/var/cache/sglang-layouts}/sglang-oracle-<version>-<fingerprint>/
#   (falls back to ${XDG_CACHE_HOME:-~/.cache}/sglang-layouts when that is not writable)
# A fresh clone then links a venv another clone built (~1 s) instead of installing 2.3 GB again.
#
# What it does (docs/cpu-engines.md):
#   - python3 -m venv <cache>/sglang-oracle-<version>-<fingerprint>
#   (each install by uv where .venv has it, else pip: ci/steps.sh venv_pip)
#   - pip install -r requirements-sglang-oracle.txt   (CPU torch, transformers, datasets, ...)
#   - pip install --no-deps sglang==<version>          (the wheel's ~80 GPU deps are left out)
#   - pip install -r requirements-sglang-oracle-<version>.txt where there is one: a release
#     other than the pin installs its own few pins over that set (make flags SGLANG_VERSION=...)
#   - trims triton's CUDA/ROCm binaries (~500 MB; only `import triton` is needed)
#   - a copy of ci/shims/ (the torchvision stub) in the venv, and a .pth file that puts it on
#     sys.path and points every cache SGLang, HF, torch and triton write (SGLANG_CACHE_DIR,
#     HF_HOME, ...) at <venv>/cache/, and sets HF_HUB_OFFLINE=1: nothing lands in ~, nothing is
#     downloaded, nothing refers to the clone that built it.
#     Each is a default (os.environ.setdefault); an exported value wins.
#   - a smoke test: import ServerArgs and bench_serving, check the stub is the torchvision seen.
#   - older venvs of the same version that no run holds (flock) are removed.
# Idempotent: the fingerprint of the inputs (version, requirements, shim, this script, python)
# names the folder and is stored in it (.oracle-fingerprint) once the build succeeded; when it is
# there and sglang imports, it only (re)points the link. ORACLE_REBUILD=1 deletes the venv first.
# A lock (flock) serialises concurrent runs. PYTHON picks the interpreter.
set -euo pipefail
NAME="oracle.sh"
# shellcheck source=ci/steps.sh
source "$(dirname "${BASH_SOURCE[0]}")/steps.sh"

usage() { echo "usage: $0 <link> <sglang-version>   (e.g. $0 .venv/sglang 0.5.23)" >&2; exit 2; }
[[ $# -eq 2 && -n "$1" && -n "$2" ]] || usage
SGLANG_VERSION="$2"
[[ "$SGLANG_VERSION" =~ ^[0-9]+(\.[0-9A-Za-z]+)+$ ]] || {
  echo "oracle.sh: '$SGLANG_VERSION' does not look like an SGLang version (e.g. 0.5.23)" >&2; exit 2; }

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mkdir -p "$(dirname "$1")"
LINK="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
REQ="$REPO/requirements-sglang-oracle.txt"
REQ_VERSION="$REPO/requirements-sglang-oracle-$SGLANG_VERSION.txt"
SHIMS_SRC="$REPO/ci/shims"
PYTHON="${PYTHON:-python3}"
for f in "$REQ" "$SHIMS_SRC/torchvision/__init__.py"; do
  [[ -f "$f" ]] || { echo "oracle.sh: missing $f" >&2; exit 1; }
done
command -v "$PYTHON" >/dev/null || { echo "oracle.sh: no '$PYTHON' on PATH (set PYTHON=...)" >&2; exit 1; }

fingerprint() {
  {
    echo "sglang==$SGLANG_VERSION"
    "$PYTHON" -c 'import sys; print(sys.version)'
    cat "$REQ" "$SHIMS_SRC/torchvision/__init__.py" "${BASH_SOURCE[0]}"
    if [[ -f "$REQ_VERSION" ]]; then cat "$REQ_VERSION"; fi
  } | sha256sum | cut -d' ' -f1
}
FP="$(fingerprint)"

CACHE_ROOT="$(machine_cache_root)"
VENV="$CACHE_ROOT/sglang-oracle-$SGLANG_VERSION-${FP:0:16}"
SHIMS="$VENV/shims"
CACHE="$VENV/cache"
LOG="$VENV.install.log"
FP_FILE="$VENV/.oracle-fingerprint"
HINT="the venv at $VENV is incomplete; rerun 'make oracle' after fixing the cause (ORACLE_REBUILD=1 starts from scratch)."

# <link> is ours to manage: a folder there is an oracle venv of the layout before the cache.
if [[ -e "$LINK" && ! -L "$LINK" ]]; then
  log "replacing the folder $LINK by a link into $CACHE_ROOT"
  rm -rf "$LINK"
fi

# One build at a time per venv; another clone's run waits, then finds it built.
exec 9>"$VENV.lock"
if ! flock -n 9; then
  log "waiting for another ci/oracle.sh building $VENV"
  flock 9
fi

trap on_error ERR

if [[ "${ORACLE_REBUILD:-0}" == 1 && -d "$VENV" ]]; then
  log "ORACLE_REBUILD=1: removing $VENV"
  rm -rf "$VENV"
fi

# Fast path: same inputs as the last successful build and sglang still imports its version.
if [[ -f "$FP_FILE" && "$(cat "$FP_FILE")" == "$FP" && -x "$VENV/bin/python" ]] &&
   "$VENV/bin/python" - "$SGLANG_VERSION" "$SHIMS" <<'PY' 2>/dev/null
import importlib.metadata as md, importlib.util as iu, sys
assert md.version("sglang") == sys.argv[1]
assert iu.find_spec("torchvision").origin.startswith(sys.argv[2] + "/")
PY
then
  ln -sfn "$VENV" "$LINK"
  log "up to date: sglang $SGLANG_VERSION in $VENV; $1 -> it"
  exit 0
fi
rm -f "$FP_FILE"

STEP="create the venv"
if [[ ! -x "$VENV/bin/python" ]]; then
  log "creating $VENV with $("$PYTHON" --version 2>&1)"
  "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' ||
    { echo "oracle.sh: SGLang $SGLANG_VERSION needs Python >= 3.10" >&2; false; }
  "$PYTHON" -m venv "$VENV"
fi
mkdir -p "$CACHE"
: > "$LOG"
rm -rf "$SHIMS"
cp -r "$SHIMS_SRC" "$SHIMS"
export PIP_CACHE_DIR="$CACHE/pip" PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
export UV_CACHE_DIR="$CACHE_ROOT/uv" UV_NO_PROGRESS=1
PIP=(venv_pip "$VENV/bin/python")

STEP="pip install -r requirements-sglang-oracle.txt"
log "$STEP (log: $LOG)"
"${PIP[@]}" install -r "$REQ" >>"$LOG" 2>&1

STEP="pip install --no-deps sglang==$SGLANG_VERSION"
log "$STEP"
"${PIP[@]}" install --no-deps "sglang==$SGLANG_VERSION" >>"$LOG" 2>&1

if [[ -f "$REQ_VERSION" ]]; then
  STEP="pip install -r $(basename "$REQ_VERSION")"
  log "$STEP"
  "${PIP[@]}" install -r "$REQ_VERSION" >>"$LOG" 2>&1
fi

STEP="trim triton's GPU binaries"
SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
T="$SITE/triton"
if [[ -d "$T" ]]; then
  rm -rf "$T/backends/nvidia/bin" "$T/backends/nvidia/lib" "$T/backends/amd/lib" "$T/_C/libproton.so"
fi

STEP="write the .pth (torchvision stub, caches)"
# Lines of a .pth: a directory is appended to sys.path; a line starting with `import` runs.
"$VENV/bin/python" - "$SITE/sglang_oracle.pth" "$SHIMS" "$CACHE" <<'PY'
import sys
pth, shims, cache = sys.argv[1:]
env = {
    "SGLANG_CACHE_DIR": f"{cache}/sglang",
    "HF_HOME": f"{cache}/hf",
    "HF_HUB_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TORCHINDUCTOR_CACHE_DIR": f"{cache}/torchinductor",
    "TRITON_CACHE_DIR": f"{cache}/triton",
    "TORCH_HOME": f"{cache}/torch",
    "XDG_CACHE_HOME": f"{cache}/xdg",
    "TVM_FFI_CACHE_DIR": f"{cache}/tvm-ffi",
}
with open(pth, "w") as f:
    f.write(f"{shims}\n")
    f.write(f"import os; [os.environ.setdefault(k, v) for k, v in {sorted(env.items())!r}]\n")
PY

STEP="smoke test (import ServerArgs and bench_serving)"
log "$STEP"
(cd "$CACHE" && "$VENV/bin/python" - "$SGLANG_VERSION" "$SHIMS" >>"$LOG" 2>&1) <<'PY'
import importlib.metadata as md, sys
want, shims = sys.argv[1:]
import torchvision
assert torchvision.__file__.startswith(shims), torchvision.__file__
from sglang.srt.server_args import ServerArgs, prepare_server_args  # noqa: F401
import sglang.bench_serving  # noqa: F401
assert md.version("sglang") == want, md.version("sglang")
print("smoke OK: sglang", want, "torch", md.version("torch"))
PY

echo "$FP" > "$FP_FILE"
ln -sfn "$VENV" "$LINK"
log "done: sglang $SGLANG_VERSION in $VENV ($(du -sh "$VENV" | cut -f1)); $1 -> it"

# Older builds of this version (other inputs) that no run holds: 2.3 GB each.
for old in "$CACHE_ROOT/sglang-oracle-$SGLANG_VERSION-"*; do
  [[ -d $old && $old != "$VENV" ]] || continue
  if flock -n "$old.lock" true 2>/dev/null; then
    log "removing the older build $old"
    rm -rf "$old" "$old.lock" "$old.install.log"
  fi
done
