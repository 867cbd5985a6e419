#!/usr/bin/env bash
# bench/snapshots.sh — the snapshot targets of issue 13 ("Snapshots") on a
# world-like tree (shared/bench/worldgen.py make, SIZE 1G) with a local
# file blob store, Kiln and the reference tools side by side in one run,
# loopback only, no network:
#
#   chunker  BenchmarkChunker/fastcdc (internal/snapshot/engine) with -cpu 1,
#            -count CHUNKER_COUNT (3): 256 MiB of random bytes cut from
#            memory. Target: median ≥ TARGET_CHUNK_MBS (1000 MB/s = 1 GB/s).
#   create   first snapshot, engine.Create into an empty store, vs
#            `tar -cf - -C DIR . | zstd -1 -T0 -o ref.tar.zst`. Targets:
#            speed ≥ TARGET_CREATE_SPEED (0.8)× the reference's; the store
#            directory's size after it (du -sb: every blob and directory)
#            ≤ TARGET_CREATE_SIZE (1.0)× the .tar.zst's.
#   restore  restore.Run of that snapshot into an empty root vs
#            `zstd -d -c ref.tar.zst | tar -x -C newdir`. Target: speed ≥
#            TARGET_RESTORE_SPEED (1.0)× (no slower).
#   rss      `kiln serve --dev` (SQLite, fresh data dir, no SFTP): a kiln-test
#            server made through the API, the tree copied into its root,
#            POST /snapshots, GET /snapshots/{id} polled every 0.2 s until
#            ready; kiln's VmRSS sampled at each poll and its VmHWM (the
#            peak, since start) read at the end. Target: VmHWM <
#            TARGET_RSS_MIB (200). The API's time POST → ready is reported.
#   second   worldgen.py mutate --percent 1 on the tree, then a second
#            snapshot into each store of the create runs (one per run),
#            with that store's first snapshot as its parent (-parent: as the
#            service passes a server's last ready snapshot).
#            Targets: bytes it stored < TARGET_SECOND_BYTES (0.05) of the
#            first's, time < TARGET_SECOND_TIME (0.20) of the first's
#            (medians).
#   remut    (reported, no target) the first snapshot restored over a copy
#            of the mutated tree (a rollback) vs extracting ref.tar.zst over
#            another copy of it (tar replaces the files it holds).
#
# Kiln's side of create, restore, second and remut runs through
# bench/snapbench (built here: engine.Create / restore.Run with
# blob.Open("file://…"), the API's engine without the records), timed from
# outside as the reference commands are, process start included. Kiln's
# output is durable (the file store syncs the snapshot's blobs before its
# manifest, and the manifest; a restore ends with a syncfs before its
# swap); tar's and zstd's is not: that cost is Kiln's.
#
# Each section runs RUNS times, Kiln and the reference alternating (which
# goes first alternates too); verdicts use each side's median. Before every
# measurement: a sync (neither side writes out the other's dirty pages),
# then a wait (up to QUIET_WAIT s) for QUIET_SECS s in a row of an idle
# machine; the cores other processes used meanwhile are reported ("oth"):
# a run with oth > 0.25 is marked (disturbed). Page cache: both sides warm
# by default (the tree is read once before the first run, the store once
# before the restores: its chunks are written with O_DIRECT; the .tar.zst
# is read from the cache as just written); DROP_CACHES=1
# instead drops the page cache (sync; echo 3 > /proc/sys/vm/drop_caches,
# root only) before every measurement, both sides alike. Every extraction
# and restore goes into a new directory, and nothing is removed before the
# end (files-archive.sh, section_untargz, says why: creating files right
# after tens of thousands were deleted is several times slower here). The restored tree is
# compared with tar's (diff -r, first run).
#
# Exit status: 0 when every target and check passes, 1 otherwise, 2 on a
# setup error. Everything is made in a temp dir, removed at the end (KEEP=1
# keeps it). Needs about 4 × RUNS + 4 times the tree's size of free space
# (17 GB for 1G and RUNS=3).
#
# Settings (environment):
#   SECTIONS="chunker create restore rss second remut" (second, restore
#            and remut need create; remut needs second)
#   SIZE=1G  DATA=<dir> (copy this tree instead of making one)
#   RUNS=3 QUIET_WAIT=60 QUIET_SECS=3 KEEP=0 DROP_CACHES=0 CHUNKER_COUNT=3
#   REV=<git revision> (build that commit with git archive)
#   REF_SYNC=1 (for analysis, not the targets: the reference's output made
#            durable too: `sync FILE` after tar | zstd, `sync -f DIR` (one
#            syncfs) after an extraction, inside its timing)
#   COMPRESSION=fastest (fastest, default or better: Kiln's level, passed
#            to every create and second run and to kiln serve in rss as
#            --snapshot-compression)
#   PROFILE=1 (also write a CPU profile of the first create run, kept in
#            the temp dir, and print its top functions)
#   TARGET_CREATE_SPEED=0.8 TARGET_CREATE_SIZE=1.0 TARGET_SECOND_BYTES=0.05
#   TARGET_SECOND_TIME=0.20 TARGET_RESTORE_SPEED=1.0 TARGET_CHUNK_MBS=1000
#   TARGET_RSS_MIB=200
set -euo pipefail
export LC_ALL=C

