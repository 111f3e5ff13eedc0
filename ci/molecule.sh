#!/usr/bin/env bash
# Run Molecule scenarios on real systemd hosts (podman containers whose PID 1 is systemd).
#   ci/molecule.sh            every scenario directory under molecule/
#   ci/molecule.sh default    one scenario (make molecule S=default)
# Installs podman/runc/mmdebstrap with apt when missing (idempotent), builds the
# systemd image once (ci/build-systemd-image.sh), runs `molecule test` for the scenarios side
# by side (MOLECULE_JOBS at a time) and prints "molecule: N passed, N failed".
# Where podman cannot run (not root, no apt, a runtime that refuses to start a
# container) it says so and FAILS: CI must never pass without these scenarios.
# The three fixes this kind of CI VM needs: runc instead of crun,
# ulimits <= the podman process's hard limits (molecule.yml), the machine's CA in the image.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
t0=$SECONDS
IMAGE=${IMAGE:-localhost/debian-systemd:bookworm}
export IMAGE

die() {
  echo "molecule: CANNOT RUN: $*" >&2
  echo "molecule: 0 passed, 1 failed (podman unavailable: the systemd scenarios did not run)" >&2
  exit 1
}

# One molecule run at a time on a machine: scenarios share platform names and the image,
# and a second run's destroy step would remove the first run's containers.
LOCK=${MOLECULE_LOCK:-/tmp/sglang-layouts-molecule.lock}
exec 9>"$LOCK"
if ! flock -n 9; then
  echo "== another molecule run holds $LOCK; waiting for it"
  flock 9
fi

# 1. podman + runc + mmdebstrap (apt, only when missing).
if ! command -v podman >/dev/null || ! command -v runc >/dev/null || ! command -v mmdebstrap >/dev/null; then
  [[ $(id -u) == 0 ]] || die "podman/runc/mmdebstrap are missing and installing them needs root (apt-get install podman runc mmdebstrap)"
  command -v apt-get >/dev/null || die "podman/runc/mmdebstrap are missing and there is no apt-get to install them"
  export DEBIAN_FRONTEND=noninteractive
  # With Recommends: without containernetworking-plugins every podman call warns about CNI.
  { apt-get update -q && apt-get install -y -q podman runc mmdebstrap; } >/tmp/molecule-apt.log 2>&1 ||
    die "apt-get install podman runc mmdebstrap failed (log: /tmp/molecule-apt.log)"
fi
echo "== podman $(podman --version | awk '{print $3}') ready in $((SECONDS - t0)) s"

# 2. The systemd image (once; REBUILD=1 forces a rebuild).
ci/build-systemd-image.sh || die "building the systemd image $IMAGE failed"

# 3. Can podman really boot a systemd container here? (crun/rlimits/cgroups problems show up now, clearly.)
probe=molecule-probe-$$
if ! out=$(podman run -d --rm --name "$probe" --runtime "${MOLECULE_PODMAN_RUNTIME:-runc}" --systemd=always \
  --ulimit nofile=16384:16384 --ulimit nproc=16384:16384 "$IMAGE" /sbin/init 2>&1); then
  die "podman cannot start a systemd container on this machine: $out"
fi
podman rm -f -t 2 "$probe" >/dev/null 2>&1 || true
echo "== image + probe ready in $((SECONDS - t0)) s"

# 4. sglang-router's wheels for the scenarios with a router: installed offline from them, as on a
#    GPU host, not from the index in every run (molecule/pd and molecule/replicas, prepare).
SGLANG_MOLECULE_ROUTER_WHEELS=$(ci/router.sh --wheels) || die "ci/router.sh --wheels failed"
export SGLANG_MOLECULE_ROUTER_WHEELS

