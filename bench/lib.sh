# bench/lib.sh — shell functions shared by the bench/*.sh scripts. Source it
# (it only defines functions and two variables; it starts nothing):
#
#   BENCH_NAME=my-bench            # prefix of die's messages
#   . "$ROOT/bench/lib.sh"
#
# Globals the functions read, set by the script: TMP (its temp dir), ROOT
# (the repository), REV; run_wrk also THREADS, CONNS, LUA, TOKEN, PATH_GET
# and sets WRK_PID; check appends to the array fails. See docs/benchmarks.md
# for the conventions these serve.

# die MESSAGE: a setup error (exit status 2).
die() { echo "$BENCH_NAME: $*" >&2; exit 2; }

# ensure_wrk: installs wrk from Debian's packages when it is missing (root only).
ensure_wrk() {
  if ! command -v wrk >/dev/null 2>&1; then
    [ "$(id -u)" = 0 ] || die "wrk is missing and we are not root: apt-get install wrk"
    echo "== installing wrk (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq wrk >/dev/null
  fi
  command -v wrk >/dev/null 2>&1 || die "wrk still missing after apt-get install"
}

# stop_pid PID [SECONDS]: TERM, wait up to SECONDS (default 5), then KILL.
stop_pid() {
  local pid=$1 secs=${2:-5}
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq $((secs * 10))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

# unset_kiln_env: no KILN_* setting from the caller's environment (e.g.
# KILN_DATABASE_URL) may change what is measured.
unset_kiln_env() {
  local v
  while IFS= read -r v; do unset "$v"; done < <(compgen -e | grep '^KILN_' || true)
}

# kiln_source: sets KILN_SRC (the tree to build kiln from) and KILN_FROM (a
# description of it): commit REV extracted with git archive into $TMP/src
# when REV is set (the work tree untouched), else the work tree.
kiln_source() {
  if [ -n "$REV" ]; then
    KILN_SRC="$TMP/src"
    mkdir -p "$KILN_SRC"
    REV_ID=$(git -C "$ROOT" rev-parse --short=12 --verify "$REV^{commit}") || die "REV=$REV: no such commit"
    git -C "$ROOT" archive "$REV_ID" | tar -x -C "$KILN_SRC"
    KILN_FROM="commit $REV_ID"
  else
    KILN_SRC=$ROOT
    KILN_FROM="work tree of $ROOT"
    local head_id
    if head_id=$(git -C "$ROOT" rev-parse --short=12 HEAD 2>/dev/null); then
      KILN_FROM+=" at $head_id"
      if [ -n "$(git -C "$ROOT" status --porcelain -- cmd internal go.mod go.sum 2>/dev/null || true)" ]; then
        KILN_FROM+=" + uncommitted changes"
      fi
    fi
  fi
}

# --- /proc readings ----------------------------------------------------------
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
hwm_kib() { awk '/^VmHWM:/ {print $2}' "/proc/$1/status"; }
mib() { awk -v k="$1" 'BEGIN {printf "%.1f", k/1024}'; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; } # utime + stime
CLK_TCK=$(getconf CLK_TCK)

# listen_port PID: the port of PID's listening TCP socket on 127.0.0.1, from
# /proc alone (kiln only logs its address at level info).
listen_port() {
  local pid=$1 fd link inodes=" "
  for fd in /proc/"$pid"/fd/*; do
    link=$(readlink "$fd" 2>/dev/null) || continue
    [[ $link == socket:\[*\] ]] && inodes+="${link//[!0-9]/} "
  done
  # /proc/net/tcp: local_address is hex IP:port, st 0A is LISTEN, field 10 the inode
  local hex
  hex=$(awk -v inodes="$inodes" '$4 == "0A" && index(inodes, " " $10 " ") {
      split($2, a, ":"); if (a[1] == "0100007F") { print a[2]; exit } }' "/proc/$pid/net/tcp" 2>/dev/null || true)
  if [ -n "$hex" ]; then echo $((16#$hex)); fi
}

# wait_port PID LOG [SECONDS]: prints PID's listening port once it has one
# (waits up to SECONDS, default 10).
wait_port() {
  local pid=$1 log=$2 secs=${3:-10} port
  for _ in $(seq $((secs * 10))); do
    port=$(listen_port "$pid")
    if [ -n "$port" ]; then echo "$port"; return 0; fi
    kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; die "process $pid exited before listening"; }
    sleep 0.1
  done
  die "process $pid not listening on 127.0.0.1 after $secs s"
}

# busy_ticks: CPU ticks the whole machine spent busy (user, nice, system,
# irq, softirq, steal), all cores.
busy_ticks() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat; }

# --- wrk -------------------------------------------------------------------
# run_wrk NAME PORT SECONDS OUT SERVER_PID: one wrk run; OUT gets wrk's
# output and a CPU_RESULT line: ticks used by the server, by wrk, and by the
# whole machine during the run (the rest is other processes: noise).
run_wrk() {
  local s0 b0 w pid=$5
  s0=$(cpu_ticks "$pid"); b0=$(busy_ticks)
  # A subshell runs wrk and then reports its children's CPU time with `times`.
  (
    wrk -t"$THREADS" -c"$CONNS" -d"$3s" --latency -s "$LUA" \
      -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$2$PATH_GET" >"$4" 2>&1 &
    echo $! >"$TMP/wrk.pid"
    wait $! && rc=0 || rc=$?
    times >"$4.times" # line 1: this shell, line 2: its children (wrk)
    exit "$rc"
  ) &
  WRK_PID=$!
  if ! wait "$WRK_PID"; then WRK_PID=; cat "$4" >&2; die "wrk against $1 failed"; fi
  WRK_PID=
  # "0m1.230s 0m0.450s": user and system time of wrk
  w=$(awk -v hz="$CLK_TCK" 'NR == 2 {t = 0; for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); t += a[1]*60 + a[2] } printf "%d", t*hz + 0.5}' "$4.times")
  echo "CPU_RESULT server_ticks=$(( $(cpu_ticks "$pid") - s0 )) wrk_ticks=$w busy_ticks=$(( $(busy_ticks) - b0 ))" >>"$4"
  grep -q '^WRK_RESULT ' "$4" || { cat "$4" >&2; die "no WRK_RESULT from wrk against $1"; }
}
# field FILE KEY: KEY's value on the WRK_RESULT / CPU_RESULT lines of FILE.
field() { grep -E '^(WRK|CPU)_RESULT ' "$1" | tr ' ' '\n' | awk -F= -v k="$2" '$1 == k {print $2}'; }

# --- a quiet machine ---------------------------------------------------------
# wait_quiet [N]: other processes on this machine (builds, tests) disturb
# the numbers: wait up to QUIET_WAIT s for N (default 1) seconds in a row in
# each of which the machine uses under 0.25 of a core.
wait_quiet() {
  local quiet_deadline=$((SECONDS + QUIET_WAIT)) quiet_said='' b0 busy need=${1:-1} got=0
  while :; do
    b0=$(busy_ticks); sleep 1; busy=$(( $(busy_ticks) - b0 ))
    if [ "$busy" -le $((CLK_TCK / 4)) ]; then
      got=$((got + 1))
      if [ "$got" -ge "$need" ]; then break; fi
      continue
    fi
    got=0
    if [ "$SECONDS" -ge "$quiet_deadline" ]; then
      echo "== machine still busy ($busy ticks in 1 s) after ${QUIET_WAIT}s: measuring anyway"
      break
    fi
    [ -n "$quiet_said" ] || { echo "== waiting up to ${QUIET_WAIT}s for other processes to go quiet"; quiet_said=1; }
  done
}

# --- checks ------------------------------------------------------------------
fails=()
check() { # NAME OK(0|1) DETAIL
  if [ "$2" = 1 ]; then printf '  PASS  %-34s %s\n' "$1" "$3"
  else printf '  FAIL  %-34s %s\n' "$1" "$3"; fails+=("$1"); fi
}
# finish HEADING: prints the SUMMARY lines under HEADING and the verdict of
# every check, sets status (read by the scripts' cleanup) and exits with it:
# 0 when every check passed, 1 otherwise.
finish() {
  echo "== $1"
  printf '  %s\n' "${SUMMARY[@]}"
  if [ "${#fails[@]}" -gt 0 ]; then
    echo "== FAIL: ${fails[*]}"
    status=1
  else
    echo "== PASS"
    status=0
  fi
  exit "$status"
}
ms() { awk -v u="$1" 'BEGIN {printf "%.2f", u/1000}'; }
lt() { awk -v a="$1" -v b="$2" 'BEGIN {exit !(a < b)}' && echo 1 || echo 0; }
ge() { awk -v a="$1" -v b="$2" 'BEGIN {exit !(a >= b)}' && echo 1 || echo 0; }
