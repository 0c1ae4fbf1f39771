#!/usr/bin/env bash
# Creates .venv with Python >= 3.11 and installs Ridgeline into it. `scripts/setup.sh dev` adds the test tools;
# `scripts/setup.sh loadtools` the load-testing tools (aiperf, GuideLLM) in .venv-loadtools, alone.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-}"
if [ -z "$PYTHON" ]; then
  for candidate in python3.13 python3.12 python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1 &&
       "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
      PYTHON="$candidate"; break
    fi
  done
fi
[ -n "$PYTHON" ] || { echo "Ridgeline needs Python >= 3.11" >&2; exit 1; }

# `scripts/setup.sh loadtools`: the load-testing tools the emulator's tests run (tests/emulate), in their own
# .venv-loadtools: their pins would move the service's own packages back (aiperf: orjson ~=3.11.7, pillow ~=12.3,
# rich ~=14.1; GuideLLM: click ~=8.4, and torch). `ridgeline-worker serving-bench` finds them there too.
LOADTOOLS="aiperf==0.13.0 guidellm==0.8.1"
if [ "${1:-}" = "loadtools" ]; then
  if [ ! -x .venv-loadtools/bin/python ] || [ "$(cat .venv-loadtools/.ridgeline-tools 2>/dev/null)" != "$LOADTOOLS" ]; then
    "$PYTHON" -m venv .venv-loadtools
    # shellcheck disable=SC2086
    .venv-loadtools/bin/python -m pip install --quiet $LOADTOOLS
    echo "$LOADTOOLS" >.venv-loadtools/.ridgeline-tools
  fi
  exit 0
fi

if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
if [ "${1:-}" = "dev" ]; then
  .venv/bin/python -m pip install --quiet -e ".[dev]"
else
  .venv/bin/python -m pip install --quiet -e .
fi
