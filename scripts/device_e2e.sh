#!/usr/bin/env bash
# The worker's loop end to end on one machine: the service on SQLite, an upload key, `ridgeline-worker run` uploading
# over real HTTP, then the service's runs and its measured-against-predicted accuracy for the device.
#
#   scripts/device_e2e.sh OUT_DIR [HARDWARE_SLUG] [SUITES] [SIZE]
#
# Made for a lent GPU machine (python3 there holds JAX, Triton and PyTorch; the service's own packages travel as
# wheels in .whl/, docs/worker.md says how), and runs anywhere the package is installed (CPU: pass a CPU slug, `quick`).
# Writes into OUT_DIR: service.log, worker.log, worker.jsonl (every result as uploaded), runs.json, accuracy.json.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:?usage: scripts/device_e2e.sh OUT_DIR [HARDWARE] [SUITES] [SIZE]}
HARDWARE=${2:-h200-sxm}
SUITES=${3:-ceilings,matmul,norms,attention,triton,train}
SIZE=${4:-full}
PY=${PYTHON:-python3}
PORT=${PORT:-8765}
mkdir -p "$OUT_DIR"; rm -f "$OUT_DIR/worker.jsonl"
DB=$(mktemp -d)/ridgeline.db
export RIDGELINE_DATABASE_URL="sqlite:///$DB" PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
URL="http://127.0.0.1:$PORT"

"$PY" -c 'import sys; from service.cli import main; sys.exit(main())' serve --port "$PORT" >"$OUT_DIR/service.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null' EXIT
for _ in $(seq 1 120); do
  curl -sf "$URL/v1/hardware/$HARDWARE" >/dev/null && break
  kill -0 $SERVER 2>/dev/null || { echo "service exited:"; tail -20 "$OUT_DIR/service.log"; exit 1; }
  sleep 0.5
done
curl -sf "$URL/v1/hardware/$HARDWARE" >/dev/null || { echo "service not up"; tail -20 "$OUT_DIR/service.log"; exit 1; }
KEY=$("$PY" -c 'import sys; from service.cli import main; sys.exit(main())' keys create --name device-e2e \
  --scope upload 2>/dev/null | tail -1)

START=$(date +%s)
"$PY" -c 'import sys; from worker.cli import main; sys.exit(main())' run --server "$URL" --token "$KEY" \
  --hardware "$HARDWARE" --suite "$SUITES" --size "$SIZE" --results-out "$OUT_DIR/worker.jsonl" \
  --spool-dir "$(mktemp -d)" 2>&1 | tee "$OUT_DIR/worker.log" | tail -25
STATUS=${PIPESTATUS[0]}
echo "worker exit status $STATUS after $(( $(date +%s) - START )) s"

curl -sf "$URL/v1/benchmarks?hardware=$HARDWARE" >"$OUT_DIR/runs.json"
curl -sf "$URL/v1/accuracy?hardware=$HARDWARE&worst=10" >"$OUT_DIR/accuracy.json"
"$PY" - "$OUT_DIR" <<'EOF'
import json, sys
out = sys.argv[1]
runs = json.load(open(f"{out}/runs.json"))
items = runs.get("items", runs) if isinstance(runs, dict) else runs
print(f"runs stored: {len(items)}; results uploaded: {sum(1 for _ in open(f'{out}/worker.jsonl'))}")
acc = json.load(open(f"{out}/accuracy.json"))
raw = acc["raw"]
print(f"all {raw['count']} results: median error {raw['median_ape']:.1%}, p90 {raw['p90_ape']:.1%}, bias {raw['bias']:+.1%}")
print(f"{'family':<22}{'dtype':<7}{'size':<18}{'n':>4}{'median':>9}{'p90':>9}{'bias':>9}")
for g in acc["groups"]:
    r = g["raw"]
    print(f"{g['family']:<22}{g['dtype']:<7}{g['size']:<18}{r['count']:>4}{r['median_ape']:>9.1%}{r['p90_ape']:>9.1%}"
          f"{r['bias']:>+9.1%}")
EOF
exit "$STATUS"
