#!/usr/bin/env bash
# Where make test's CPU goes: each integration test file and each Molecule scenario run alone, one
# after the other, with the machine's CPU seconds around it (/proc/stat: user + nice + system + irq +
# softirq of every core, so the engines the supervisor detaches and the containers are counted; run
# it on an otherwise idle machine). Molecule's lines add ci/molecule.sh's own count of its containers.
#   benchmarks/cpu_by_part.sh                 every integration file, then every scenario
#   benchmarks/cpu_by_part.sh integration     only the files;  benchmarks/cpu_by_part.sh molecule
#   CPU_BY_PART_SCENARIOS=provision benchmarks/cpu_by_part.sh molecule    one scenario
set -u
cd "$(dirname "$0")/.."
cpu() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8}' /proc/stat; }
hz=$(getconf CLK_TCK)
what=${1:-all}
# the test sessions' shared payload cache (tests/conftest.py makes one per session otherwise)
export SGLANG_LAYOUTS_ANSIBALLZ_CACHE=${SGLANG_LAYOUTS_ANSIBALLZ_CACHE:-$(mktemp -d /tmp/cpu-by-part.XXXXXX)}
if [[ $what == all || $what == integration ]]; then
  for f in tests/integration/test_*.py; do
    a=$(cpu) t=$SECONDS
    last=$(.venv/bin/python -m pytest -q -p no:cacheprovider "$f" 2>&1 | tail -1)
    echo "integration $(basename "$f"): $(( ($(cpu) - a) / hz )) CPU s, $((SECONDS - t)) s wall :: $last"
  done
fi
if [[ $what == all || $what == molecule ]]; then
  for d in molecule/${CPU_BY_PART_SCENARIOS:-*}/; do
    [[ -f $d/molecule.yml ]] || continue
    s=$(basename "$d") a=$(cpu) t=$SECONDS
    ci/molecule.sh "$s" > "/tmp/cpu-by-part-$s.log" 2>&1
    rc=$?
    echo "molecule $s: $(( ($(cpu) - a) / hz )) CPU s, $((SECONDS - t)) s wall, rc $rc;" \
      "$(grep -o "the containers' CPU: [0-9]* s" "/tmp/cpu-by-part-$s.log")"
  done
fi
