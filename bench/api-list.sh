#!/usr/bin/env bash
# bench/api-list.sh — load-test authenticated GET /api/client/v1/servers (an
# empty team) on `kiln serve` with SQLite, next to a bare net/http server
# (bench/bare) that answers the same body: the ceiling on this machine.
#
# What it does, all on 127.0.0.1 (ports picked by the kernel):
#   1. installs wrk from Debian's packages if it is missing (needs root);
#   2. builds kiln and bench/bare into a fresh temp dir;
#   3. starts kiln on a fresh data dir with --rate-limit raised so that every
#      request goes through the limiter and none is refused, access log (level
#      info by default) to a file, as an operator would run it;
#   4. reads kiln's idle RSS, checks one request by hand against each server;
#   5. per server: WARMUP s of wrk (discarded), then DURATION s measured;
#   6. checks that no answer was non-2xx (wrk and the access log), that no
#      socket error happened, that kiln.db did not change and kiln.db-wal
#      grew by the instance heartbeats at most during the load (a token check
#      writes nothing; a control write by `kiln admin token create`
#      afterwards must be seen), RSS after the load;
#   7. prints a summary table and PASS/FAIL against the targets.
# Everything it started is stopped on exit. Exit status: 0 when every check
# and target passes, 1 otherwise, 2 on a setup error.
#
# Settings (environment):
#   WARMUP=3 DURATION=15        seconds of wrk, per server
#   CONNS=64 THREADS=2          wrk connections and threads
#   RATE_LIMIT=60000000         kiln --rate-limit (requests/min/token); see
#                               docs/benchmarks.md for why not 1e9
#   LOG_LEVEL=info              kiln --log-level
#   PERF=1                      also `perf record` kiln during its measured run
#                               and print the top symbols (perturbs the numbers)
#   REV=<git revision>          build kiln from that commit (git archive, the
#                               work tree untouched) instead of the work tree
#   KEEP=1                      keep the temp dir (logs, wrk output) at the end
#   QUIET_WAIT=60               seconds to wait, before starting, for other
#                               processes to leave the CPU idle
#   TARGET_RPS=5000 TARGET_P99_MS=20 TARGET_RSS_MIB=40
set -euo pipefail
export LC_ALL=C

WARMUP=${WARMUP:-3}
DURATION=${DURATION:-15}
CONNS=${CONNS:-64}
THREADS=${THREADS:-2}
RATE_LIMIT=${RATE_LIMIT:-60000000}
LOG_LEVEL=${LOG_LEVEL:-info}
PERF=${PERF:-0}
KEEP=${KEEP:-0}
REV=${REV:-}
TARGET_RPS=${TARGET_RPS:-5000}
TARGET_P99_MS=${TARGET_P99_MS:-20}
TARGET_RSS_MIB=${TARGET_RSS_MIB:-40}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LUA="$ROOT/bench/wrk-report.lua"
PATH_GET=/api/client/v1/servers
WANT_BODY='{"servers":[],"count":0}'

BENCH_NAME=api-list
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh" # die, stop_pid, run_wrk, wait_quiet, check, …

# --- wrk -------------------------------------------------------------------
ensure_wrk
command -v go >/dev/null 2>&1 || die "go is missing"
if [ "$PERF" = 1 ]; then command -v perf >/dev/null 2>&1 || die "PERF=1 but perf is missing"; fi

# --- temp dir and cleanup --------------------------------------------------
TMP=$(mktemp -d -t kiln-bench.XXXXXX)
chmod 711 "$TMP" # kiln serve as root: servers' users reach their roots below it (--uid-range)
KILN_PID='' BARE_PID='' PERF_PID='' WRK_PID=''
status=2
cleanup() {
  trap - EXIT INT TERM
  if [ -n "$WRK_PID" ] && [ -s "$TMP/wrk.pid" ]; then stop_pid "$(cat "$TMP/wrk.pid")"; fi
  stop_pid "$WRK_PID"; stop_pid "$PERF_PID"; stop_pid "$KILN_PID"; stop_pid "$BARE_PID"
  if [ "$KEEP" = 1 ] || [ "$status" = 2 ]; then
    echo "(temp dir kept: $TMP)" >&2
  else
    rm -rf "$TMP"
  fi
}
trap 'cleanup' EXIT
trap 'status=130; exit 130' INT TERM

