#!/usr/bin/env bash
# Installs exactly what gridq needs to build and test on a fresh Debian 12 machine, idempotently:
# the Debian build dependencies and a Python venv (.venv) with the packages the tests compare against.
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(build-essential cmake ninja-build pkg-config clang libclang-rt-14-dev clang-format ccache
      nlohmann-json3-dev libcli11-dev libfmt-dev libssl-dev libpcre2-dev libgtest-dev libgmock-dev
      libbenchmark-dev libomp-dev libboost1.81-dev python3-venv)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup-deps: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Python test tools: the independent references (tokenizers, jinja2) and the client the server is tested with.
PY=${PYTHON:-python3}
# A venv left half-made by an interrupted run (python but no pip) is made again, not trusted.
if [ ! -x .venv/bin/python ] || ! .venv/bin/python -m pip --version >/dev/null 2>&1; then
  echo "setup-deps: creating .venv"
  "$PY" -m venv --clear .venv
fi
REQ=scripts/requirements-test.txt
STAMP=.venv/.req-stamp
if [ ! -f "$STAMP" ] || ! cmp -s "$REQ" "$STAMP"; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r "$REQ"
  cp "$REQ" "$STAMP"
fi
echo "setup-deps: ok"