SECTIONS=${SECTIONS:-chunker create restore rss second remut}
SIZE=${SIZE:-1G}
DATA=${DATA:-}
RUNS=${RUNS:-3}
QUIET_WAIT=${QUIET_WAIT:-60}
QUIET_SECS=${QUIET_SECS:-3}
KEEP=${KEEP:-0}
DROP_CACHES=${DROP_CACHES:-0}
CHUNKER_COUNT=${CHUNKER_COUNT:-3}
REF_SYNC=${REF_SYNC:-0}
REV=${REV:-}
PROFILE=${PROFILE:-0}
COMPRESSION=${COMPRESSION:-fastest}
TARGET_CREATE_SPEED=${TARGET_CREATE_SPEED:-0.8}
TARGET_CREATE_SIZE=${TARGET_CREATE_SIZE:-1.0}
TARGET_SECOND_BYTES=${TARGET_SECOND_BYTES:-0.05}
TARGET_SECOND_TIME=${TARGET_SECOND_TIME:-0.20}
TARGET_RESTORE_SPEED=${TARGET_RESTORE_SPEED:-1.0}
TARGET_CHUNK_MBS=${TARGET_CHUNK_MBS:-1000}
TARGET_RSS_MIB=${TARGET_RSS_MIB:-200}
SNAP_TIMEOUT=600 # s: the API snapshot not ready by then fails the rss section

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORLDGEN=${WORLDGEN:-$ROOT/../shared/bench/worldgen.py}

BENCH_NAME=snapshots
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh" # die, kiln_source, wait_quiet, busy_ticks, wait_port, hwm_kib, rss_kib, check, ge, lt, finish
unset_kiln_env

has() { [[ " $SECTIONS " == *" $1 "* ]]; }
for s in $SECTIONS; do
  case $s in chunker | create | restore | rss | second | remut) ;;
  *) die "SECTIONS: unknown section $s (want chunker, create, restore, rss, second, remut)" ;;
  esac
done
for s in restore second remut; do has "$s" && ! has create && die "SECTIONS: $s needs create"; done
has remut && ! has second && die "SECTIONS: remut needs second"
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || die "RUNS must be a positive integer"
for c in go tar zstd python3 awk diff curl jq; do command -v "$c" >/dev/null 2>&1 || die "$c is missing"; done
[ -x /usr/bin/time ] || die "/usr/bin/time (GNU time) is missing: apt-get install time"
if [ "$DROP_CACHES" = 1 ] && [ "$(id -u)" != 0 ]; then die "DROP_CACHES=1 needs root"; fi
if [ -z "$DATA" ]; then [ -f "$WORLDGEN" ] || die "no worldgen.py at $WORLDGEN (set WORLDGEN or DATA)"; fi
if [ -n "$DATA" ]; then [ -d "$DATA" ] || die "DATA=$DATA is not a directory"; fi
if has second && [ ! -f "$WORLDGEN" ]; then die "second needs worldgen.py mutate: no $WORLDGEN"; fi