unset_kiln_env

# --- build -----------------------------------------------------------------
kiln_source
echo "== building kiln ($KILN_FROM) and bench/bare into $TMP"
(cd "$KILN_SRC" && go build -o "$TMP/kiln" ./cmd/kiln) || die "go build ./cmd/kiln failed"
(cd "$ROOT" && go build -o "$TMP/bare" ./bench/bare) || die "go build ./bench/bare failed"

# --- helpers (the others are in bench/lib.sh) -------------------------------
# get PORT TOKEN: one HTTP/1.0 GET over bash's /dev/tcp; prints the answer.
get() {
  local port=$1 token=$2
  exec 3<>"/dev/tcp/127.0.0.1/$port"
  printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n\r\n' "$PATH_GET" "$token" >&3
  timeout 5 cat <&3 | tr -d '\r'
  exec 3<&- 3>&-
}

# check_answer NAME PORT TOKEN: the answer must be 200, application/json and
# exactly the empty list.
check_answer() {
  local name=$1 ans
  ans=$(get "$2" "$3")
  local first body ctype
  first=${ans%%$'\n'*}
  ctype=$(printf '%s\n' "$ans" | awk 'tolower($1) == "content-type:" && !n++ {print $2}')
  body=$(printf '%s\n' "$ans" | sed '1,/^$/d')
  if [[ "$first" != "HTTP/1."?" 200 OK" || "$ctype" != "application/json" || "$body" != "$WANT_BODY" ]]; then
    printf '%s answered:\n%s\n' "$name" "$ans" >&2
    die "$name: want 200, Content-Type application/json and $WANT_BODY"
  fi
}

# db_state: size, mtime (ns) and SHA-256 of the SQLite database and its WAL.
# kiln.db-shm is left out on purpose: it is the WAL index in shared memory,
# where every reader takes a read mark; it holds no data.
db_state() {
  local f
  for f in "$DATA/kiln.db" "$DATA/kiln.db-wal"; do
    if [ -e "$f" ]; then
      printf '%s size=%s mtime=%s sha256=%s\n' "${f##*/}" "$(stat -c %s "$f")" \
        "$(stat -c %y "$f")" "$(sha256sum "$f" | cut -c1-16)"
    else
      printf '%s absent\n' "${f##*/}"
    fi
  done
}

# --- a quiet machine -------------------------------------------------------
QUIET_WAIT=${QUIET_WAIT:-60}
wait_quiet

# --- start kiln ------------------------------------------------------------
DATA="$TMP/data"
ACCESS_LOG="$TMP/kiln-access.log"
"$TMP/kiln" serve --data-dir "$DATA" --addr 127.0.0.1:0 --sftp-addr "" --rate-limit "$RATE_LIMIT" \
  --log-level "$LOG_LEVEL" >"$TMP/kiln.stdout" 2>"$ACCESS_LOG" &
KILN_PID=$!
KILN_PORT=$(wait_port "$KILN_PID" "$ACCESS_LOG")
KILN_ADDR=127.0.0.1:$KILN_PORT
[ -s "$DATA/bootstrap-token" ] || die "no $DATA/bootstrap-token"
TOKEN=$(tr -d '[:space:]' <"$DATA/bootstrap-token")
sleep 1
RSS_START=$(rss_kib "$KILN_PID")

"$TMP/bare" --addr 127.0.0.1:0 >"$TMP/bare.stdout" 2>"$TMP/bare.stderr" &
BARE_PID=$!
BARE_PORT=$(wait_port "$BARE_PID" "$TMP/bare.stderr")
BARE_ADDR=127.0.0.1:$BARE_PORT

