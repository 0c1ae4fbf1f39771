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
# virtualenv: their pins would move the service's own packages back (aiperf: orjson ~=3.11.7, pillow ~=12.3,
# rich ~=14.1; GuideLLM: click ~=8.4, and torch). PyTorch 2.13.0 goes in first, so GuideLLM's unpinned `torch` takes
# it (on this project's machines the CPU build lies on disk; unpinned, pip took a 6.5 GB CUDA build). The virtualenv
# is kept per tool versions under RIDGELINE_LOADTOOLS_CACHE (default ~/.cache/ridgeline), so a fresh clone on the
# same machine reuses it, and .venv-loadtools links to it; `ridgeline-worker serving-bench` finds the tools there.
LOADTOOLS="torch==2.13.0 aiperf==0.13.0 guidellm==0.8.1"
if [ "${1:-}" = "loadtools" ]; then
  cache="${RIDGELINE_LOADTOOLS_CACHE:-$HOME/.cache/ridgeline}"
  venv="$cache/loadtools-$(echo "$LOADTOOLS" | sha256sum | cut -c1-12)"
  if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.ridgeline-tools" 2>/dev/null)" != "$LOADTOOLS" ]; then
    rm -rf "$venv"
    mkdir -p "$cache"
    "$PYTHON" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet torch==2.13.0
    # shellcheck disable=SC2086
    "$venv/bin/python" -m pip install --quiet $LOADTOOLS
    echo "$LOADTOOLS" >"$venv/.ridgeline-tools"
  fi
  if [ ! -e .venv-loadtools ] || [ -L .venv-loadtools ]; then
    ln -sfn "$venv" .venv-loadtools
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
