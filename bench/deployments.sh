#!/usr/bin/env bash
# bench/deployments.sh — the deployment targets of issue 12 ("Deployments"
# and "Deployments part 2"), on this machine, loopback only, no network:
#
#   plan    validate + plan a 1,000-resource spec (800 servers, 100 proxies
#           of 8 backends, 100 dbservices) with bench/planbench: spec.Parse
#           (every rule checked, normalized) + plan.Make, against an empty
#           live state (all creates) and against its own applied state (all
#           noops); medians of 21 runs. Target: each < TARGET_PLAN_MS (100).
#   apply   `kiln serve --dev` (SQLite, fresh data dir): a configuration of N
#           (20) kiln-test servers applied from empty through the API, timed
#           from the POST /deployments/apply to the run's succeeded (every
#           server installed, started and answering a status ping). Target:
#           < TARGET_APPLY_S (15 s). No reference tool does this (that is the
#           point of the feature); the figure is reported against the target.
#   reapply the same configuration applied again REAPPLY (11) times without a
#           change, 0.2 to 1.2 s apart (at random), each a new run whose
#           every resource is a noop (checked: summary noop = N, nothing
#           else), timed like apply from the POST to the succeeded seen by a
#           poll every POLL_REAPPLY (10ms); also
#           the run's own times: created_at → started_at (queued: until the
#           executor claims it) and started_at → completed_at (executing).
#           Target: median of the client-side times < TARGET_REAPPLY_MS (1000).
#   loaded  a second `kiln serve --dev` (fresh data dir, so the apply starts
#           from empty again): wrk -t THREADS (2) -c CONNS (8) on GET
#           /api/client/v1/servers with the same token, started LEAD (0.5) s
#           before the POST of the 20-server apply and stopped (SIGINT: wrk
#           still prints its WRK_RESULT) as soon as the run has ended, so the
#           wrk window is the apply. Target: p99 < TARGET_P99_MS (20), no
#           non-2xx answer, no socket error; the apply's time under load is
#           reported. For the reading, the same wrk runs BASE (3) s on the
#           idle instance just before (empty list) and just after (20
#           running servers).
#
# The applies are timed by bench/applytime (POST, then a GET of the run every
# poll, in one process over one keep-alive connection: a curl and a jq per
# poll cost more than a no-change run on a busy machine).
#
# Every phase reports the cores used, during it, by kiln and its servers
# (srv), by this script's children: planbench, applytime, curl, jq, wrk
# (bench), and by every other process on the machine (oth); oth above 0.2
# marks the phase's figures DISTURBED (docs/benchmarks.md, "Noise"): rerun
# on a quiet machine. For GET /servers, kiln's own time per request (the
# access log's duration_ms) is given next to wrk's: the difference is time
# spent waiting for a CPU or in the client.
#
# Usage: bench/deployments.sh
# Settings (environment): N=20 REAPPLY=11 THREADS=2 CONNS=8 BASE=3 LEAD=0.5
#   RATE_LIMIT=60000000 (kiln --rate-limit: no request refused) LOG_LEVEL=info
#   QUIET_WAIT=60 (s to wait for an idle CPU before starting)
#   REV=<commit> (build that commit with git archive, the work tree untouched)
#   KEEP=1 (keep the temp dir: kiln logs, wrk output)
#   TARGET_PLAN_MS=100 TARGET_APPLY_S=15 TARGET_REAPPLY_MS=1000 TARGET_P99_MS=20
# Exit status: 0 when every target passes, 1 otherwise, 2 on a setup error.
set -euo pipefail
export LC_ALL=C
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH_NAME=deployments
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
unset_kiln_env
N=${N:-20}
REAPPLY=${REAPPLY:-11}
THREADS=${THREADS:-2}
CONNS=${CONNS:-8}
BASE=${BASE:-3}
LEAD=${LEAD:-0.5}
POLL_REAPPLY=${POLL_REAPPLY:-10ms}
RATE_LIMIT=${RATE_LIMIT:-60000000}
LOG_LEVEL=${LOG_LEVEL:-info}
QUIET_WAIT=${QUIET_WAIT:-60}
REV=${REV:-}
KEEP=${KEEP:-0}
TARGET_PLAN_MS=${TARGET_PLAN_MS:-100}
TARGET_APPLY_S=${TARGET_APPLY_S:-15}
TARGET_REAPPLY_MS=${TARGET_REAPPLY_MS:-1000}
TARGET_P99_MS=${TARGET_P99_MS:-20}
APPLY_TIMEOUT=120 # s: a run not ended by then is reported as such
LUA="$ROOT/bench/wrk-report.lua"
PATH_GET=/api/client/v1/servers