# --- temp dir and cleanup ---------------------------------------------------
TMP=$(mktemp -d -t kiln-bench.XXXXXX)
chmod 711 "$TMP" # kiln serve as root: servers' users reach their roots below it (--uid-range)
status=2
KILN_PID=
cleanup() {
  trap - EXIT INT TERM
  stop_pid "$KILN_PID"
  if [ "$KEEP" = 1 ] || [ "$status" = 2 ]; then
    echo "(temp dir kept: $TMP)" >&2
  else
    rm -rf "$TMP"
  fi
}
trap 'cleanup' EXIT
trap 'status=130; exit 130' INT TERM

# --- build ------------------------------------------------------------------
kiln_source
echo "== building bench/snapbench and cmd/kiln ($KILN_FROM) into $TMP"
(cd "$KILN_SRC" && go build -o "$TMP/snapbench" ./bench/snapbench) || die "go build ./bench/snapbench failed"
if has rss; then (cd "$KILN_SRC" && go build -o "$TMP/kiln" ./cmd/kiln) || die "go build ./cmd/kiln failed"; fi

# --- measuring --------------------------------------------------------------
# measure LABEL CMD...: runs CMD under GNU time after a sync (and a page
# cache drop with DROP_CACHES=1) and a wait for a quiet machine; sets M_WALL
# (s), M_CPU (cores used by CMD) and M_OTH (cores used by other processes
# meanwhile), prints one line; a setup error if CMD fails. CMD's stdout is
# in $TMP/cmd.out.
DISTURBED=0
measure() {
  local label=$1 b0 b1 line
  shift
  sync
  if [ "$DROP_CACHES" = 1 ]; then echo 3 >/proc/sys/vm/drop_caches; fi
  wait_quiet "$QUIET_SECS"
  b0=$(busy_ticks)
  if ! /usr/bin/time -f 'TIME %e %U %S' -o "$TMP/time.out" "$@" >"$TMP/cmd.out" 2>"$TMP/cmd.err"; then
    cat "$TMP/cmd.out" "$TMP/cmd.err" >&2
    die "$label failed: $*"
  fi
  b1=$(busy_ticks)
  line=$(grep '^TIME ' "$TMP/time.out")
  read -r M_WALL M_CPU M_OTH < <(awk -v l="$line" -v busy=$((b1 - b0)) -v hz="$CLK_TCK" 'BEGIN {
      split(l, a, " "); wall = a[2]; cpu = a[3] + a[4]; if (wall < 0.01) wall = 0.01
      oth = (busy / hz - cpu) / wall; if (oth < 0) oth = 0
      printf "%.2f %.2f %.2f\n", wall, cpu / wall, oth }')
  local mark=''
  if awk -v o="$M_OTH" 'BEGIN {exit !(o > 0.25)}'; then mark='   (disturbed)'; DISTURBED=$((DISTURBED + 1)); fi
  printf '  %-30s %7.2f s   cores cmd/oth %s/%s%s\n' "$label" "$M_WALL" "$M_CPU" "$M_OTH" "$mark"
}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", a / b}'; }
le() { awk -v a="$1" -v b="$2" 'BEGIN {exit !(a <= b)}' && echo 1 || echo 0; }
mb() { awk -v b="$1" 'BEGIN {printf "%.1f MB", b / 1e6}'; }
# rfield FILE KEY: KEY's value on FILE's SNAP_RESULT / RESTORE_RESULT line.
rfield() { grep -E '^(SNAP|RESTORE)_RESULT ' "$1" | tr ' ' '\n' | awk -F= -v k="$2" '$1 == k {print $2}'; }
dir_bytes() { du -sb "$1" | awk '{print $1}'; }

echo "== machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -r), $(go version | awk '{print $3}'), $(tar --version | head -1), $(zstd --version | head -1); load $(cut -d' ' -f1-3 /proc/loadavg); page cache: $([ "$DROP_CACHES" = 1 ] && echo 'dropped before every measurement' || echo 'warm')$([ "$REF_SYNC" = 1 ] && echo '; REF_SYNC=1: the reference syncs its output')"
SUMMARY=()

