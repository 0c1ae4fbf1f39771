#!/usr/bin/env bash
# One command from a fresh clone to a running service: http://127.0.0.1:8000 on SQLite, catalogue loaded.
# Extra arguments go to `ridgeline serve` (e.g. --port 9000, --database-url postgresql+psycopg://...).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/ridgeline serve "$@"
