#!/usr/bin/env bash
# Seconds per stage of `make test`, so a slow run says where its time went.
#   ci/stage.sh NAME CMD [ARG...]   run CMD, record its wall seconds and exit status as stage NAME
#   ci/stage.sh summary             print "stage <name>: <seconds> s" for every stage recorded, in
#                                   the order they started ("(failed)" after a non-zero status),
#                                   then the last lines of each failed stage's output
# Records live in $STAGES_DIR (default build/stages), one file per stage, and each stage's output
# (stdout and stderr together) in <name>.log beside it; `make test` empties it first. CI shows only
# the end of a run's output, where a failed stage's own lines are long gone: the summary repeats them.
# Where the cgroup v1 cpuacct controller is writable (root), each stage runs in a cgroup of its own
# and the summary also prints "cpu <name>: <seconds> s", the CPU time of the stage's processes
# (containers, which podman puts in cgroups of their own, not included): on a busy 2-core box
# the wall seconds of stages that overlap say little about what each costs. A .cpu file without a
# stage (ci/molecule.sh writes molecule-containers.cpu: the containers' CPU) is printed after them.
set -uo pipefail
DIR=${STAGES_DIR:-$(cd "$(dirname "$0")/.." && pwd)/build/stages}
mkdir -p "$DIR"
if [[ ${1:-} == summary ]]; then
  shopt -s nullglob
  files=("$DIR"/*.stage)
  [[ ${#files[@]} -gt 0 ]] || { echo "stage: none recorded in $DIR"; exit 0; }
  # each file: start end status name
  for f in "${files[@]}"; do cat "$f"; echo; done | sort -n | {
  cpu=""
  while read -r start end status name; do
    [[ -n $name ]] || continue
    [[ -s $DIR/$name.cpu ]] && cpu+="cpu $name: $(cat "$DIR/$name.cpu") s"$'\n'
    if [[ $end == - ]]; then
      echo "stage $name: $(($(date +%s) - start)) s (did not finish)"
    elif [[ $status == 0 ]]; then
      echo "stage $name: $((end - start)) s"
    else
      echo "stage $name: $((end - start)) s (failed, exit $status)"
    fi
  done
  printf '%s' "$cpu"
  }
  # CPU counted outside any stage's cgroup (ci/molecule.sh: the containers')
  for f in "$DIR"/*.cpu; do
    name=$(basename "$f" .cpu)
    [[ -e $DIR/$name.stage ]] || echo "cpu $name: $(cat "$f") s"
  done
  for f in "${files[@]}"; do
    read -r _ end status name <"$f"
    [[ $end != - && $status != 0 && -s $DIR/$name.log ]] || continue
    echo "== stage $name failed (exit $status); its last ${STAGE_TAIL:-60} lines ($DIR/$name.log):"
    tail -n "${STAGE_TAIL:-60}" "$DIR/$name.log"
  done
  exit 0
fi
name=${1:?usage: ci/stage.sh NAME CMD... | summary}
shift
[[ $name =~ ^[a-z0-9_-]+$ ]] || { echo "stage: bad name '$name'" >&2; exit 2; }
start=$(date +%s)
printf '%s - - %s' "$start" "$name" >"$DIR/$name.stage"
ACCT=/sys/fs/cgroup/cpuacct
cg=$ACCT/sglang-layouts-stage-$name-$$
if [[ -w $ACCT/tasks ]] && mkdir "$cg" 2>/dev/null && ! echo $$ >"$cg/tasks" 2>/dev/null; then
  rmdir "$cg" 2>/dev/null
fi
"$@" 2>&1 | tee "$DIR/$name.log"
status=${PIPESTATUS[0]}
if [[ -r $cg/cpuacct.usage ]]; then
  echo $(($(cat "$cg/cpuacct.usage") / 1000000000)) >"$DIR/$name.cpu"
  echo $$ >"$ACCT/tasks" 2>/dev/null && rmdir "$cg" 2>/dev/null # busy while a process of the stage lives on
fi
printf '%s %s %s %s' "$start" "$(date +%s)" "$status" "$name" >"$DIR/$name.stage"
exit "$status"