ensure_wrk
command -v jq >/dev/null 2>&1 || die "jq is missing"
command -v curl >/dev/null 2>&1 || die "curl is missing"

TMP=$(mktemp -d /tmp/kiln-bench.XXXXXX)
chmod 711 "$TMP" # kiln serve as root: servers' users reach their roots below it (--uid-range)
KILN_PID='' WRK_PID=''
status=2
cleanup() {
  trap - EXIT INT TERM
  stop_pid "$WRK_PID"; stop_pid "$KILN_PID" 20
  if [ "$KEEP" = 1 ] || [ "$status" = 2 ]; then echo "(temp dir kept: $TMP)" >&2; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'status=130; exit 130' INT TERM
SUMMARY=()
fails=()

kiln_source
echo "== building kiln and bench/planbench ($KILN_FROM), bench/applytime (work tree) into $TMP"
(cd "$KILN_SRC" && go build -o "$TMP/kiln" ./cmd/kiln && go build -o "$TMP/planbench" ./bench/planbench) ||
  die "go build failed"
(cd "$ROOT" && go build -o "$TMP/applytime" ./bench/applytime) || die "go build ./bench/applytime failed"

# --- CPU of a phase ------------------------------------------------------------
# tree_ticks PID: CPU ticks of PID and of its living descendants (utime,
# stime and the times of their reaped children). gawk (BEGINFILE).
tree_ticks() {
  awk -v root="$1" '
    BEGINFILE { if (ERRNO != "") nextfile } # gone since the glob (gawk would stop)
    FNR == 1 { s = $0; pid = substr(s, 1, index(s, " ") - 1); sub(/^.*\) /, "", s); split(s, a, " ")
               pp[pid] = a[2]; t[pid] = a[12] + a[13] + a[14] + a[15]; nextfile }
    END { r = root + 0
          for (p in t) { q = p + 0; while (q > 1 && q != r) { if (!(q in pp)) { q = 0; break }; q = pp[q] + 0 }
                         if (q == r) sum += t[p] }
          print sum + 0 }
  ' /proc/[0-9]*/stat 2>/dev/null || echo 0
}
# children_ticks: sets CT to the CPU ticks of this shell's reaped children
# (bash's `times`, second line), i.e. what the script ran: planbench,
# applytime, curl, jq, wrk. Not in a $(…): a subshell's `times` counts
# only its own children.
children_ticks() {
  times >"$TMP/times"
  CT=$(awk -v hz="$CLK_TCK" 'NR == 2 {t = 0; for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); t += a[1]*60 + a[2] } printf "%d", t*hz + 0.5}' "$TMP/times")
}
# win_begin / win_end NAME: a phase; see win_end.
win_begin() {
  W_T0=$(date +%s.%N); W_B0=$(busy_ticks); children_ticks; W_C0=$CT
  W_K0=0; if [ -n "$KILN_PID" ]; then W_K0=$(tree_ticks "$KILN_PID"); fi
  W_L0=0; if [ -n "$KILN_PID" ]; then W_L0=$(wc -l <"$KILN_LOG"); fi
}
# win_end NAME: sets WIN (cores srv/bench/oth of the phase), DISTURBED
# ("" or " DISTURBED") and prints them.
win_end() {
  local k=0 c b d
  if [ -n "$KILN_PID" ]; then k=$(( $(tree_ticks "$KILN_PID") - W_K0 )); fi
  children_ticks; c=$((CT - W_C0)); b=$(( $(busy_ticks) - W_B0 ))
  d=$(awk -v a="$W_T0" -v b="$(date +%s.%N)" 'BEGIN {print b - a}')
  WIN=$(awk -v k="$k" -v c="$c" -v b="$b" -v d="$d" -v hz="$CLK_TCK" \
    'BEGIN {o = (b - k - c)/hz/d; if (o < 0) o = 0; printf "%.2f/%.2f/%.2f", k/hz/d, c/hz/d, o}')
  DISTURBED=''
  if awk -v o="${WIN##*/}" 'BEGIN {exit !(o > 0.2)}'; then DISTURBED=' DISTURBED'; fi
  echo "  $1: cores srv/bench/oth $WIN over $(printf '%.1f' "$d") s${DISTURBED:+ — other processes competed: figures disturbed}"
}

