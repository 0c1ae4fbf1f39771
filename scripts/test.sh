#!/usr/bin/env bash
# One command from a fresh clone to the whole test suite: lint, types, import contracts and pytest, with the
# database tests on SQLite and on the PostgreSQL at 127.0.0.1:5432 (database `test`, user `postgres`).
# A missing PostgreSQL or Chromium fails the run; nothing is skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh dev
# The worker extra (JAX, CPU build): the worker's suites run in the test suite on the CPU.
.venv/bin/python -m pip install --quiet -e ".[dev,worker]"

if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing headless Chromium for the Swagger UI test"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "headless Chromium is required (Debian package 'chromium')" >&2; exit 1
  fi
fi

# The database tests need the local PostgreSQL; start the machine's cluster if it is installed but down.
if command -v pg_isready >/dev/null 2>&1 && ! pg_isready -q -h 127.0.0.1 -p 5432; then
  if command -v pg_ctlcluster >/dev/null 2>&1 && [ -d /etc/postgresql ]; then
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n 1)" main start || true
  fi
fi

.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/lint-imports --no-cache
.venv/bin/pytest "$@"
