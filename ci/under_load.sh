#!/usr/bin/env bash
# Run a command while N CPU-bound processes run beside it (make test-under-load): no test's
# verdict may depend on how busy the machine is.
#   ci/under_load.sh N CMD [ARG...]
set -uo pipefail
n=${1:?usage: ci/under_load.sh N CMD...}
shift
[[ $n =~ ^[0-9]+$ ]] || { echo "under_load: N must be a number, not '$n'" >&2; exit 2; }
pids=()
cleanup() { [[ ${#pids[@]} -gt 0 ]] && kill "${pids[@]}" 2>/dev/null; }
trap cleanup EXIT
for _ in $(seq 1 "$n"); do
  # plain busy loops at normal priority, as another user's job would be
  sh -c 'while :; do :; done' &
  pids+=("$!")
done
echo "== under_load: $n CPU-bound processes beside: $*"
"$@"