# 5. The scenarios: every directory under molecule/ holding a molecule.yml, or the one asked for.
export PATH=$ROOT/.venv/bin:$PATH # molecule shells out to ansible-config, ansible-playbook
export ANSIBLE_COLLECTIONS_PATH=${ANSIBLE_COLLECTIONS_PATH:-$ROOT/.venv/collections}
export ANSIBLE_FORCE_COLOR=0 PY_COLORS=0 NO_COLOR=1
command -v molecule >/dev/null || die "molecule is not installed in .venv (run: make venv)"
if [[ $# -gt 0 && -n ${1:-} ]]; then
  scenarios=("$@")
else
  scenarios=()
  for d in molecule/*/; do
    [[ -f $d/molecule.yml ]] && scenarios+=("$(basename "$d")")
  done
fi
[[ ${#scenarios[@]} -gt 0 ]] || die "no scenario found under molecule/"
# The scenarios run side by side (MOLECULE_JOBS at a time, default all; each has its own
# containers, podman network and ephemeral folder), so that the CPU is not idle while one of
# them waits on its hosts (systemd's boot, the engine's start, the gate, a benchmark).
# Each scenario's output goes to its own log, printed whole when the scenario ends.
JOBS=${MOLECULE_JOBS:-${#scenarios[@]}}
[[ $JOBS =~ ^[1-9][0-9]*$ ]] || die "MOLECULE_JOBS=$JOBS is not a positive number"
LOGS=$(mktemp -d /tmp/sglang-layouts-molecule.XXXXXX)
# one AnsiballZ cache for every playbook of this run (tests/plugins/callback/ansiballz_shared_cache.py)
export SGLANG_LAYOUTS_ANSIBALLZ_CACHE=$LOGS/ansiballz
# podman puts the containers in cgroups of their own (libpod_parent under cgroup v1's cpuacct), out
# of reach of ci/stage.sh's count: their CPU seconds are read here, before and after
CONTAINERS_CPU=/sys/fs/cgroup/cpuacct/libpod_parent/cpuacct.usage
containers_ns0=$(cat "$CONTAINERS_CPU" 2>/dev/null || true)
declare -A pid_of=() started=()
rc=0
pass=0
fail=0
finish() { # finish SCENARIO STATUS: print its log and its verdict, count it
  local s=$1 status=$2 r=ok
  echo "== scenario $s: log"
  cat "$LOGS/$s.log"
  if [[ $status == 0 ]]; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    rc=1
    r=FAILED
  fi
  echo "== scenario $s: $r, $((SECONDS - started[$s])) s"
}
wait_one() { # wait for any running scenario, then finish it
  local s status=0
  wait -n -p done_pid "${pid_of[@]}" || status=$?
  for s in "${!pid_of[@]}"; do
    if [[ ${pid_of[$s]} == "$done_pid" ]]; then
      unset "pid_of[$s]"
      finish "$s" "$status"
      return
    fi
  done
}
for s in "${scenarios[@]}"; do
  if [[ ! -f molecule/$s/molecule.yml ]]; then
    echo "== scenario $s: no molecule/$s/molecule.yml" >&2
    fail=$((fail + 1))
    rc=1
    continue
  fi
  while [[ ${#pid_of[@]} -ge $JOBS ]]; do wait_one; done
  started[$s]=$SECONDS
  echo "== scenario $s: started"
  molecule test -s "$s" >"$LOGS/$s.log" 2>&1 &
  pid_of[$s]=$!
done
while [[ ${#pid_of[@]} -gt 0 ]]; do wait_one; done
rm -rf "$LOGS"
# The platforms of the scenarios run here may not survive a failed run (only ours: never
# remove other containers labelled owner=molecule).
for s in "${scenarios[@]}"; do
  [[ -f molecule/$s/molecule.yml ]] || continue
  "$ROOT/.venv/bin/python" - "molecule/$s/molecule.yml" <<'PY' | xargs -r podman rm -f -t 5 >/dev/null 2>&1 || true
import sys, yaml
for p in (yaml.safe_load(open(sys.argv[1])) or {}).get("platforms") or []:
    print(p["name"])
PY
done
echo "== total $((SECONDS - t0)) s"
if [[ -n $containers_ns0 && -r $CONTAINERS_CPU ]]; then
  containers_s=$((($(cat "$CONTAINERS_CPU") - containers_ns0) / 1000000000))
  echo "== the containers' CPU: $containers_s s"
  # beside the stages' own counts, for `make test`'s summary (ci/stage.sh)
  stages=${STAGES_DIR:-$ROOT/build/stages}
  [[ -d $stages ]] && echo "$containers_s" >"$stages/molecule-containers.cpu"
fi
echo "molecule: $pass passed, $fail failed"
exit $rc
