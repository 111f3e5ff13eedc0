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
failed=()
"$BIN/ruff" check . || failed+=("ruff check")
"$BIN/ruff" format --check . || failed+=("ruff format --check")
"$BIN/yamllint" -s . || failed+=(yamllint)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$BIN/ansible-lint" --strict --profile production >"$out" 2>&1 || failed+=("ansible-lint (exit $?)")
cat "$out"
# Python warnings (AnsibleWarning, DeprecationWarning, ...) and Ansible's [WARNING] lines; the
# summary's "0 warning(s)" is neither.
if grep -E '\w*Warning\b|\bWARNING\b|\[WARNING\]' "$out" >/dev/null; then
  echo "lint: ansible-lint printed warnings (above); each is a failure here" >&2
  failed+=("ansible-lint warnings")
fi
if ((${#failed[@]})); then
  printf 'lint: FAILED: %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "lint: ruff, yamllint and ansible-lint passed"
