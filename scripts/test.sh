#!/usr/bin/env bash
# One command from a fresh clone to the whole test suite: lint, types, import contracts and pytest on every core
# (pytest-xdist), with the database tests on SQLite and, where the database matters, on the PostgreSQL at
# 127.0.0.1:5432 (database `test`, user `postgres`). A missing PostgreSQL or Chromium fails the run; nothing is
# skipped.
#
#   scripts/test.sh            the whole suite, as CI runs it
#   scripts/test.sh --fast     the fast tier: lint, types and every test not marked `slow`, databases on SQLite only
#
# Further arguments go to pytest (e.g. `scripts/test.sh --fast tests/roofline -x`).
set -euo pipefail
cd "$(dirname "$0")/.."
# Compiled bytecode is kept (__pycache__, ignored by git): every xdist worker, server and CLI process the tests start
# imports the same modules, and pytest caches its rewritten test modules there too.
unset PYTHONDONTWRITEBYTECODE

fast=0
if [ "${1:-}" = "--fast" ]; then
  fast=1
  shift
fi

# Set up (or bring up to date) .venv with the dev tools and the worker extra (JAX, CPU build: the worker's suites
# run on the CPU). Skipped when pyproject.toml has not changed since the last setup.
stamp=.venv/.ridgeline-setup
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ ! -x .venv/bin/python ] || [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  scripts/setup.sh dev
  .venv/bin/python -m pip install --quiet -e ".[dev,worker]"
  echo "$want" >"$stamp"
fi
# aiperf and GuideLLM for the emulator's tests (tests/emulate, slow): their own venv, made once per tool versions.
if [ "$fast" = "0" ]; then
  scripts/setup.sh loadtools >/dev/null
fi

if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing headless Chromium for the browser tests"
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
# One worker per core, and one more: many tests wait on a server process or the database rather than compute.
workers="$(($(nproc) + 1))"
if [ "$fast" = 1 ]; then
  exec .venv/bin/pytest -n "$workers" --dist loadgroup -m "not slow" --databases=sqlite "$@"
fi
.venv/bin/lint-imports --no-cache
exec .venv/bin/pytest -n "$workers" --dist loadgroup "$@"