# log_servers: kiln's own time (access log duration_ms) for the GET /servers
# requests it logged since win_begin: count, p50, p99, max (ms).
log_servers() {
  tail -n +"$((W_L0 + 1))" "$KILN_LOG" | awk '/ msg=request / && / route="GET \/servers" / {
      for (i = 1; i <= NF; i++) if ($i ~ /^duration_ms=/) { split($i, a, "="); d[n++] = a[2] + 0 } }
    END { if (n == 0) { print "no requests logged"; exit }
          asort(d); printf "%d requests, p50 %.2f ms, p99 %.2f ms, max %.2f ms", n, d[int(n*0.5) + 1], d[int(n*0.99) + 1], d[n] }'
}
# log_routes: the other routes kiln logged since win_begin: count and max
# duration_ms of each (the apply's own requests, the polls of its run).
log_routes() {
  tail -n +"$((W_L0 + 1))" "$KILN_LOG" | awk '/ msg=request / && !/ route="GET \/servers" / {
      r = ""; if (match($0, /route="[^"]*"/)) r = substr($0, RSTART + 7, RLENGTH - 8)
      for (i = 1; i <= NF; i++) if ($i ~ /^duration_ms=/) { split($i, a, "="); v = a[2] + 0 }
      n[r]++; if (v > m[r]) m[r] = v }
    END { for (r in n) printf "%s%s ×%d max %.1f ms", (k++ ? "; " : ""), r, n[r], m[r] }'
}