# --- chunker (no tree needed) --------------------------------------------------
section_chunker() {
  echo "== chunker: BenchmarkChunker/fastcdc, -cpu 1, -count $CHUNKER_COUNT"
  # = go test -run '^$' -bench Chunker/fastcdc -cpu 1 ./internal/snapshot/engine/,
  # compiled first so that the compiler's cores are not counted as others'
  (cd "$KILN_SRC" && go test -c -o "$TMP/engine.test" ./internal/snapshot/engine/) || die "go test -c ./internal/snapshot/engine failed"
  sync
  wait_quiet "$QUIET_SECS"
  local b0 b1 t0 t1
  b0=$(busy_ticks); t0=$(date +%s.%N)
  (cd "$KILN_SRC/internal/snapshot/engine" && "$TMP/engine.test" -test.run '^$' -test.bench 'Chunker/fastcdc' -test.cpu 1 \
    -test.count "$CHUNKER_COUNT") >"$TMP/chunker.out" 2>&1 || { cat "$TMP/chunker.out" >&2; die "the Chunker benchmark failed"; }
  b1=$(busy_ticks); t1=$(date +%s.%N)
  grep -E '^Benchmark' "$TMP/chunker.out" | sed 's/^/  /'
  mapfile -t MBS < <(awk '/^BenchmarkChunker\/fastcdc/ {for (i = 1; i <= NF; i++) if ($(i+1) == "MB/s") print $i}' "$TMP/chunker.out")
  [ "${#MBS[@]}" -gt 0 ] || die "no MB/s in go test's output"
  # One core benchmarking: whatever busy time is beyond one core during
  # the test binary's run is other processes'.
  local oth
  oth=$(awk -v b=$((b1 - b0)) -v hz="$CLK_TCK" -v t0="$t0" -v t1="$t1" 'BEGIN {o = b / hz / (t1 - t0) - 1; printf "%.2f", (o < 0) ? 0 : o}')
  echo "  cores used beyond the benchmark's one, during the benchmark: $oth$(awk -v o="$oth" 'BEGIN { if (o > 0.25) print "   (disturbed)" }')"
  local m lo hi
  m=$(median "${MBS[@]}"); lo=$(printf '%s\n' "${MBS[@]}" | sort -g | head -1); hi=$(printf '%s\n' "${MBS[@]}" | sort -g | tail -1)
  check "chunker ≥ ${TARGET_CHUNK_MBS} MB/s on one core" "$(ge "$m" "$TARGET_CHUNK_MBS")" "median $m MB/s ($lo–$hi)"
  SUMMARY+=("chunker  fastcdc, one core: median $m MB/s ($lo–$hi, ${#MBS[@]} runs)")
}
if has chunker; then section_chunker; fi

# --- data -------------------------------------------------------------------
SRV=$TMP/srv # the tree (a server root)
OUT=$TMP/out
mkdir -p "$OUT"
need_tree=0
for s in create rss; do has "$s" && need_tree=1; done
if [ "$need_tree" = 1 ]; then
  if [ -n "$DATA" ]; then
    echo "== copying $DATA into $SRV"
    cp -a "$DATA" "$SRV" || die "cp -a $DATA failed"
  else
    echo "== worldgen.py make --size $SIZE (about 35-45 s per GiB)"
    python3 "$WORLDGEN" make "$SRV" --size "$SIZE" || die "worldgen.py failed"
  fi
  INPUT_BYTES=$(du -sb "$SRV" | awk '{print $1}')
  INPUT_FILES=$(find "$SRV" -type f | wc -l)
  echo "== tree: $INPUT_BYTES bytes (du -sb), $INPUT_FILES files"
  echo "== warming the page cache (reading the tree once)"
  tar cf - -C "$SRV" . | cat >/dev/null
fi

