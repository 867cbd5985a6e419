#!/usr/bin/env bash
# bench/deployments.sh — the deployment targets of issue 12, on this machine,
# loopback only, no network:
#
#   plan   validate + plan a 1,000-resource spec (800 servers, 100 proxies
#          of 8 backends, 100 dbservices) with bench/planbench: spec.Parse
#          (every rule checked, normalized) + plan.Make, against an empty
#          live state (all creates) and against its own applied state (all
#          noops); medians of 21 runs. Target: each < TARGET_PLAN_MS (100).
#   apply  `kiln serve --dev` (SQLite): a configuration of N (20) kiln-test
#          servers applied from empty through the API, timed from the POST
#          /deployments/apply to the run's succeeded (every server installed,
#          started and answering a status ping). Target: < TARGET_APPLY_S
#          (15 s). No reference tool does this (that is the point of the
#          feature); the figure is reported against the target only.
#
# Usage: bench/deployments.sh   (N=20 TARGET_PLAN_MS=100 TARGET_APPLY_S=15)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH_NAME=deployments
. "$ROOT/bench/lib.sh"
unset_kiln_env
N=${N:-20}
TARGET_PLAN_MS=${TARGET_PLAN_MS:-100}
TARGET_APPLY_S=${TARGET_APPLY_S:-15}
TMP=$(mktemp -d /tmp/kiln-bench.XXXXXX)
KILN_PID=""
cleanup() { stop_pid "$KILN_PID" 20; rm -rf "$TMP"; }
trap cleanup EXIT
fails=()

echo "== building kiln and bench/planbench (work tree of $ROOT at $(git -C "$ROOT" rev-parse --short HEAD))"
(cd "$ROOT" && go build -o "$TMP/kiln" ./cmd/kiln && go build -o "$TMP/planbench" ./bench/planbench)

echo "== plan: 1,000 resources"
line=$("$TMP/planbench")
echo "  $line"
create=$(sed -n 's/.*create_median_ms=\([0-9.]*\).*/\1/p' <<<"$line")
noop=$(sed -n 's/.*noop_median_ms=\([0-9.]*\).*/\1/p' <<<"$line")
for v in "create:$create" "noop:$noop"; do
  name=${v%%:*} ms=${v#*:}
  if awk -v a="$ms" -v b="$TARGET_PLAN_MS" 'BEGIN{exit !(a < b)}'; then
    echo "  PASS  validate+plan ($name) < ${TARGET_PLAN_MS} ms   ${ms} ms"
  else
    echo "  FAIL  validate+plan ($name) < ${TARGET_PLAN_MS} ms   ${ms} ms"; fails+=("plan $name")
  fi
done

echo "== apply: $N kiln-test servers from empty"
port=$(( 30000 + RANDOM % 20000 ))
first=$(( 40000 + RANDOM % 10000 ))
"$TMP/kiln" serve --dev --data-dir "$TMP/data" --addr "127.0.0.1:$port" --rate-limit 1000000 \
  --port-range "$first-$((first + N + 10))" >"$TMP/serve.log" 2>&1 &
KILN_PID=$!
for _ in $(seq 200); do [ -s "$TMP/data/bootstrap-token" ] && curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.1; done
TOKEN=$(cat "$TMP/data/bootstrap-token")
API="http://127.0.0.1:$port/api/client/v1"
yaml="version: 1"$'\n'"servers:"$'\n'
for i in $(seq "$N"); do yaml+="  s$i:"$'\n'"    software: kiln-test"$'\n'"    memory: 256M"$'\n'"    disk: 1G"$'\n'; done
cfg=$(jq -n --arg yaml "$yaml" '{name: "bench", yaml: $yaml}' | curl -sf -H "Authorization: Bearer $TOKEN" \
  -H 'Content-Type: application/json' -d @- "$API/deployments/configurations" | jq -r .configuration.id)
t0=$(date +%s.%N)
run=$(curl -sf -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
  -d "{\"configuration_id\":\"$cfg\"}" "$API/deployments/apply" | jq -r .run.id)
status=""
for _ in $(seq 1200); do
  status=$(curl -sf -H "Authorization: Bearer $TOKEN" "$API/deployments/runs/$run" | jq -r .run.status)
  case $status in succeeded | failed | canceled) break ;; esac
  sleep 0.05
done
t1=$(date +%s.%N)
secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b - a}')
running=$(curl -sf -H "Authorization: Bearer $TOKEN" "$API/servers" | jq '[.servers[] | select(.status == "running")] | length')
echo "  run $run: $status in ${secs} s; $running of $N servers running"
if [ "$status" = succeeded ] && [ "$running" = "$N" ] && awk -v a="$secs" -v b="$TARGET_APPLY_S" 'BEGIN{exit !(a < b)}'; then
  echo "  PASS  apply $N servers < ${TARGET_APPLY_S} s   ${secs} s"
else
  echo "  FAIL  apply $N servers < ${TARGET_APPLY_S} s   ${secs} s ($status, $running running)"; fails+=("apply")
fi

echo "== summary"
echo "  plan    1000 resources: create ${create} ms, noop ${noop} ms (target < ${TARGET_PLAN_MS} ms)"
echo "  apply   $N kiln-test servers: ${secs} s (target < ${TARGET_APPLY_S} s)"
if [ ${#fails[@]} -gt 0 ]; then echo "== FAIL: ${fails[*]}"; exit 1; fi
echo "== PASS"
