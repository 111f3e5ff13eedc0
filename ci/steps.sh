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