# --- create -----------------------------------------------------------------
FIRST_STORED=() # StoredBytes of each run's first snapshot
CREATE_K=
MANIFEST=
kiln_create() { # RUN [ARGS]: the first snapshot of run RUN into store-RUN
  local i=$1
  shift
  measure "run $i kiln create" "$TMP/snapbench" -op create -root "$SRV" -store "$OUT/store-$i" -compression "$COMPRESSION" "$@"
  cp "$TMP/cmd.out" "$TMP/create-$i.out"
}
section_create() {
  echo "== create: first snapshot (engine.Create, empty file store) vs tar -cf - | zstd -1 -T0, $RUNS runs, Kiln at --snapshot-compression $COMPRESSION"
  local i gnu=() kiln=() pipeline prof=()
  pipeline="tar -cf - -C '$SRV' . | zstd -1 -T0 -q -f -o '$OUT/ref.tar.zst'"
  if [ "$REF_SYNC" = 1 ]; then pipeline+=" && sync '$OUT/ref.tar.zst'"; fi
  for i in $(seq "$RUNS"); do
    rm -f "$OUT/ref.tar.zst"
    prof=()
    if [ "$PROFILE" = 1 ] && [ "$i" = 1 ]; then prof=(-cpuprofile "$OUT/create.pprof"); fi
    if [ $((i % 2)) = 1 ]; then
      measure "run $i tar | zstd -1 -T0" bash -o pipefail -c "$pipeline"; gnu+=("$M_WALL")
      kiln_create "$i" "${prof[@]}"; kiln+=("$M_WALL")
    else
      kiln_create "$i" "${prof[@]}"; kiln+=("$M_WALL")
      measure "run $i tar | zstd -1 -T0" bash -o pipefail -c "$pipeline"; gnu+=("$M_WALL")
    fi
    FIRST_STORED+=("$(rfield "$TMP/create-$i.out" stored)")
    [ "$i" != 1 ] || MANIFEST=$(rfield "$TMP/create-$i.out" manifest) # store-1's: what the restores read
    echo "    store-$i: $(mb "$(dir_bytes "$OUT/store-$i")") (du -sb), stored=$(mb "${FIRST_STORED[-1]}"), $(rfield "$TMP/create-$i.out" chunks) chunks; engine's own time $(rfield "$TMP/create-$i.out" seconds) s"
  done
  [ -n "$MANIFEST" ] || die "no manifest key from snapbench"
  local g k gs ks kf speed size
  g=$(median "${gnu[@]}"); k=$(median "${kiln[@]}")
  CREATE_K=$k
  gs=$(stat -c %s "$OUT/ref.tar.zst"); ks=$(dir_bytes "$OUT/store-1")
  kf=$(find "$OUT/store-1" -type f -printf '%s\n' | awk '{s += $1} END {print s}')
  speed=$(ratio "$g" "$k"); size=$(ratio "$ks" "$gs")
  echo "  median: tar|zstd $g s, kiln $k s; sizes: .tar.zst $(mb "$gs") ($(ratio "$gs" "$INPUT_BYTES") of input), store $(mb "$ks") (blobs alone $(mb "$kf"))"
  check "create speed ≥ ${TARGET_CREATE_SPEED}× tar|zstd -1 -T0" "$(ge "$speed" "$TARGET_CREATE_SPEED")" "${speed}× ($k s vs $g s)"
  check "store size ≤ ${TARGET_CREATE_SIZE}× the .tar.zst" "$(le "$size" "$TARGET_CREATE_SIZE")" "${size}× ($(mb "$ks") vs $(mb "$gs"))"
  SUMMARY+=("create   tar|zstd ${g}s $(mb "$gs") | kiln ${k}s store $(mb "$ks") | speed ${speed}× size ${size}×")
  if [ "$PROFILE" = 1 ] && [ -f "$OUT/create.pprof" ]; then
    echo "  CPU profile of run 1 ($OUT/create.pprof), top 25 by flat time:"
    go tool pprof -top -nodecount 25 "$TMP/snapbench" "$OUT/create.pprof" 2>/dev/null | sed 's/^/    /' || true
  fi
}
if has create; then section_create; fi