# --- kiln ----------------------------------------------------------------------
# No SFTP listener (its fixed default port may be taken, and wait_port must
# find the API's), when the kiln built has one (REV may predate it).
NO_SFTP=()
if "$TMP/kiln" serve --help 2>&1 | grep -q -- '-sftp-addr'; then NO_SFTP=(--sftp-addr ""); fi
# start_kiln NAME: kiln serve --dev on a fresh data dir and a port the kernel
# picks; sets KILN_PID, TOKEN, API, KPORT.
start_kiln() {
  local name=$1 first=$(( 40000 + RANDOM % 20000 ))
  "$TMP/kiln" serve --dev --data-dir "$TMP/data-$name" --addr 127.0.0.1:0 "${NO_SFTP[@]}" --rate-limit "$RATE_LIMIT" \
    --log-level "$LOG_LEVEL" --port-range "$first-$((first + N + 10))" >"$TMP/serve-$name.log" 2>&1 &
  KILN_PID=$! KILN_LOG=$TMP/serve-$name.log
  KPORT=$(wait_port "$KILN_PID" "$TMP/serve-$name.log")
  for _ in $(seq 200); do [ -s "$TMP/data-$name/bootstrap-token" ] && curl -sf "http://127.0.0.1:$KPORT/readyz" >/dev/null && break; sleep 0.1; done
  [ -s "$TMP/data-$name/bootstrap-token" ] || die "$name: no bootstrap token"
  TOKEN_FILE=$TMP/data-$name/bootstrap-token
  TOKEN=$(tr -d '[:space:]' <"$TOKEN_FILE")
  API="http://127.0.0.1:$KPORT/api/client/v1"
}
api() { curl -sf -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' "$@"; }
# new_configuration: the N kiln-test servers; prints its id.
new_configuration() {
  local yaml i
  yaml="version: 1"$'\n'"servers:"$'\n'
  for i in $(seq "$N"); do yaml+="  s$i:"$'\n'"    software: kiln-test"$'\n'"    memory: 256M"$'\n'"    disk: 1G"$'\n'; done
  jq -n --arg yaml "$yaml" '{name: "bench", yaml: $yaml}' | api -d @- "$API/deployments/configurations" | jq -r .configuration.id
}
# apply CFG POLL: bench/applytime POSTs /deployments/apply, then GETs the run
# every POLL until it has ended (one process, one keep-alive connection);
# sets RUN, RSTATUS, SECS (POST sent → end seen), QUEUE_MS (the run's
# created_at → started_at: waiting for the executor to claim it), EXEC_MS
# (started_at → completed_at), POST_MS, POLLS and RSUMMARY.
apply() {
  local line
  line=$("$TMP/applytime" -api "$API" -token-file "$TOKEN_FILE" -config "$1" -poll "$2" -timeout "${APPLY_TIMEOUT}s") ||
    [ $? = 1 ] || die "applytime failed"
  RUN=$(af run "$line") RSTATUS=$(af status "$line") QUEUE_MS=$(af queued_ms "$line") EXEC_MS=$(af exec_ms "$line")
  POST_MS=$(af post_ms "$line") POLLS=$(af polls "$line") RSUMMARY=${line##* summary=}
  SECS=$(awk -v m="$(af client_ms "$line")" 'BEGIN {printf "%.3f", m/1000}')
}
af() { tr ' ' '\n' <<<"$2" | awk -F= -v k="$1" '$1 == k {print substr($0, length(k) + 2)}'; } # KEY LINE
running_count() { api "$API/servers" | jq '[.servers[] | select(.status == "running")] | length'; }
# wrk_start OUT SECONDS: wrk on GET /servers in the background (sets WRK_PID).
wrk_start() {
  wrk -t"$THREADS" -c"$CONNS" -d"$2s" --latency -s "$LUA" -H "Authorization: Bearer $TOKEN" \
    "http://127.0.0.1:$KPORT$PATH_GET" >"$1" 2>&1 &
  WRK_PID=$!
}
wrk_wait() { # OUT
  wait "$WRK_PID" || { WRK_PID=; cat "$1" >&2; die "wrk failed"; }
  WRK_PID=
  grep -q '^WRK_RESULT ' "$1" || { cat "$1" >&2; die "no WRK_RESULT in $1"; }
}
wrk_line() { # OUT: req/s, p50, p99, max, errors
  printf '%.0f req/s, p50 %s ms, p99 %s ms, max %s ms, %s requests, %s non-2xx, %s socket errors' \
    "$(field "$1" rps)" "$(ms "$(field "$1" p50_us)")" "$(ms "$(field "$1" p99_us)")" "$(ms "$(field "$1" max_us)")" \
    "$(field "$1" requests)" "$(field "$1" err_status)" \
    "$(( $(field "$1" err_connect) + $(field "$1" err_read) + $(field "$1" err_write) + $(field "$1" err_timeout) ))"
}

wait_quiet 3
echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(go version | cut -d' ' -f3), $(wrk --version 2>&1 | awk 'NR == 1 {print $1, $2}'), kernel $(uname -r), $(date -u +%Y-%m-%dT%H:%MZ), load average $(cut -d' ' -f1-3 /proc/loadavg)"

# --- plan ----------------------------------------------------------------------
echo "== plan: 1,000 resources"
win_begin
line=$("$TMP/planbench")
echo "  $line"
win_end plan; D_PLAN=$DISTURBED
create=$(sed -n 's/.*create_median_ms=\([0-9.]*\).*/\1/p' <<<"$line")
noop=$(sed -n 's/.*noop_median_ms=\([0-9.]*\).*/\1/p' <<<"$line")
[ -n "$create" ] && [ -n "$noop" ] || die "planbench printed no medians"
check "validate+plan (create) < ${TARGET_PLAN_MS} ms" "$(lt "$create" "$TARGET_PLAN_MS")" "${create} ms"
check "validate+plan (noop) < ${TARGET_PLAN_MS} ms" "$(lt "$noop" "$TARGET_PLAN_MS")" "${noop} ms"
SUMMARY+=("plan     1000 resources: create ${create} ms, noop ${noop} ms (target < ${TARGET_PLAN_MS} ms)${D_PLAN}")

# --- apply from empty ------------------------------------------------------------
echo "== apply: $N kiln-test servers from empty (instance 1)"
start_kiln one
cfg=$(new_configuration)
win_begin
apply "$cfg" 50ms
win_end apply; D_APPLY=$DISTURBED
running=$(running_count)
echo "  run $RUN: $RSTATUS in ${SECS} s (run's own: ${QUEUE_MS} ms queued + ${EXEC_MS} ms executing); $running of $N servers running"
check "apply $N servers < ${TARGET_APPLY_S} s" \
  "$([ "$RSTATUS" = succeeded ] && [ "$running" = "$N" ] && lt "$SECS" "$TARGET_APPLY_S" || echo 0)" \
  "$(printf '%.2f' "$SECS") s ($RSTATUS, $running running)"
APPLY_SECS=$(printf '%.2f' "$SECS")
SUMMARY+=("apply    $N kiln-test servers from empty: ${APPLY_SECS} s (${QUEUE_MS} ms queued + ${EXEC_MS} ms executing) (target < ${TARGET_APPLY_S} s)${D_APPLY}")

# --- no-change re-apply --------------------------------------------------------
echo "== reapply: the same $N servers again without a change, $REAPPLY runs (instance 1)"
client_ms=() queue_ms=() exec_ms=() bad=0
win_begin
for i in $(seq "$REAPPLY"); do
  apply "$cfg" "$POLL_REAPPLY"
  sum=$RSUMMARY
  ok=$(jq --argjson n "$N" 'if (.noop == $n and .create == 0 and .update == 0 and .replace == 0 and .delete == 0) then 1 else 0 end' <<<"$sum")
  if [ "$RSTATUS" != succeeded ] || [ "$ok" != 1 ]; then bad=$((bad + 1)); fi
  c=$(awk -v s="$SECS" 'BEGIN {printf "%.0f", s * 1000}')
  client_ms+=("$c") queue_ms+=("$QUEUE_MS") exec_ms+=("$EXEC_MS")
  echo "  run $i $RUN: $RSTATUS in $c ms (POST $POST_MS ms, $POLLS polls; run's own: $QUEUE_MS ms queued + $EXEC_MS ms executing), summary $sum"
  # A pause of 0.2 to 1.2 s, at random: the executor looks for queued runs
  # every second, and a fixed pause would lock every POST to the same phase
  # of its tick.
  sleep "$(awk -v r="$RANDOM" 'BEGIN {printf "%.3f", 0.2 + r/32768}')"
done
win_end reapply; D_REAPPLY=$DISTURBED
running=$(running_count)
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1)/2] : (a[NR/2] + a[NR/2 + 1])/2}'; }
RE_MED=$(median "${client_ms[@]}") RE_QMED=$(median "${queue_ms[@]}") RE_XMED=$(median "${exec_ms[@]}")
RE_MIN=$(printf '%s\n' "${client_ms[@]}" | sort -n | head -1) RE_MAX=$(printf '%s\n' "${client_ms[@]}" | sort -n | tail -1)
echo "  client-side: median $RE_MED ms (min $RE_MIN, max $RE_MAX); run's own: median $RE_QMED ms queued, $RE_XMED ms executing; $running of $N servers running"
check "no-change reapply: all noops" "$([ "$bad" = 0 ] && [ "$running" = "$N" ] && echo 1 || echo 0)" \
  "$((REAPPLY - bad)) of $REAPPLY runs succeeded with $N noops"
