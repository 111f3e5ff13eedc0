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
