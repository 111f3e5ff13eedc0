#!/usr/bin/env bash
# make lint: ruff, yamllint and ansible-lint (production profile), every warning a failure.
# ansible-lint's --strict fails on its own rules' warnings; what Ansible's YAML loader or Python
# warns while it reads the tree (a duplicate mapping key: "Using last defined value only") is
# printed but never fails it, so its output is searched for those too.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
# ansible-lint runs ansible-playbook and friends from PATH (and warns when its own folder is not on it)
export PATH="$PWD/$BIN:$PATH"
rc=0
"$BIN/ruff" check . || rc=1
"$BIN/ruff" format --check . || rc=1
"$BIN/yamllint" -s . || rc=1
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$BIN/ansible-lint" --strict --profile production >"$out" 2>&1 || rc=1
cat "$out"
# Python warnings (AnsibleWarning, DeprecationWarning, ...) and Ansible's [WARNING] lines; the
# summary's "0 warning(s)" is neither.
if grep -E '\w*Warning\b|\bWARNING\b|\[WARNING\]' "$out" >/dev/null; then
  echo "lint: ansible-lint printed warnings (above); each is a failure here" >&2
  rc=1
fi
exit "$rc"