# --- restore into an empty root ----------------------------------------------
section_restore() {
  echo "== restore: restore.Run into an empty root vs zstd -d -c | tar -x into an empty dir ($(mb "$(stat -c %s "$OUT/ref.tar.zst")")), $RUNS runs"
  local i gnu=() kiln=() same=1
  if [ "$DROP_CACHES" != 1 ]; then
    # The local store writes chunks with O_DIRECT (operations.md): unlike
    # the .tar.zst, they are not in the page cache as just written. Both
    # sides warm, as the header says: read the store once.
    echo "== warming the page cache (reading the store once)"
    find "$OUT/store-1" -type f -exec cat {} + >/dev/null
  fi
  for i in $(seq "$RUNS"); do
    mkdir "$TMP/x-gnu-$i" "$TMP/x-kiln-$i"
    local pipeline="zstd -d -q -c '$OUT/ref.tar.zst' | tar -x -C '$TMP/x-gnu-$i'"
    if [ "$REF_SYNC" = 1 ]; then pipeline+=" && sync -f '$TMP/x-gnu-$i'"; fi
    if [ $((i % 2)) = 1 ]; then
      measure "run $i zstd -d | tar -x" bash -o pipefail -c "$pipeline"; gnu+=("$M_WALL")
      measure "run $i kiln restore" "$TMP/snapbench" -op restore -root "$TMP/x-kiln-$i" -store "$OUT/store-1" -manifest "$MANIFEST"; kiln+=("$M_WALL")
    else
      measure "run $i kiln restore" "$TMP/snapbench" -op restore -root "$TMP/x-kiln-$i" -store "$OUT/store-1" -manifest "$MANIFEST"; kiln+=("$M_WALL")
      measure "run $i zstd -d | tar -x" bash -o pipefail -c "$pipeline"; gnu+=("$M_WALL")
    fi
    if [ "$i" = 1 ]; then
      # tar restores the root's own mode and mtime ("."); the engine keeps the root's (doc.go)
      diff -r --no-dereference "$TMP/x-gnu-$i" "$TMP/x-kiln-$i" >"$TMP/diff.out" 2>&1 || same=0
    fi
  done
  local g k speed
  g=$(median "${gnu[@]}"); k=$(median "${kiln[@]}")
  speed=$(ratio "$g" "$k")
  echo "  median: zstd -d | tar -x $g s, kiln $k s"
  check "restore speed ≥ ${TARGET_RESTORE_SPEED}× zstd -d | tar -x" "$(ge "$speed" "$TARGET_RESTORE_SPEED")" "${speed}× ($k s vs $g s)"
  check "restored tree equals tar's extraction" "$same" "$(head -c 300 "$TMP/diff.out")"
  SUMMARY+=("restore  zstd -d|tar -x ${g}s | kiln ${k}s | speed ${speed}×")
}
if has restore; then section_restore; fi

