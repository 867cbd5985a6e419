#!/usr/bin/env bash
# bench/servers.sh — the targets of the "servers" issue (issue 4), measured
# on `kiln serve --dev` with SQLite and the bundled kiln-test game server:
#
#   list   GET /api/client/v1/servers for a team of LIST_SERVERS (200)
#          kiln-test servers (offline): wrk, CONNS (32) connections;
#          target p99 < TARGET_LIST_P99_MS (10 ms); req/s printed.
#   mem    VmRSS of the `kiln serve` process alone (not its children: on the
#          process runtime each server is a child `kiln testserver`; on docker
#          a container) idle before any server, then with MEM_SERVERS (50)
#          kiln-test servers running and idle (SETTLE s after the last one
#          reports running). Targets: (rss50 - rss0) / 50 < 1 MiB per server
#          (console buffer included) and rss50 < 80 MiB. Per runtime.
#   start  POST /servers/{id}/power {"action":"start"} → the first
#          GET /servers/{id} that says "running", polled every POLL_MS (10)
#          ms, REPEAT (10) times on one server (stopped, back to "offline",
#          between two); median and max. Includes kiln-test's simulated boot
#          (300 ms by default) and kiln's status-ping detection. Targets:
#          < 1 s on the process runtime, < 2 s on docker. Per runtime.
#
# Every section starts its own kiln on a fresh data dir (127.0.0.1, port
# picked by the kernel; game ports from PORT_RANGE, pings to 127.0.0.1 only)
# and stops it, and everything it started, at its end. kiln is built once,
# static (CGO_ENABLED=0: the docker runtime puts this very binary in the
# kiln-test image, built FROM scratch), into a temp dir. The docker runtime
# is used when the docker daemon answers; kiln builds its image
# kiln/testserver:dev itself when missing (the image is left in place: it is
# kiln's own, reused by later starts). Containers of the servers this script
# created (kiln-<uuid>) are removed through the API, and by name if any is
# left. Exit status: 0 when every target and check passes, 1 otherwise, 2 on
# a setup error.
#
# Settings (environment):
#   SECTIONS="list mem start"   which sections to run, in this order
#   RUNTIMES="process docker"   runtimes of the mem and start sections
#                               (docker is skipped when the daemon is absent)
#   LIST_SERVERS=200 WARMUP=3 DURATION=15 CONNS=32 THREADS=2
#   MEM_SERVERS=50 SETTLE=5     servers, seconds idle before reading RSS
#   IDLE_WAIT=2                 seconds between kiln listening and the idle
#                               (no server) RSS reading (docker: see the NOTE
#                               the section prints when RSS falls)
#   REPEAT=10 POLL_MS=10        start cycles, polling interval
#   RATE_LIMIT=60000000 LOG_LEVEL=info PORT_RANGE=30000-30499
#   DOCKER_USER=10001:10001     --docker-user when root (else kiln's own)
#   PERF=1                      list: also `perf record` kiln during the
#                               measured run and print where its CPU goes
#                               (perturbs the numbers: such a run does not count)
#   REV=<git revision>          build that commit (git archive) instead of
#                               the work tree
#   KEEP=1                      keep the temp dir (logs, wrk output)
#   QUIET_WAIT=60 QUIET_SECS=3  before each measurement, wait up to
#                               QUIET_WAIT s for QUIET_SECS s in a row in which
#                               other processes leave the CPU idle
#   TARGET_LIST_P99_MS=10 TARGET_MEM_PER_SERVER_KIB=1024 TARGET_MEM_TOTAL_MIB=80
#   TARGET_START_PROCESS_MS=1000 TARGET_START_DOCKER_MS=2000
set -euo pipefail
export LC_ALL=C