check_answer kiln "$KILN_PORT" "$TOKEN"
check_answer bare "$BARE_PORT" "$TOKEN"
DB_BEFORE=$(db_state)

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(go version | cut -d' ' -f3), $(wrk --version 2>&1 | awk 'NR == 1 {print $1, $2}'), kernel $(uname -r), $(date -u +%Y-%m-%dT%H:%MZ)"
echo "== settings: wrk -t$THREADS -c$CONNS, ${WARMUP}s warm-up + ${DURATION}s measured per server, kiln --rate-limit $RATE_LIMIT --log-level $LOG_LEVEL (access log to a file), SQLite"
echo "== kiln on $KILN_ADDR (pid $KILN_PID), bare on $BARE_ADDR (pid $BARE_PID)"

# --- kiln ------------------------------------------------------------------
echo "== kiln: warm-up ${WARMUP}s"
run_wrk kiln "$KILN_PORT" "$WARMUP" "$TMP/wrk-kiln-warmup.txt" "$KILN_PID"
echo "== kiln: measuring ${DURATION}s"
if [ "$PERF" = 1 ]; then
  perf record -q -F 499 -g -p "$KILN_PID" -o "$TMP/perf.data" -- sleep "$DURATION" >/dev/null 2>&1 &
  PERF_PID=$!
fi
run_wrk kiln "$KILN_PORT" "$DURATION" "$TMP/wrk-kiln.txt" "$KILN_PID"
if [ -n "$PERF_PID" ]; then wait "$PERF_PID" || true; PERF_PID=; fi
RSS_HWM=$(hwm_kib "$KILN_PID")
sleep 2
RSS_AFTER=$(rss_kib "$KILN_PID")
DB_AFTER=$(db_state)

# --- bare ------------------------------------------------------------------
echo "== bare: warm-up ${WARMUP}s"
run_wrk bare "$BARE_PORT" "$WARMUP" "$TMP/wrk-bare-warmup.txt" "$BARE_PID"
echo "== bare: measuring ${DURATION}s"
run_wrk bare "$BARE_PORT" "$DURATION" "$TMP/wrk-bare.txt" "$BARE_PID"

# Control for the no-write check: one real write (kiln admin creates a token
# in the same database while serve runs) must change what db_state sees.
"$TMP/kiln" admin token create --data-dir "$DATA" --team default --kind user --name bench-probe \
  >/dev/null 2>"$TMP/admin.stderr" || { cat "$TMP/admin.stderr" >&2; die "kiln admin token create failed"; }
DB_PROBE=$(db_state)

# --- checks ----------------------------------------------------------------
declare -A R
for s in kiln bare; do
  for f in "$TMP/wrk-$s-warmup.txt" "$TMP/wrk-$s.txt"; do
    for k in err_status err_connect err_read err_write err_timeout; do
      R[$s.$k]=$(( ${R[$s.$k]:-0} + $(field "$f" "$k") ))
    done
  done
  for k in requests rps p50_us p90_us p99_us p999_us max_us; do R[$s.$k]=$(field "$TMP/wrk-$s.txt" "$k"); done
done
for s in kiln bare; do
  for k in server_ticks wrk_ticks busy_ticks; do R[$s.$k]=$(field "$TMP/wrk-$s.txt" "$k"); done
  # server CPU per request (µs); cores used on average by the server, by wrk
  # and by everything else on the machine during the measured run
  R[$s.cpu_us]=$(awk -v t="${R[$s.server_ticks]}" -v hz="$CLK_TCK" -v n="${R[$s.requests]}" 'BEGIN {printf "%.0f", t/hz*1e6/n}')
  for k in server wrk; do
    R[$s.${k}_cores]=$(awk -v t="${R[$s.${k}_ticks]}" -v hz="$CLK_TCK" -v d="$DURATION" 'BEGIN {printf "%.2f", t/hz/d}')
  done
  R[$s.other_cores]=$(awk -v b="${R[$s.busy_ticks]}" -v a="${R[$s.server_ticks]}" -v w="${R[$s.wrk_ticks]}" -v hz="$CLK_TCK" -v d="$DURATION" \
    'BEGIN {o = (b - a - w)/hz/d; if (o < 0) o = 0; printf "%.2f", o}')