# --- rss: kiln serve taking a snapshot through the API ------------------------
section_rss() {
  echo "== rss: kiln serve --dev, POST /snapshots of a kiln-test server holding the tree"
  local data=$TMP/data port token api sid status snap t0 t1 hwm0 rss0 maxrss=0 r body st
  "$TMP/kiln" serve --dev --data-dir "$data" --addr 127.0.0.1:0 --sftp-addr "" --rate-limit 1000000 --snapshot-compression "$COMPRESSION" \
    --log-level warn >"$TMP/serve.log" 2>&1 &
  KILN_PID=$!
  port=$(wait_port "$KILN_PID" "$TMP/serve.log")
  for _ in $(seq 200); do [ -s "$data/bootstrap-token" ] && curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.1; done
  [ -s "$data/bootstrap-token" ] || die "kiln: no bootstrap token"
  token=$(tr -d '[:space:]' <"$data/bootstrap-token")
  api="http://127.0.0.1:$port/api/client/v1"
  capi() { curl -sS -f -H "Authorization: Bearer $token" -H 'Content-Type: application/json' "$@"; }
  body=$(capi -d '{"name":"w","software":"kiln-test","memory_mb":512,"disk_mb":4096}' "$api/servers") || die "POST /servers failed"
  sid=$(jq -r .server.id <<<"$body")
  [ -n "$sid" ] && [ "$sid" != null ] || die "POST /servers: no id in $body"
  for _ in $(seq 600); do
    st=$(capi "$api/servers/$sid" | jq -r .server.status)
    [ "$st" = offline ] && break
    sleep 0.1
  done
  [ "$st" = offline ] || die "server $sid: status $st after 60 s, not offline"
  [ -d "$data/servers/$sid" ] || die "no root $data/servers/$sid"
  echo "  server $sid offline; copying the tree into its root"
  cp -a "$SRV/." "$data/servers/$sid/" || die "cp into the server root failed"
  sync
  wait_quiet "$QUIET_SECS"
  hwm0=$(hwm_kib "$KILN_PID"); rss0=$(rss_kib "$KILN_PID")
  echo "  before: VmRSS $(mib "$rss0") MiB, VmHWM $(mib "$hwm0") MiB"
  local b0 c0
  b0=$(busy_ticks); c0=$(cpu_ticks "$KILN_PID")
  t0=$(date +%s.%N)
  body=$(capi -d "{\"source_server_id\":\"$sid\",\"name\":\"b\"}" "$api/snapshots") || die "POST /snapshots failed"
  snap=$(jq -r .snapshot_id <<<"$body")
  [ -n "$snap" ] && [ "$snap" != null ] || die "POST /snapshots: no snapshot_id in $body"
  local deadline=$((SECONDS + SNAP_TIMEOUT))
  while :; do
    r=$(rss_kib "$KILN_PID"); [ "$r" -gt "$maxrss" ] && maxrss=$r
    body=$(capi "$api/snapshots/$snap") || die "GET /snapshots/$snap failed"
    status=$(jq -r .snapshot.status <<<"$body")
    case $status in ready | failed) break ;; esac
    [ "$SECONDS" -lt "$deadline" ] || break
    sleep 0.2
  done
  t1=$(date +%s.%N)
  local hwm secs cores oth
  hwm=$(hwm_kib "$KILN_PID")
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b - a}')
  cores=$(awk -v t=$(( $(cpu_ticks "$KILN_PID") - c0 )) -v hz="$CLK_TCK" -v s="$secs" 'BEGIN {printf "%.2f", t / hz / s}')
  oth=$(awk -v b=$(( $(busy_ticks) - b0 )) -v c="$cores" -v hz="$CLK_TCK" -v s="$secs" 'BEGIN {o = b / hz / s - c - 0.05; printf "%.2f", (o < 0) ? 0 : o}')
  echo "  snapshot $snap: $status after $secs s (POST → ready seen, polls every 0.2 s), kiln used $cores cores, others $oth$(awk -v o="$oth" 'BEGIN { if (o > 0.25) print "   (disturbed)" }')"
  echo "  size_bytes $(jq -r .snapshot.size_bytes <<<"$body"), stored_bytes $(jq -r .snapshot.stored_bytes <<<"$body")$( [ "$status" = failed ] && echo ", error: $(jq -r .snapshot.error <<<"$body")")"
  echo "  during: max VmRSS sampled $(mib "$maxrss") MiB; VmHWM at the end $(mib "$hwm") MiB"
  check "API snapshot ready" "$([ "$status" = ready ] && echo 1 || echo 0)" "$status after $secs s"
  check "kiln serve peak RSS < ${TARGET_RSS_MIB} MiB" "$(lt "$(mib "$hwm")" "$TARGET_RSS_MIB")" "VmHWM $(mib "$hwm") MiB (before $(mib "$hwm0"), max VmRSS sampled $(mib "$maxrss"))"
  SUMMARY+=("rss      kiln serve snapshot of the tree: VmHWM $(mib "$hwm") MiB (max sampled VmRSS $(mib "$maxrss")); POST → ready $secs s")
  stop_pid "$KILN_PID" 10
  KILN_PID=
}
if has rss; then section_rss; fi

# --- second snapshot after a 1 % mutate --------------------------------------
section_second() {
  echo "== mutate: worldgen.py mutate --percent 1"
  python3 "$WORLDGEN" mutate "$SRV" --percent 1 || die "worldgen.py mutate failed"
  echo "== warming the page cache (reading the mutated tree once)"
  tar cf - -C "$SRV" . | cat >/dev/null
  echo "== second: engine.Create after the mutate, into each create run's store, $RUNS runs"
  local i t=() b=() sb grow
  for i in $(seq "$RUNS"); do
    sb=$(dir_bytes "$OUT/store-$i")
    measure "run $i kiln second snapshot" "$TMP/snapbench" -op create -root "$SRV" -store "$OUT/store-$i" -compression "$COMPRESSION" \
      -parent "$(rfield "$TMP/create-$i.out" manifest)"; t+=("$M_WALL")
    cp "$TMP/cmd.out" "$TMP/second-$i.out"
    b+=("$(ratio "$(rfield "$TMP/second-$i.out" stored)" "${FIRST_STORED[$((i - 1))]}")")
    grow=$(( $(dir_bytes "$OUT/store-$i") - sb ))
    echo "    stored $(mb "$(rfield "$TMP/second-$i.out" stored)") in $(rfield "$TMP/second-$i.out" new_chunks) new chunks of $(rfield "$TMP/second-$i.out" chunks) (${b[-1]} of the first's $(mb "${FIRST_STORED[$((i - 1))]}")); the store grew $(mb "$grow"); $(rfield "$TMP/second-$i.out" reused_files) files reused unread; engine's own time $(rfield "$TMP/second-$i.out" seconds) s"
  done
  local k bm tr
  k=$(median "${t[@]}"); bm=$(median "${b[@]}")
  tr=$(ratio "$k" "$CREATE_K")
  echo "  median: second $k s vs first $CREATE_K s; bytes ratio $bm"
  check "second stores < ${TARGET_SECOND_BYTES} of the first's bytes" "$(lt "$bm" "$TARGET_SECOND_BYTES")" "$bm"
  check "second takes < ${TARGET_SECOND_TIME} of the first's time" "$(lt "$tr" "$TARGET_SECOND_TIME")" "$tr ($k s vs $CREATE_K s)"
  SUMMARY+=("second   ${k}s vs first ${CREATE_K}s: time ${tr}×, bytes ${bm}× of the first's")
}
if has second; then section_second; fi