SECTIONS=${SECTIONS:-list mem start}
RUNTIMES=${RUNTIMES:-process docker}
LIST_SERVERS=${LIST_SERVERS:-200}
WARMUP=${WARMUP:-3}
DURATION=${DURATION:-15}
CONNS=${CONNS:-32}
THREADS=${THREADS:-2}
MEM_SERVERS=${MEM_SERVERS:-50}
SETTLE=${SETTLE:-5}
IDLE_WAIT=${IDLE_WAIT:-2}
REPEAT=${REPEAT:-10}
POLL_MS=${POLL_MS:-10}
RATE_LIMIT=${RATE_LIMIT:-60000000}
LOG_LEVEL=${LOG_LEVEL:-info}
PORT_RANGE=${PORT_RANGE:-30000-30499}
KEEP=${KEEP:-0}
PERF=${PERF:-0}
REV=${REV:-}
QUIET_WAIT=${QUIET_WAIT:-60}
QUIET_SECS=${QUIET_SECS:-3}
TARGET_LIST_P99_MS=${TARGET_LIST_P99_MS:-10}
TARGET_MEM_PER_SERVER_KIB=${TARGET_MEM_PER_SERVER_KIB:-1024}
TARGET_MEM_TOTAL_MIB=${TARGET_MEM_TOTAL_MIB:-80}
TARGET_START_PROCESS_MS=${TARGET_START_PROCESS_MS:-1000}
TARGET_START_DOCKER_MS=${TARGET_START_DOCKER_MS:-2000}
if [ "$(id -u)" = 0 ]; then DOCKER_USER=${DOCKER_USER:-10001:10001}; else DOCKER_USER=${DOCKER_USER:-}; fi

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LUA="$ROOT/bench/wrk-report.lua"
API_PREFIX=/api/client/v1
PATH_GET=$API_PREFIX/servers # what run_wrk loads

BENCH_NAME=servers
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh" # die, stop_pid, run_wrk, wait_quiet, check, …

for s in $SECTIONS; do
  case $s in list | mem | start) ;; *) die "SECTIONS: unknown section $s (want list, mem, start)" ;; esac
done
for r in $RUNTIMES; do
  case $r in process | docker) ;; *) die "RUNTIMES: unknown runtime $r (want process, docker)" ;; esac
done
[[ " $SECTIONS " == *" list "* ]] && ensure_wrk
command -v go >/dev/null 2>&1 || die "go is missing"
if [ "$PERF" = 1 ]; then command -v perf >/dev/null 2>&1 || die "PERF=1 but perf is missing"; fi

