#!/usr/bin/env bash
# CLI integration tests: runs the real gridq binary. Usage: run_cli_tests.sh GRIDQ_BIN REPO_ROOT
# Prints "N passed, M failed" and exits non-zero when anything failed. GRIDQ_CLI_ONLY=NAME runs t_NAME.sh only.
set -u
GRIDQ="${1:?usage: run_cli_tests.sh GRIDQ_BIN REPO_ROOT}"
ROOT="${2:?usage: run_cli_tests.sh GRIDQ_BIN REPO_ROOT}"
MODEL="$ROOT/models/laguna-tiny-code"
PY="${PYTHON:-python3}"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/gridq_cli.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT

PASSED=0
FAILED=0
pass() { PASSED=$((PASSED + 1)); echo "PASS $1"; }
fail() { FAILED=$((FAILED + 1)); echo "FAIL $1${2:+: $2}"; }

# Every tests/cli/t_*.sh file holds the tests of one command; each is sourced in name order.
# GRIDQ_CLI_ONLY=device runs only t_device.sh (while working on one command; CI runs them all).
for f in "$(dirname "${BASH_SOURCE[0]}")"/t_${GRIDQ_CLI_ONLY:-*}.sh; do
  [ -f "$f" ] && source "$f"
done

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
