#!/usr/bin/env bash
# Seconds per stage of `make test`, so a slow run says where its time went.
#   ci/stage.sh NAME CMD [ARG...]   run CMD, record its wall seconds and exit status as stage NAME
#   ci/stage.sh summary             print "stage <name>: <seconds> s" for every stage recorded, in
#                                   the order they started ("(failed)" after a non-zero status)
# Records live in $STAGES_DIR (default build/stages), one file per stage; `make test` empties it first.
set -uo pipefail
DIR=${STAGES_DIR:-$(cd "$(dirname "$0")/.." && pwd)/build/stages}
mkdir -p "$DIR"
if [[ ${1:-} == summary ]]; then
  shopt -s nullglob
  files=("$DIR"/*.stage)
  [[ ${#files[@]} -gt 0 ]] || { echo "stage: none recorded in $DIR"; exit 0; }
  # each file: start end status name
  for f in "${files[@]}"; do cat "$f"; echo; done | sort -n | while read -r start end status name; do
    [[ -n $name ]] || continue
    if [[ $end == - ]]; then
      echo "stage $name: $(($(date +%s) - start)) s (did not finish)"
    elif [[ $status == 0 ]]; then
      echo "stage $name: $((end - start)) s"
    else
      echo "stage $name: $((end - start)) s (failed, exit $status)"
    fi
  done
  exit 0
fi
name=${1:?usage: ci/stage.sh NAME CMD... | summary}
shift
[[ $name =~ ^[a-z0-9_-]+$ ]] || { echo "stage: bad name '$name'" >&2; exit 2; }
start=$(date +%s)
printf '%s - - %s' "$start" "$name" >"$DIR/$name.stage"
"$@"
status=$?
printf '%s %s %s %s' "$start" "$(date +%s)" "$status" "$name" >"$DIR/$name.stage"
exit "$status"
