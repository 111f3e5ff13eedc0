# Sourced by the ci/ scripts that build a venv in named steps (oracle.sh, vllm.sh): a timed log
# line per step, and on any failing command the step's name and the tail of the install log.
# The caller sets NAME (its name in messages), LOG (the install log), HINT (what to do after a
# failure) and STEP before each step, then calls `trap on_error ERR`.
T0=$SECONDS
STEP="start"

log() { printf '%s [%3ds] %s\n' "$NAME" "$((SECONDS - T0))" "$*"; }

on_error() {
  local rc=$?
  echo "$NAME: FAILED (exit $rc) during: $STEP" >&2
  if [[ -s "$LOG" ]]; then
    echo "---- last 40 lines of $LOG ----" >&2
    tail -n 40 "$LOG" >&2
    echo "---- end of log ----" >&2
  fi
  echo "$NAME: $HINT" >&2
  exit "$rc"
}

# The machine-level cache of the venvs that every clone and CI run on this machine share:
# SGLANG_LAYOUTS_CACHE, else /var/cache/sglang-layouts, else (not writable there)
# ${XDG_CACHE_HOME:-~/.cache}/sglang-layouts. Prints its absolute path.
machine_cache_root() {
  local root="${SGLANG_LAYOUTS_CACHE:-/var/cache/sglang-layouts}"
  if ! mkdir -p "$root" 2>/dev/null || [[ ! -w "$root" ]]; then
    if [[ -n "${SGLANG_LAYOUTS_CACHE:-}" ]]; then
      echo "$NAME: SGLANG_LAYOUTS_CACHE=$root is not a writable directory" >&2
      return 1
    fi
    root="${XDG_CACHE_HOME:-$HOME/.cache}/sglang-layouts"
    mkdir -p "$root"
  fi
  (cd "$root" && pwd)
}

# venv_pip PYTHON install|uninstall ARG...: pip's work on the venv of PYTHON, done by uv where the
# controller venv has it (requirements.txt pins it), else by that venv's own pip. uv resolves and
# downloads in parallel, compiles no bytecode (Python compiles what it imports, once) and links the
# files of one download cache (UV_CACHE_DIR, under the machine cache root) into every venv, so the
# oracle and the vLLM venv share one unpacked CPU torch: about a tenth of pip's CPU time for the
# oracle's 2.2 GB. pip's find-links (PIP_FIND_LINKS, else pip's config) reach uv too.
venv_pip() {
  local py=$1 cmd=$2
  shift 2
  local uv=${UV:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.venv/bin/uv}
  if [[ ! -x $uv ]]; then
    "$py" -m pip "$cmd" "$@"
    return
  fi
  local args=() links=() link
  for link in ${PIP_FIND_LINKS:-$("$py" -m pip config get global.find-links 2>/dev/null || true)}; do
    links+=(--find-links "$link")
  done
  for link in "$@"; do
    [[ $link == -y ]] || args+=("$link") # uv uninstall never asks
  done
  case $cmd in
    install) "$uv" pip install --python "$py" "${links[@]}" "${args[@]}" ;;
    *) "$uv" pip "$cmd" --python "$py" "${args[@]}" ;;
  esac
}