# --- restore over the mutated tree (reported) --------------------------------
section_remut() {
  echo "== remut: the first snapshot restored over a copy of the mutated tree vs zstd -d | tar -x over another copy, $RUNS runs"
  local i gnu=() kiln=() same=1
  for i in $(seq "$RUNS"); do
    cp -a "$SRV" "$TMP/m-gnu-$i"; cp -a "$SRV" "$TMP/m-kiln-$i"
    tar cf - -C "$TMP/m-gnu-$i" . | cat >/dev/null; tar cf - -C "$TMP/m-kiln-$i" . | cat >/dev/null
    local pipeline="zstd -d -q -c '$OUT/ref.tar.zst' | tar -x -C '$TMP/m-gnu-$i'"
    if [ "$REF_SYNC" = 1 ]; then pipeline+=" && sync -f '$TMP/m-gnu-$i'"; fi
    if [ $((i % 2)) = 1 ]; then
      measure "run $i zstd -d | tar -x (over)" bash -o pipefail -c "$pipeline"; gnu+=("$M_WALL")
      measure "run $i kiln restore (over)" "$TMP/snapbench" -op restore -root "$TMP/m-kiln-$i" -store "$OUT/store-1" -manifest "$MANIFEST"; kiln+=("$M_WALL")
      cp "$TMP/cmd.out" "$TMP/remut-$i.out"
    else
      measure "run $i kiln restore (over)" "$TMP/snapbench" -op restore -root "$TMP/m-kiln-$i" -store "$OUT/store-1" -manifest "$MANIFEST"; kiln+=("$M_WALL")
      cp "$TMP/cmd.out" "$TMP/remut-$i.out"
      measure "run $i zstd -d | tar -x (over)" bash -o pipefail -c "$pipeline"; gnu+=("$M_WALL")
    fi
    echo "    kiln replaced $(rfield "$TMP/remut-$i.out" replaced) entries, kept $(rfield "$TMP/remut-$i.out" kept) files in place ($(mb "$(rfield "$TMP/remut-$i.out" kept_bytes)")); engine's own time $(rfield "$TMP/remut-$i.out" seconds) s"
    if [ "$i" = 1 ]; then
      diff -r --no-dereference "$TMP/m-gnu-$i" "$TMP/m-kiln-$i" >"$TMP/diff.out" 2>&1 || same=0
    fi
  done
  local g k speed
  g=$(median "${gnu[@]}"); k=$(median "${kiln[@]}")
  speed=$(ratio "$g" "$k")
  echo "  median: zstd -d | tar -x over the tree $g s, kiln $k s: ${speed}× (reported, no target)"
  check "restored-over tree equals tar's" "$same" "$(head -c 300 "$TMP/diff.out")"
  SUMMARY+=("remut    over the mutated tree: zstd -d|tar -x ${g}s | kiln ${k}s | speed ${speed}× (no target)")
}
if has remut; then section_remut; fi

[ "$DISTURBED" = 0 ] || echo "== $DISTURBED measurement(s) disturbed by other processes (oth > 0.25): rerun on a quiet machine"
finish "summary (medians of $RUNS runs; input $(mb "${INPUT_BYTES:-0}"), ${INPUT_FILES:-0} files)"