# --- temp dir and cleanup --------------------------------------------------
TMP=$(mktemp -d -t kiln-bench.XXXXXX)
chmod 711 "$TMP" # kiln serve as root: servers' users reach their roots below it (--uid-range)
KILN_PID='' KILN_RT='' WRK_PID='' PERF_PID='' KILN_PORT='' TOKEN=''
SERVER_IDS=()
status=2
cleanup() {
  trap - EXIT INT TERM
  if [ -n "$WRK_PID" ] && [ -s "$TMP/wrk.pid" ]; then stop_pid "$(cat "$TMP/wrk.pid")"; fi
  stop_pid "$WRK_PID"; stop_pid "$PERF_PID"
  kiln_down quiet || true
  remove_left_containers || true
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
# -trimpath: the same source gives the same binary whatever the temp dir, so
# kiln's kiln-test image (labelled with the binary's SHA-256) is reused by
# the next run of the same commit instead of being rebuilt.
echo "== building kiln ($KILN_FROM, CGO_ENABLED=0 -trimpath) into $TMP"
(cd "$KILN_SRC" && CGO_ENABLED=0 go build -trimpath -o "$TMP/kiln" ./cmd/kiln) || die "go build ./cmd/kiln failed"

# --- docker ----------------------------------------------------------------
DOCKER_OK=0 DOCKER_WHY=''
if [[ " $RUNTIMES " == *" docker "* ]] && [[ " $SECTIONS " == *" mem "* || " $SECTIONS " == *" start "* ]]; then
  if ! command -v docker >/dev/null 2>&1; then
    DOCKER_WHY="no docker command"
  elif ! DOCKER_VERSION=$(timeout 10 docker version --format '{{.Server.Version}}' 2>/dev/null); then
    DOCKER_WHY="the docker daemon does not answer"
  else
    DOCKER_OK=1
  fi
fi

# --- HTTP from bash ----------------------------------------------------------
# api METHOD PATH [JSON]: one HTTP/1.0 request to kiln's API over bash's
# /dev/tcp, no process forked (so polling every 10 ms costs little); sets
# HTTP_CODE and HTTP_BODY (both empty, status 1, when kiln cannot be reached).
api() {
  local fd ans req
  HTTP_CODE='' HTTP_BODY=''
  { exec {fd}<>"/dev/tcp/127.0.0.1/$KILN_PORT"; } 2>/dev/null || return 1
  req="$1 $API_PREFIX$2 HTTP/1.0"$'\r\n'"Host: 127.0.0.1"$'\r\n'"Authorization: Bearer $TOKEN"$'\r\n'
  if [ $# -ge 3 ]; then
    req+="Content-Type: application/json"$'\r\n'"Content-Length: ${#3}"$'\r\n\r\n'"$3"
  else
    req+=$'\r\n'
  fi
  printf '%s' "$req" >&"$fd"
  ans=''
  IFS= read -r -d '' -t 10 -u "$fd" ans || true
  exec {fd}>&-
  HTTP_CODE=${ans#HTTP/1.? }
  HTTP_CODE=${HTTP_CODE%% *}
  HTTP_BODY=${ans#*$'\r\n\r\n'}
}
# api_want WANT_CODE METHOD PATH [JSON]: api, and a setup error unless the
# answer has status WANT_CODE.
api_want() {
  local want=$1
  shift
  api "$@" || true
  [ "$HTTP_CODE" = "$want" ] || die "$1 $2: want $want, got ${HTTP_CODE:-no answer}: ${HTTP_BODY:0:300}"
}
status_of() { [[ $HTTP_BODY =~ \"status\":\"([a-z]+)\" ]] && echo "${BASH_REMATCH[1]}" || echo "?"; }
# count STATUS: servers of the last GET /servers answer with that status.
count() { { grep -o "\"status\":\"$1\"" <<<"$HTTP_BODY" || true; } | wc -l; }

# nap SECONDS: sleep without forking (read on a pipe we also write: no EOF).
exec {NAP_FD}<> <(:)
nap() { read -r -t "$1" -u "$NAP_FD" _ || true; }
now_us() { echo "${EPOCHREALTIME/./}"; }

# --- kiln up / down ------------------------------------------------------------
# kiln_up RUNTIME LABEL: starts kiln serve --dev on a fresh data dir.
kiln_up() {
  local rt=$1 label=$2
  KDIR="$TMP/$label"
  mkdir -p "$KDIR"
  local args=(serve --dev --data-dir "$KDIR/data" --addr 127.0.0.1:0 --sftp-addr "" --rate-limit "$RATE_LIMIT"
    --port-range "$PORT_RANGE" --log-level "$LOG_LEVEL" --runtime "$rt")
  if [ "$rt" = docker ] && [ -n "$DOCKER_USER" ]; then args+=(--docker-user "$DOCKER_USER"); fi
  "$TMP/kiln" "${args[@]}" >"$KDIR/kiln.stdout" 2>"$KDIR/kiln.log" &
  KILN_PID=$! KILN_RT=$rt SERVER_IDS=()
  # docker: kiln builds its kiln-test image before it listens
  KILN_PORT=$(wait_port "$KILN_PID" "$KDIR/kiln.log" 120)
  [ -s "$KDIR/data/bootstrap-token" ] || die "no $KDIR/data/bootstrap-token"
  TOKEN=$(tr -d '[:space:]' <"$KDIR/data/bootstrap-token")
  echo "== kiln ($rt runtime) on 127.0.0.1:$KILN_PORT (pid $KILN_PID), data in $KDIR/data"
}

# kiln_down [quiet]: deletes the servers through the API on docker (their
# containers outlive kiln), stops kiln (on the process runtime it stops its
# servers itself), then makes sure no server process or container is left.
kiln_down() {
  [ -n "$KILN_PID" ] || return 0
  local kids id left=()
  if kill -0 "$KILN_PID" 2>/dev/null; then
    if [ "$KILN_RT" = docker ]; then
      for id in "${SERVER_IDS[@]}"; do api DELETE "/servers/$id" || true; done
    fi
    kids=$(pgrep -P "$KILN_PID" || true)
    stop_pid "$KILN_PID" 40
    for id in $kids; do
      if kill -0 "$id" 2>/dev/null; then left+=("$id"); kill -KILL "$id" 2>/dev/null || true; fi
    done
    if [ "${#left[@]}" -gt 0 ] && [ "${1:-}" != quiet ]; then
      echo "  NOTE: kiln's child processes ${left[*]} were still alive after kiln stopped: killed"
    fi
  fi
  KILN_PID=''
  remove_left_containers
}

# remove_left_containers: any container of a server this script created
# that is still there (kiln-<uuid>, label kiln.server=<uuid>) is removed.
remove_left_containers() {
  [ -s "$TMP/docker-ids" ] || return 0
  local id n=0
  while read -r id; do
    if [ -n "$(docker ps -aq --filter "name=^kiln-$id\$" --filter "label=kiln.server=$id" 2>/dev/null)" ]; then
      docker rm -f "kiln-$id" >/dev/null 2>&1 || true
      n=$((n + 1))
    fi
  done <"$TMP/docker-ids"
  : >"$TMP/docker-ids"
  if [ "$n" -gt 0 ]; then echo "  NOTE: $n container(s) of this run's servers were left after kiln stopped: removed"; fi
}

# create_servers N PREFIX: N kiln-test servers; their ids go to SERVER_IDS.
create_servers() {
  local i id
  for i in $(seq "$1"); do
    api_want 202 POST /servers "{\"name\":\"$2-$i\",\"software\":\"kiln-test\",\"memory_mb\":512,\"disk_mb\":1024}"
    [[ $HTTP_BODY =~ \"id\":\"([0-9a-f-]{36})\" ]] || die "no server id in $HTTP_BODY"
    id=${BASH_REMATCH[1]}
    SERVER_IDS+=("$id")
    if [ "$KILN_RT" = docker ]; then echo "$id" >>"$TMP/docker-ids"; fi
  done
}

# wait_list WANT_STATUS N SECONDS: polls GET /servers (every 0.2 s) until N
# servers have WANT_STATUS; returns 1 on timeout (HTTP_BODY is the last list).
wait_list() {
  local deadline=$((SECONDS + $3))
  while :; do
    api_want 200 GET /servers
    [ "$(count "$1")" -ge "$2" ] && return 0
    [ "$SECONDS" -lt "$deadline" ] || return 1
    nap 0.2
  done
}
statuses() { # a summary of the last list: "running=48 starting=2"
  { grep -o '"status":"[a-z]*"' <<<"$HTTP_BODY" || true; } | cut -d'"' -f4 | sort | uniq -c | awk '{printf "%s%s=%s", (NR > 1 ? " " : ""), $2, $1}'
}

# self_ticks PID: CPU ticks of PID and of its children it has reaped.
self_ticks() { awk '{print $14 + $15 + $16 + $17}' "/proc/$1/stat"; }
# proc_ticks: "pid ticks comm" for every process; ticks = its own CPU plus
# that of the children it reaped.
proc_ticks() {
  cat /proc/[0-9]*/stat 2>/dev/null | awk '{
    l = index($0, "("); r = match($0, /\) [A-Za-z] /); if (!l || !r) next
    comm = substr($0, l + 1, r - l - 1); gsub(/ /, "_", comm)
    split(substr($0, r + 2), a, " ")
    print $1, a[12] + a[13] + a[14] + a[15], comm
  }'
}
# other_ticks BEFORE AFTER: ticks, between two proc_ticks snapshots, of the
# processes alive at both that are neither kiln, this script, nor docker's
# (dockerd, containerd, shims, docker-proxy, runc): other people's work.
# Processes born and gone in between are missed unless reaped by one alive;
# pid 1 is left out (it reaps the exited containers' shims).
other_ticks() {
  awk -v kiln="$KILN_PID" -v self=$$ 'NR == FNR {t[$1 " " $3] = $2; next}
    ($1 " " $3) in t && $1 != kiln && $1 != self && $1 != 1 && $3 !~ /^(dockerd|containerd|containerd-shim.*|docker-proxy|runc.*|kiln)$/ {
      o += $2 - t[$1 " " $3] }
    END {print o + 0}' "$1" "$2"
}
cores() { awk -v t="$1" -v hz="$CLK_TCK" -v us="$2" 'BEGIN {printf "%.2f", t/hz/(us/1e6)}'; }
median_max() { # values (µs) on stdin → "median max" in ms
  sort -n | awk '{v[NR] = $1} END {m = NR % 2 ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2; printf "%.0f %.0f\n", m/1000, v[NR]/1000}'
}

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(go version | cut -d' ' -f3), kernel $(uname -r), docker ${DOCKER_VERSION:-none}, $(date -u +%Y-%m-%dT%H:%MZ)"
echo "== settings: sections [$SECTIONS], runtimes [$RUNTIMES], kiln --rate-limit $RATE_LIMIT --log-level $LOG_LEVEL --port-range $PORT_RANGE${DOCKER_USER:+ (docker: --docker-user $DOCKER_USER)}, SQLite"

SUMMARY=()

# --- list ----------------------------------------------------------------------
section_list() {
  echo
  echo "== list: GET /servers with $LIST_SERVERS servers, wrk -t$THREADS -c$CONNS, ${WARMUP}s warm-up + ${DURATION}s measured"
  kiln_up process list
  create_servers "$LIST_SERVERS" list
  wait_list offline "$LIST_SERVERS" 120 || die "list: not all $LIST_SERVERS servers offline after 120 s: $(statuses)"
  [[ $HTTP_BODY == *"\"count\":$LIST_SERVERS}"* ]] || die "list: GET /servers does not say count $LIST_SERVERS"
  local size=${#HTTP_BODY}
  echo "   $LIST_SERVERS servers created, all offline; the answer is $size bytes"
  wait_quiet "$QUIET_SECS"
  run_wrk kiln "$KILN_PORT" "$WARMUP" "$KDIR/wrk-warmup.txt" "$KILN_PID"
  if [ "$PERF" = 1 ]; then
    perf record -q -F 499 -g -p "$KILN_PID" -o "$KDIR/perf.data" -- sleep "$DURATION" >/dev/null 2>&1 &
    PERF_PID=$!
  fi
  run_wrk kiln "$KILN_PORT" "$DURATION" "$KDIR/wrk.txt" "$KILN_PID"
  if [ -n "$PERF_PID" ]; then wait "$PERF_PID" || true; PERF_PID=; fi
  local f=$KDIR/wrk.txt k errs=0 sock=0
  errs=$(( $(field "$KDIR/wrk-warmup.txt" err_status) + $(field "$f" err_status) ))
  for k in err_connect err_read err_write err_timeout; do sock=$(( sock + $(field "$KDIR/wrk-warmup.txt" $k) + $(field "$f" $k) )); done
  local rps p50 p90 p99 max req srv wrk busy oth cpu srv_c wrk_c
  rps=$(field "$f" rps) p50=$(field "$f" p50_us) p90=$(field "$f" p90_us) p99=$(field "$f" p99_us) max=$(field "$f" max_us)
  req=$(field "$f" requests) srv=$(field "$f" server_ticks) wrk=$(field "$f" wrk_ticks) busy=$(field "$f" busy_ticks)
  cpu=$(awk -v t="$srv" -v hz="$CLK_TCK" -v n="$req" 'BEGIN {printf "%.0f", t/hz*1e6/n}')
  oth=$(awk -v b="$busy" -v a="$srv" -v w="$wrk" -v hz="$CLK_TCK" -v d="$DURATION" 'BEGIN {o = (b - a - w)/hz/d; if (o < 0) o = 0; printf "%.2f", o}')
  srv_c=$(cores "$srv" $((DURATION * 1000000))) wrk_c=$(cores "$wrk" $((DURATION * 1000000)))
  printf '   %10s %8s %8s %8s %8s %11s %17s\n' "req/s" "p50 ms" "p90 ms" "p99 ms" "max ms" "CPU µs/req" "cores srv/wrk/oth"
  printf '   %10.0f %8s %8s %8s %8s %11s %17s\n' "$rps" "$(ms "$p50")" "$(ms "$p90")" "$(ms "$p99")" "$(ms "$max")" "$cpu" "$srv_c/$wrk_c/$oth"
  if awk -v o="$oth" 'BEGIN {exit !(o > 0.2)}'; then
    echo "   NOTE: other processes used $oth cores during the run: its numbers are disturbed; rerun on a quiet machine"
  fi
  # For information: one request at a time, i.e. the service time without
  # queueing (with 32 connections in a closed loop, latency >= 32 / req/s).
  CONNS=1 THREADS=1 run_wrk kiln "$KILN_PORT" 5 "$KDIR/wrk-c1.txt" "$KILN_PID"
  local c1=$KDIR/wrk-c1.txt
  errs=$((errs + $(field "$c1" err_status)))
  for k in err_connect err_read err_write err_timeout; do sock=$((sock + $(field "$c1" $k))); done
  echo "   one connection (wrk -t1 -c1, 5 s): $(printf '%.0f' "$(field "$c1" rps)") req/s, p50 $(ms "$(field "$c1" p50_us)") p99 $(ms "$(field "$c1" p99_us)") ms"
  check "list: p99 < $TARGET_LIST_P99_MS ms ($LIST_SERVERS servers)" "$(lt "$p99" $((TARGET_LIST_P99_MS * 1000)))" "$(ms "$p99") ms at $(printf '%.0f' "$rps") req/s"
  check "list: no non-2xx answer (wrk)" "$([ "$errs" = 0 ] && echo 1 || echo 0)" "$errs non-2xx"
  check "list: no socket error (wrk)" "$([ "$sock" = 0 ] && echo 1 || echo 0)" "$sock errors"
  if [ "$PERF" = 1 ] && [ -s "$KDIR/perf.data" ]; then
    echo "   perf (PERF=1: these numbers do not count): kiln's top symbols, self time"
    perf report -i "$KDIR/perf.data" --no-children --stdio --percent-limit 1.5 -g none 2>/dev/null |
      grep -E '^ +[0-9]' | awk 'NR <= 30' || true
    echo "   perf: inclusive time of Kiln's, encoding/json's and the SQLite driver's frames"
    perf report -i "$KDIR/perf.data" --children --stdio -g none 2>/dev/null |
      grep -E '^ +[0-9]' | grep -E 'kilnhq|modernc\.org/sqlite\.|encoding/json\.|log/slog\.\(\*Logger\)|database/sql\.' | awk 'NR <= 40' || true
  fi
  SUMMARY+=("list: $(printf '%.0f' "$rps") req/s, p50 $(ms "$p50") p90 $(ms "$p90") p99 $(ms "$p99") max $(ms "$max") ms, ${cpu} µs CPU/req, cores srv/wrk/oth $srv_c/$wrk_c/$oth, answer $size bytes; 1 connection: p50 $(ms "$(field "$c1" p50_us)") p99 $(ms "$(field "$c1" p99_us)") ms")
  kiln_down
}

# --- mem -----------------------------------------------------------------------
section_mem() {
  local rt=$1
  echo
  echo "== mem ($rt): kiln's VmRSS idle, then with $MEM_SERVERS idle running kiln-test servers"
  kiln_up "$rt" "mem-$rt"
  if grep -q 'msg="built image"' "$KDIR/kiln.log"; then
    echo "   (this kiln built the image kiln/testserver:dev before listening)"
  fi
  sleep "$IDLE_WAIT"
  local rss0 rss_created rss50 rss_later hwm t0 dt per kids=0 kids_kib=0 pid
  rss0=$(rss_kib "$KILN_PID")
  echo "   idle, no server, ${IDLE_WAIT}s after start: $(mib "$rss0") MiB (peak so far $(mib "$(hwm_kib "$KILN_PID")") MiB)"
  create_servers "$MEM_SERVERS" mem
  wait_list offline "$MEM_SERVERS" 120 || die "mem: not all $MEM_SERVERS servers offline after 120 s: $(statuses)"
  rss_created=$(rss_kib "$KILN_PID")
  echo "   $MEM_SERVERS servers created (offline): $(mib "$rss_created") MiB"
  t0=$SECONDS
  for id in "${SERVER_IDS[@]}"; do api_want 202 POST "/servers/$id/power" '{"action":"start"}'; done
  if ! wait_list running "$MEM_SERVERS" 180; then
    check "mem ($rt): all $MEM_SERVERS servers running" 0 "after 180 s: $(statuses)"
    kiln_down
    return
  fi
  dt=$((SECONDS - t0))
  echo "   all $MEM_SERVERS running ${dt}s after the first start; idle ${SETTLE}s"
  sleep "$SETTLE"
  rss50=$(rss_kib "$KILN_PID")
  hwm=$(hwm_kib "$KILN_PID")
  if [ "$rt" = process ]; then
    for pid in $(pgrep -P "$KILN_PID" || true); do
      kids=$((kids + 1)); kids_kib=$((kids_kib + $(rss_kib "$pid" 2>/dev/null || echo 0)))
    done
  fi
  sleep 10
  rss_later=$(rss_kib "$KILN_PID")
  api_want 200 GET /servers
  local still
  still=$(count running)
  per=$(( (rss50 - rss0) / MEM_SERVERS ))
  echo "   $MEM_SERVERS running, idle ${SETTLE}s: $(mib "$rss50") MiB (peak $(mib "$hwm") MiB); 10 s later: $(mib "$rss_later") MiB, $still running"
  if [ "$rt" = process ]; then
    echo "   (not counted: $kids child processes \`kiln testserver\`, $(mib "$kids_kib") MiB RSS together, $(( kids ? kids_kib / kids : 0 )) KiB each)"
  else
    echo "   (not counted: the $MEM_SERVERS containers, dockerd, containerd-shims and docker-proxies)"
  fi
  if [ "$rss50" -lt "$rss0" ]; then
    echo "   NOTE: kiln's RSS fell while $MEM_SERVERS servers were added: the idle reading held memory that kiln"
    echo "   freed later (garbage not yet collected); the per-server figure is meaningless. An idle kiln runs Go's"
    echo "   periodic GC every 2 min and returns what it freed to the OS after the next one: IDLE_WAIT=260."
  fi
  check "mem ($rt): idle reading below the loaded one" "$([ "$rss0" -le "$rss50" ] && echo 1 || echo 0)" "$(mib "$rss0") <= $(mib "$rss50") MiB"
  check "mem ($rt): kiln per idle running server < $TARGET_MEM_PER_SERVER_KIB KiB" "$(lt "$per" "$TARGET_MEM_PER_SERVER_KIB")" "$per KiB = ($(mib "$rss50") - $(mib "$rss0") MiB) / $MEM_SERVERS"
  check "mem ($rt): kiln with $MEM_SERVERS running < $TARGET_MEM_TOTAL_MIB MiB" "$(lt "$rss50" $((TARGET_MEM_TOTAL_MIB * 1024)))" "$(mib "$rss50") MiB"
  check "mem ($rt): all $MEM_SERVERS still running at the end" "$([ "$still" = "$MEM_SERVERS" ] && echo 1 || echo 0)" "$still running"
  SUMMARY+=("mem ($rt): rss0 $(mib "$rss0") MiB, created $(mib "$rss_created") MiB, $MEM_SERVERS running $(mib "$rss50") MiB (peak $(mib "$hwm"), +10 s $(mib "$rss_later")), per server $per KiB; all running after ${dt}s")
  kiln_down
}

# --- start -----------------------------------------------------------------------
section_start() {
  local rt=$1 target
  if [ "$rt" = docker ]; then target=$TARGET_START_DOCKER_MS; else target=$TARGET_START_PROCESS_MS; fi
  echo
  echo "== start ($rt): power start → first GET that says running (polled every ${POLL_MS} ms), $REPEAT times"
  kiln_up "$rt" "start-$rt"
  create_servers 1 start
  local id=${SERVER_IDS[0]} i t0 t1 st done_s poll ups=() downs=() boots=() bad=''
  wait_list offline 1 60 || die "start: the server is not offline after 60 s: $(statuses)"
  poll=$(awk -v m="$POLL_MS" 'BEGIN {printf "%.3f", m/1000}')
  wait_quiet "$QUIET_SECS"
  local b0 k0 s0 w0 w1
  proc_ticks >"$KDIR/ticks0"
  b0=$(busy_ticks) k0=$(self_ticks "$KILN_PID") s0=$(self_ticks $$) w0=$(now_us)
  printf '   %5s %12s %14s %12s\n' cycle "start→run ms" "testserver boot" "stop→off ms"
  for i in $(seq "$REPEAT"); do
    t0=$(now_us)
    api_want 202 POST "/servers/$id/power" '{"action":"start"}'
    while :; do
      api_want 200 GET "/servers/$id"
      t1=$(now_us)
      st=$(status_of)
      [ "$st" = running ] && break
      if [ "$st" = crashed ] || [ $((t1 - t0)) -gt 30000000 ]; then bad="cycle $i: $st after $(( (t1 - t0) / 1000 )) ms"; break 2; fi
      nap "$poll"
    done
    ups+=($((t1 - t0)))
    # kiln-test's own boot time, from its "Done (0.304s)!" console line
    api_want 200 GET "/servers/$id/console?size=20"
    done_s=$({ grep -o 'Done ([0-9.]*s)' <<<"$HTTP_BODY" || true; } | tail -1 | tr -dc '0-9.')
    boots+=("${done_s:-?}")
    t0=$(now_us)
    api_want 202 POST "/servers/$id/power" '{"action":"stop"}'
    while :; do
      api_want 200 GET "/servers/$id"
      t1=$(now_us)
      st=$(status_of)
      [ "$st" = offline ] && break
      if [ $((t1 - t0)) -gt 60000000 ]; then bad="cycle $i: still $st 60 s after stop"; break 2; fi
      nap "$poll"
    done
    downs+=($((t1 - t0)))
    printf '   %5s %12s %14s %12s\n' "$i" "$(( ups[-1] / 1000 ))" "${done_s:-?} s" "$(( downs[-1] / 1000 ))"
    nap 0.2
  done
  w1=$(now_us)
  proc_ticks >"$KDIR/ticks1"
  local busy kiln_c self_c oth_c
  oth_c=$(cores "$(other_ticks "$KDIR/ticks0" "$KDIR/ticks1")" $((w1 - w0)))
  busy=$(cores $(( $(busy_ticks) - b0 )) $((w1 - w0)))
  kiln_c=$(cores $(( $(self_ticks "$KILN_PID") - k0 )) $((w1 - w0)))
  self_c=$(cores $(( $(self_ticks $$) - s0 )) $((w1 - w0)))
  if [ -n "$bad" ]; then
    check "start ($rt): $REPEAT starts reach running" 0 "$bad"
    kiln_down
    return
  fi
  local up_med up_max down_med down_max
  read -r up_med up_max < <(printf '%s\n' "${ups[@]}" | median_max)
  read -r down_med down_max < <(printf '%s\n' "${downs[@]}" | median_max)
  echo "   start → running: median $up_med ms, max $up_max ms; stop → offline: median $down_med ms, max $down_max ms"
  echo "   kiln-test boot (its Done line; simulated 300 ms included): ${boots[*]} s"
  echo "   cores during the cycles: machine $busy, kiln (+ reaped children) $kiln_c, this script $self_c, other processes $oth_c$([ "$rt" = docker ] && echo '; the rest: docker'"'"'s daemons, shims, runc, proxies, containers' || true)"
  if awk -v o="$oth_c" 'BEGIN {exit !(o > 0.2)}'; then
    echo "   NOTE: other processes used $oth_c cores during the cycles: these numbers are disturbed; rerun on a quiet machine"
  fi
  check "start ($rt): median start→running < $target ms" "$(lt "$up_med" "$target")" "$up_med ms"
  check "start ($rt): max start→running < $target ms" "$(lt "$up_max" "$target")" "$up_max ms"
  SUMMARY+=("start ($rt): start→running median $up_med ms max $up_max ms [$(printf '%s ' "${ups[@]}" | awk '{for (i = 1; i <= NF; i++) printf "%s%d", (i > 1 ? " " : ""), $i/1000}')]; stop→offline median $down_med ms max $down_max ms; boot ${boots[*]} s; cores machine/kiln/script/oth $busy/$kiln_c/$self_c/$oth_c")
  kiln_down
}

for s in $SECTIONS; do
  case $s in
  list) section_list ;;
  mem | start)
    for rt in $RUNTIMES; do
      if [ "$rt" = docker ] && [ "$DOCKER_OK" != 1 ]; then
        echo; echo "== $s (docker): SKIP ($DOCKER_WHY)"; SUMMARY+=("$s (docker): SKIP ($DOCKER_WHY)"); continue
      fi
      "section_$s" "$rt"
    done
    ;;
  esac
done

if [ "$DOCKER_OK" = 1 ]; then
  echo
  echo "== docker image $(docker image inspect kiln/testserver:dev --format '{{.Id}} created {{.Created}}' 2>/dev/null | cut -c1-19,72- || echo 'kiln/testserver:dev: none')"
fi
echo
echo "== summary ($KILN_FROM)"
for l in "${SUMMARY[@]}"; do echo "   $l"; done
echo
if [ "${#fails[@]}" -gt 0 ]; then
  echo "servers: FAIL: ${fails[*]} (KEEP=1 keeps the logs)"
  status=1
  exit 1
fi
echo "servers: PASS"
status=0