check "no-change reapply median < ${TARGET_REAPPLY_MS} ms" "$(lt "$RE_MED" "$TARGET_REAPPLY_MS")" "${RE_MED} ms"
SUMMARY+=("reapply  $N noops, median of $REAPPLY: ${RE_MED} ms (min ${RE_MIN}, max ${RE_MAX}; medians ${RE_QMED} ms queued + ${RE_XMED} ms executing) (target < ${TARGET_REAPPLY_MS} ms)${D_REAPPLY}")
stop_pid "$KILN_PID" 20; KILN_PID=''

# --- GET /servers while the apply from empty executes --------------------------------
echo "== loaded: wrk -t$THREADS -c$CONNS on GET $PATH_GET during the apply of $N servers from empty (instance 2)"
start_kiln two
cfg=$(new_configuration)
win_begin
wrk_start "$TMP/wrk-before.txt" "$BASE"; wrk_wait "$TMP/wrk-before.txt"
win_end "idle, empty list, ${BASE} s"; D_BEFORE=$DISTURBED
echo "  idle before: $(wrk_line "$TMP/wrk-before.txt")"
echo "    kiln's own time (access log): $(log_servers)"
win_begin
wrk_start "$TMP/wrk-apply.txt" $((APPLY_TIMEOUT + 30))
sleep "$LEAD"
apply "$cfg" 50ms
kill -INT "$WRK_PID" 2>/dev/null || true
wrk_wait "$TMP/wrk-apply.txt"
win_end "during the apply"; D_LOADED=$DISTURBED
running=$(running_count)
LOADED_SECS=$(printf '%.2f' "$SECS")
echo "  run $RUN: $RSTATUS in ${LOADED_SECS} s under load (run's own: ${QUEUE_MS} ms queued + ${EXEC_MS} ms executing); $running of $N servers running"
echo "  during the apply: $(wrk_line "$TMP/wrk-apply.txt")"
LOADED_LOG=$(log_servers)
echo "    kiln's own time (access log): $LOADED_LOG"
echo "    other routes meanwhile: $(log_routes)"
win_begin
wrk_start "$TMP/wrk-after.txt" "$BASE"; wrk_wait "$TMP/wrk-after.txt"
win_end "idle, $N running servers, ${BASE} s"; D_AFTER=$DISTURBED
echo "  idle after: $(wrk_line "$TMP/wrk-after.txt")"
echo "    kiln's own time (access log): $(log_servers)"
w=$TMP/wrk-apply.txt
P99=$(ms "$(field "$w" p99_us)") RPS=$(printf '%.0f' "$(field "$w" rps)")
sock=$(( $(field "$w" err_connect) + $(field "$w" err_read) + $(field "$w" err_write) + $(field "$w" err_timeout) ))
check "apply under load succeeded" "$([ "$RSTATUS" = succeeded ] && [ "$running" = "$N" ] && echo 1 || echo 0)" \
  "$LOADED_SECS s ($RSTATUS, $running running)"
check "GET /servers during apply: p99 < ${TARGET_P99_MS} ms" "$(lt "$P99" "$TARGET_P99_MS")" "$P99 ms at $RPS req/s"
check "GET /servers during apply: all 2xx" "$([ "$(field "$w" err_status)" = 0 ] && [ "$sock" = 0 ] && echo 1 || echo 0)" \
  "$(field "$w" err_status) non-2xx, $sock socket errors"
SUMMARY+=("loaded   GET /servers, wrk -c$CONNS, during the apply: $RPS req/s, p99 $P99 ms (target < ${TARGET_P99_MS} ms); apply took ${LOADED_SECS} s${D_LOADED}")
SUMMARY+=("         kiln's own time for those requests (access log): $LOADED_LOG")
SUMMARY+=("         idle before (empty list): $(printf '%.0f' "$(field "$TMP/wrk-before.txt" rps)") req/s, p99 $(ms "$(field "$TMP/wrk-before.txt" p99_us)") ms${D_BEFORE}; idle after ($N servers): $(printf '%.0f' "$(field "$TMP/wrk-after.txt" rps)") req/s, p99 $(ms "$(field "$TMP/wrk-after.txt" p99_us)") ms${D_AFTER}")

finish summary