done
RATIO=$(awk -v a="${R[kiln.rps]}" -v b="${R[bare.rps]}" 'BEGIN {printf "%.2f", a/b}')
# Access log: every request line must say status=200, except requests that
# wrk abandoned when it stopped (it closes its connections with requests in
# flight): kiln logs those as 500 with an ERROR "request failed" line whose
# err ends in "context canceled", for the same request_id. No client saw them.
read -r LOG_LINES LOG_NON200 LOG_CANCELED < <(awk '
  / msg="request failed" / && /context canceled/ { if (match($0, /request_id=[A-Za-z0-9._:-]+/)) gone[substr($0, RSTART, RLENGTH)] = 1; next }
  / msg=request / {
    n++
    if ($0 !~ / status=200 /) { match($0, /request_id=[A-Za-z0-9._:-]+/); bad[substr($0, RSTART, RLENGTH)] = 1 }
  }
  END {
    nb = 0; nc = 0
    for (id in bad) { if (id in gone) nc++; else nb++ }
    print n + 0, nb, nc
  }' "$ACCESS_LOG")

echo
echo "== results (measured ${DURATION}s each, wrk -t$THREADS -c$CONNS)"
printf '  %-6s %10s %8s %8s %8s %8s %11s %17s\n' server "req/s" "p50 ms" "p90 ms" "p99 ms" "max ms" "CPU µs/req" "cores srv/wrk/oth"
for s in kiln bare; do
  printf '  %-6s %10.0f %8s %8s %8s %8s %11s %17s\n' "$s" "${R[$s.rps]}" "$(ms "${R[$s.p50_us]}")" \
    "$(ms "${R[$s.p90_us]}")" "$(ms "${R[$s.p99_us]}")" "$(ms "${R[$s.max_us]}")" "${R[$s.cpu_us]}" \
    "${R[$s.server_cores]}/${R[$s.wrk_cores]}/${R[$s.other_cores]}"
done
echo "  kiln/bare req/s ratio: $RATIO"
echo "  (cores: average CPU of the server, of wrk, and of other processes on this $(nproc)-core machine during"
echo "   the measured run; \"oth\" well above 0 means something else competed for the CPU: rerun)"
for s in kiln bare; do
  if awk -v o="${R[$s.other_cores]}" 'BEGIN {exit !(o > 0.2)}'; then
    echo "  NOTE: other processes used ${R[$s.other_cores]} cores during the $s run: its numbers are disturbed; rerun on a quiet machine"
  fi
done
echo "  kiln RSS: $(mib "$RSS_START") MiB idle after start, $(mib "$RSS_AFTER") MiB idle after load, $(mib "$RSS_HWM") MiB peak (VmHWM)"
echo "  access log: $LOG_LINES request lines, $(du -h "$ACCESS_LOG" | cut -f1)"
echo
echo "== checks"
check "kiln req/s >= $TARGET_RPS" "$(ge "${R[kiln.rps]}" "$TARGET_RPS")" "$(printf '%.0f' "${R[kiln.rps]}")"
check "kiln p99 < $TARGET_P99_MS ms" "$(lt "${R[kiln.p99_us]}" $((TARGET_P99_MS * 1000)))" "$(ms "${R[kiln.p99_us]}") ms"
check "kiln RSS after start < $TARGET_RSS_MIB MiB" "$(lt "$RSS_START" $((TARGET_RSS_MIB * 1024)))" "$(mib "$RSS_START") MiB"
check "kiln RSS after load < $TARGET_RSS_MIB MiB" "$(lt "$RSS_AFTER" $((TARGET_RSS_MIB * 1024)))" "$(mib "$RSS_AFTER") MiB"
for s in kiln bare; do
  check "$s: no non-2xx answer (wrk)" "$([ "${R[$s.err_status]}" = 0 ] && echo 1 || echo 0)" "${R[$s.err_status]} non-2xx"
  sock=$(( ${R[$s.err_connect]} + ${R[$s.err_read]} + ${R[$s.err_write]} + ${R[$s.err_timeout]} ))
  check "$s: no socket error (wrk)" "$([ "$sock" = 0 ] && echo 1 || echo 0)" "$sock errors"
done
if [ "$LOG_LEVEL" = info ] || [ "$LOG_LEVEL" = debug ]; then
  check "kiln: access log all 200" "$([ "$LOG_NON200" = 0 ] && [ "$LOG_LINES" -gt 0 ] && echo 1 || echo 0)" \
    "$LOG_NON200 of $LOG_LINES not 200 (+$LOG_CANCELED abandoned by wrk at its stop, logged 500)"
else
  printf '  SKIP  %-34s %s\n' "kiln: access log all 200" "--log-level $LOG_LEVEL logs no requests"
fi
# The reads must write nothing; the instance heartbeat (internal/instance:
# an upsert of this process's row every 10 s) does, in the same database:
# each commits at most 2 pages to the WAL (4,096 bytes and a 24-byte frame
# header each). So the database file must be unchanged and the WAL may have
# grown by the heartbeats of the load's duration at most; one write per
# request would have grown it by hundreds of megabytes.
wal_size() { printf '%s\n' "$1" | awk '/^kiln.db-wal/ {for (i = 1; i <= NF; i++) if ($i ~ /^size=/) {sub("size=", "", $i); print $i}}'; }
db_line() { printf '%s\n' "$1" | grep '^kiln.db '; }
WAL_GROWTH=$(( $(wal_size "$DB_AFTER") - $(wal_size "$DB_BEFORE") ))
HEARTBEATS=$(( (WARMUP + DURATION + 2) / 10 + 1 ))
check "kiln.db unchanged, WAL: heartbeats only" \
  "$([ "$(db_line "$DB_BEFORE")" = "$(db_line "$DB_AFTER")" ] && [ "$WAL_GROWTH" -le $((HEARTBEATS * 2 * 4120)) ] && echo 1 || echo 0)" \
  "WAL +$WAL_GROWTH bytes (at most $HEARTBEATS heartbeats × 2 pages = $((HEARTBEATS * 2 * 4120)))"
if [ "$DB_BEFORE" != "$DB_AFTER" ]; then printf 'before:\n%s\nafter:\n%s\n' "$DB_BEFORE" "$DB_AFTER"; fi
check "control: one admin write is seen" "$([ "$DB_PROBE" != "$DB_AFTER" ] && echo 1 || echo 0)" \
  "$(printf '%s' "$DB_PROBE" | grep -o 'kiln.db-wal size=[0-9]*')"

if [ "$PERF" = 1 ] && [ -s "$TMP/perf.data" ]; then
  echo
  echo "== perf: kiln's top symbols during the measured run (self time)"
  perf report -i "$TMP/perf.data" --no-children --stdio --percent-limit 1.5 -g none 2>/dev/null |
    grep -E '^ +[0-9]' | awk 'NR <= 30' || true
  echo "== perf: inclusive time of Kiln's and the SQLite driver's frames"
  perf report -i "$TMP/perf.data" --children --stdio -g none 2>/dev/null |
    grep -E '^ +[0-9]' | grep -E 'kilnhq|modernc\.org/sqlite\.|log/slog\.\(\*Logger\)' | awk 'NR <= 20' || true
fi

echo
if [ "${#fails[@]}" -gt 0 ]; then
  echo "api-list: FAIL: ${fails[*]} (KEEP=1 keeps the logs)"
  status=1
  exit 1
fi
echo "api-list: PASS"
status=0
