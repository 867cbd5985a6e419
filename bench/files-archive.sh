#!/usr/bin/env bash
# bench/files-archive.sh — package internal/files/archive against GNU tar,
# gzip and zstd on the same world-like tree (shared/bench/worldgen.py make,
# SIZE 1G), all in one run, no network:
#
#   targz   Compress(tar.gz) vs `tar czf`              (same names, same tree)
#           targets: Kiln ≥ 1.5× as fast, output ≤ 1.05× GNU's size
#   zst     Compress(tar.zst) vs `tar cf - | zstd -1 -T0`
#           targets: Kiln ≥ 0.7× as fast, output ≤ 1.00× zstd's size
#   untargz Decompress of GNU's tar.gz into an empty directory vs `tar xzf`
#           target: Kiln ≥ 1.0× as fast (no slower). Each run extracts into
#           new directories, removed only at the end (needs 2 × RUNS × the
#           tree's size of free space): see section_untargz for why.
#
# Kiln runs through bench/archivebench (a small driver built here: it opens
# the tree as a server root with files.Open and calls archive.Compress /
# archive.Decompress), timed from outside as the reference commands are,
# process start included. Kiln's output is made durable (Compress's
# archive is fsynced by Root.WriteFile; Decompress ends its staging with
# one syncfs before moving the tree into place); GNU tar's is not: that
# cost is Kiln's.
#
# Each section runs RUNS times, Kiln and the reference alternating (which
# goes first alternates too); the verdict uses the median of each side.
# Before every measurement the script waits (up to QUIET_WAIT s) for
# QUIET_SECS s in a row of an idle machine, and reports the cores other
# processes used during it ("oth"): a run with oth well above 0 was
# disturbed. Every measurement starts after a sync, so neither side writes
# out the other's dirty pages. The tree is read once before the first run
# so both sides read it from the page cache. Outputs are checked: gzip -t
# and zstd -t, the same entry count as GNU's archive, and the extracted
# tree equal to GNU's (diff -r, first run).
#
# Exit status: 0 when every target and check passes, 1 otherwise, 2 on a
# setup error. Everything is made in a temp dir, removed at the end (KEEP=1
# keeps it; DATA's tree is never modified or removed).
#
# Settings (environment):
#   SECTIONS="targz zst untargz"  which sections, in this order
#   SIZE=1G                       worldgen size (ignored with DATA)
#   DATA=<dir>                    use this existing tree instead of making one
#                                 (it is copied into the temp dir: Compress
#                                 writes its archive into the root)
#   RUNS=3 QUIET_WAIT=60 QUIET_SECS=3 KEEP=0
#   REV=<git revision>            build that commit (git archive) instead of
#                                 the work tree
#   TARGET_GZ_SPEEDUP=1.5 TARGET_GZ_SIZE=1.05 TARGET_ZST_SPEED=0.7
#   TARGET_ZST_SIZE=1.0 TARGET_UNGZ_SPEED=1.0
set -euo pipefail
export LC_ALL=C

SECTIONS=${SECTIONS:-targz zst untargz}
SIZE=${SIZE:-1G}
DATA=${DATA:-}
RUNS=${RUNS:-3}
QUIET_WAIT=${QUIET_WAIT:-60}
QUIET_SECS=${QUIET_SECS:-3}
KEEP=${KEEP:-0}
REV=${REV:-}
TARGET_GZ_SPEEDUP=${TARGET_GZ_SPEEDUP:-1.5}
TARGET_GZ_SIZE=${TARGET_GZ_SIZE:-1.05}
TARGET_ZST_SPEED=${TARGET_ZST_SPEED:-0.7}
TARGET_ZST_SIZE=${TARGET_ZST_SIZE:-1.0}
TARGET_UNGZ_SPEED=${TARGET_UNGZ_SPEED:-1.0}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORLDGEN=${WORLDGEN:-$ROOT/../shared/bench/worldgen.py}

BENCH_NAME=files-archive
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh" # die, kiln_source, wait_quiet, busy_ticks, check, ge, finish

for s in $SECTIONS; do
  case $s in targz | zst | untargz) ;; *) die "SECTIONS: unknown section $s (want targz, zst, untargz)" ;; esac
done
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || die "RUNS must be a positive integer"
for c in go tar gzip python3 awk diff; do command -v "$c" >/dev/null 2>&1 || die "$c is missing"; done
[ -x /usr/bin/time ] || die "/usr/bin/time (GNU time) is missing: apt-get install time"
if [[ " $SECTIONS " == *" zst "* ]] && ! command -v zstd >/dev/null 2>&1; then
  [ "$(id -u)" = 0 ] || die "zstd is missing and we are not root: apt-get install zstd"
  echo "== installing zstd (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq zstd >/dev/null
  command -v zstd >/dev/null 2>&1 || die "zstd still missing after apt-get install"
fi
if [ -z "$DATA" ]; then [ -f "$WORLDGEN" ] || die "no worldgen.py at $WORLDGEN (set WORLDGEN or DATA)"; fi
if [ -n "$DATA" ]; then [ -d "$DATA" ] || die "DATA=$DATA is not a directory"; fi

# --- temp dir and cleanup ---------------------------------------------------
TMP=$(mktemp -d -t kiln-bench.XXXXXX)
chmod 711 "$TMP" # kiln serve as root: servers' users reach their roots below it (--uid-range)
status=2
cleanup() {
  trap - EXIT INT TERM
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
echo "== building bench/archivebench ($KILN_FROM) into $TMP"
(cd "$KILN_SRC" && go build -o "$TMP/archivebench" ./bench/archivebench) || die "go build ./bench/archivebench failed"

# --- data -------------------------------------------------------------------
SRV=$TMP/srv # the server root: Kiln writes its archives here, GNU tar into $OUT
OUT=$TMP/out
mkdir -p "$OUT"
if [ -n "$DATA" ]; then
  echo "== copying $DATA into $SRV"
  cp -a "$DATA" "$SRV" || die "cp -a $DATA failed"
else
  echo "== worldgen.py make --size $SIZE (about 45 s per GiB)"
  python3 "$WORLDGEN" make "$SRV" --size "$SIZE" || die "worldgen.py failed"
fi
mapfile -t NAMES < <(cd "$SRV" && ls -A | grep -v -e '^archive-' -e '^\.kiln-tmp-' | sort)
[ "${#NAMES[@]}" -gt 0 ] || die "the tree $SRV is empty"
NAMES_CSV=$(IFS=,; echo "${NAMES[*]}")
INPUT_BYTES=$(du -sb "$SRV" | awk '{print $1}')
INPUT_FILES=$(find "$SRV" -type f | wc -l)
echo "== tree: $INPUT_BYTES bytes, $INPUT_FILES files, names: ${NAMES[*]}"
echo "== warming the page cache (reading the tree once)"
tar cf - -C "$SRV" "${NAMES[@]}" | cat >/dev/null

echo "== machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -r), $(go version | awk '{print $3}'), $(tar --version | head -1), $(gzip --version | head -1), $(zstd --version 2>/dev/null | head -1 || echo 'no zstd')"

# --- measuring --------------------------------------------------------------
# measure LABEL CMD...: runs CMD under GNU time after waiting for a quiet
# machine; sets M_WALL (s), M_CPU (cores used by CMD) and M_OTH (cores used
# by other processes meanwhile), prints one line; a setup error if CMD fails.
measure() {
  local label=$1 b0 b1 line
  shift
  # Neither side pays for the other's dirty pages: Kiln fsyncs its output,
  # and on ext4 (data=ordered) an fsync also writes out other files' data.
  sync
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
  printf '  %-28s %7.2f s   cores cmd/oth %s/%s%s\n' "$label" "$M_WALL" "$M_CPU" "$M_OTH" \
    "$(awk -v o="$M_OTH" 'BEGIN { if (o > 0.25) print "   (disturbed)" }')"
}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
le() { awk -v a="$1" -v b="$2" 'BEGIN {exit !(a <= b)}' && echo 1 || echo 0; }
mb() { awk -v b="$1" 'BEGIN {printf "%.1f MB", b / 1e6}'; }
kiln_archive() { # the archive Compress just made in $SRV, moved to $OUT/$1
  local made
  made=$(awk '/^ARCHIVE_RESULT / {for (i = 1; i <= NF; i++) if ($i ~ /^name=/) print substr($i, 6)}' "$TMP/cmd.out")
  [ -n "$made" ] && [ -f "$SRV/$made" ] || die "no archive from archivebench: $(cat "$TMP/cmd.out")"
  mv "$SRV/$made" "$OUT/$1"
}
entries() { tar -tf "$1" ${2:+"$2"} | wc -l; }

SUMMARY=()

section_targz() {
  echo "== targz: Compress(tar.gz) vs tar czf, $RUNS runs"
  local i gnu=() kiln=()
  for i in $(seq "$RUNS"); do
    rm -f "$OUT/gnu.tar.gz" "$OUT/kiln.tar.gz"
    if [ $((i % 2)) = 1 ]; then
      measure "run $i gnu tar czf" tar czf "$OUT/gnu.tar.gz" -C "$SRV" "${NAMES[@]}"; gnu+=("$M_WALL")
      measure "run $i kiln tar.gz" "$TMP/archivebench" -root "$SRV" -op compress -format tar.gz -names "$NAMES_CSV"; kiln+=("$M_WALL")
      kiln_archive kiln.tar.gz
    else
      measure "run $i kiln tar.gz" "$TMP/archivebench" -root "$SRV" -op compress -format tar.gz -names "$NAMES_CSV"; kiln+=("$M_WALL")
      kiln_archive kiln.tar.gz
      measure "run $i gnu tar czf" tar czf "$OUT/gnu.tar.gz" -C "$SRV" "${NAMES[@]}"; gnu+=("$M_WALL")
    fi
  done
  local g k gs ks speed size
  g=$(median "${gnu[@]}"); k=$(median "${kiln[@]}")
  gs=$(stat -c %s "$OUT/gnu.tar.gz"); ks=$(stat -c %s "$OUT/kiln.tar.gz")
  speed=$(ratio "$g" "$k"); size=$(ratio "$ks" "$gs")
  echo "  median: gnu $g s, kiln $k s; sizes: gnu $(mb "$gs") ($(ratio "$gs" "$INPUT_BYTES") of input), kiln $(mb "$ks")"
  check "tar.gz speed ≥ ${TARGET_GZ_SPEEDUP}× tar czf" "$(ge "$speed" "$TARGET_GZ_SPEEDUP")" "${speed}× ($k s vs $g s)"
  check "tar.gz size ≤ ${TARGET_GZ_SIZE}× tar czf" "$(le "$size" "$TARGET_GZ_SIZE")" "${size}× ($(mb "$ks") vs $(mb "$gs"))"
  check "tar.gz passes gzip -t" "$(gzip -t "$OUT/kiln.tar.gz" 2>/dev/null && echo 1 || echo 0)" ""
  local ge_n ke_n
  ge_n=$(entries "$OUT/gnu.tar.gz"); ke_n=$(entries "$OUT/kiln.tar.gz")
  check "tar.gz holds GNU's entry count" "$([ "$ge_n" = "$ke_n" ] && echo 1 || echo 0)" "$ke_n vs $ge_n"
  SUMMARY+=("targz    gnu ${g}s $(mb "$gs") | kiln ${k}s $(mb "$ks") | speed ${speed}× size ${size}×")
}

section_zst() {
  echo "== zst: Compress(tar.zst) vs tar cf - | zstd -1 -T0, $RUNS runs"
  local i gnu=() kiln=() pipeline
  pipeline="tar cf - -C '$SRV' $(printf "'%s' " "${NAMES[@]}")| zstd -1 -T0 -q -f -o '$OUT/gnu.tar.zst'"
  for i in $(seq "$RUNS"); do
    rm -f "$OUT/gnu.tar.zst" "$OUT/kiln.tar.zst"
    if [ $((i % 2)) = 1 ]; then
      measure "run $i tar | zstd -1 -T0" bash -o pipefail -c "$pipeline"; gnu+=("$M_WALL")
      measure "run $i kiln tar.zst" "$TMP/archivebench" -root "$SRV" -op compress -format tar.zst -names "$NAMES_CSV"; kiln+=("$M_WALL")
      kiln_archive kiln.tar.zst
    else
      measure "run $i kiln tar.zst" "$TMP/archivebench" -root "$SRV" -op compress -format tar.zst -names "$NAMES_CSV"; kiln+=("$M_WALL")
      kiln_archive kiln.tar.zst
      measure "run $i tar | zstd -1 -T0" bash -o pipefail -c "$pipeline"; gnu+=("$M_WALL")
    fi
  done
  local g k gs ks speed size
  g=$(median "${gnu[@]}"); k=$(median "${kiln[@]}")
  gs=$(stat -c %s "$OUT/gnu.tar.zst"); ks=$(stat -c %s "$OUT/kiln.tar.zst")
  speed=$(ratio "$g" "$k"); size=$(ratio "$ks" "$gs")
  echo "  median: zstd $g s, kiln $k s; sizes: zstd $(mb "$gs"), kiln $(mb "$ks")"
  check "tar.zst speed ≥ ${TARGET_ZST_SPEED}× zstd -1 -T0" "$(ge "$speed" "$TARGET_ZST_SPEED")" "${speed}× ($k s vs $g s)"
  check "tar.zst size ≤ ${TARGET_ZST_SIZE}× zstd -1" "$(le "$size" "$TARGET_ZST_SIZE")" "${size}× ($(mb "$ks") vs $(mb "$gs"))"
  check "tar.zst passes zstd -t" "$(zstd -t -q "$OUT/kiln.tar.zst" 2>/dev/null && echo 1 || echo 0)" ""
  local ge_n ke_n
  ge_n=$(zstd -dc -q "$OUT/gnu.tar.zst" | tar -t | wc -l); ke_n=$(zstd -dc -q "$OUT/kiln.tar.zst" | tar -t | wc -l)
  check "tar.zst holds the same entry count" "$([ "$ge_n" = "$ke_n" ] && echo 1 || echo 0)" "$ke_n vs $ge_n"
  SUMMARY+=("zst      zstd ${g}s $(mb "$gs") | kiln ${k}s $(mb "$ks") | speed ${speed}× size ${size}×")
}

section_untargz() {
  [ -f "$OUT/gnu.tar.gz" ] || { echo "== making $OUT/gnu.tar.gz (not timed)"; tar czf "$OUT/gnu.tar.gz" -C "$SRV" "${NAMES[@]}"; }
  echo "== untargz: Decompress(tar.gz) vs tar xzf of GNU's archive ($(mb "$(stat -c %s "$OUT/gnu.tar.gz")")), $RUNS runs"
  local i gnu=() kiln=() same=1
  # Every run extracts into new directories, and nothing is deleted until
  # the section ends: on ext4 without a journal (this VM's /tmp) creating
  # files right after ~40k were deleted is several times slower (inode
  # allocation skips and re-reads inodes deleted in the last 5-35 s,
  # ext4's recently_deleted), which made both sides' times swing 4-13 s
  # depending on which ran first after the previous run's rm -rf.
  for i in $(seq "$RUNS"); do
    mkdir "$TMP/x-gnu-$i" "$TMP/x-kiln-$i"
    # The archive must be inside the root, as a copy: Kiln never reads a
    # file with other hard links (one could be outside the root).
    cp "$OUT/gnu.tar.gz" "$TMP/x-kiln-$i/in.tar.gz"
    if [ $((i % 2)) = 1 ]; then
      measure "run $i gnu tar xzf" tar xzf "$OUT/gnu.tar.gz" -C "$TMP/x-gnu-$i"; gnu+=("$M_WALL")
      measure "run $i kiln decompress" "$TMP/archivebench" -root "$TMP/x-kiln-$i" -op decompress -archive in.tar.gz; kiln+=("$M_WALL")
    else
      measure "run $i kiln decompress" "$TMP/archivebench" -root "$TMP/x-kiln-$i" -op decompress -archive in.tar.gz; kiln+=("$M_WALL")
      measure "run $i gnu tar xzf" tar xzf "$OUT/gnu.tar.gz" -C "$TMP/x-gnu-$i"; gnu+=("$M_WALL")
    fi
    rm -f "$TMP/x-kiln-$i/in.tar.gz" # one inode freed: not near the next run's files
    if [ "$i" = 1 ]; then
      diff -r --no-dereference "$TMP/x-gnu-$i" "$TMP/x-kiln-$i" >"$TMP/diff.out" 2>&1 || same=0
    fi
  done
  rm -rf "$TMP"/x-gnu-* "$TMP"/x-kiln-*
  local g k speed
  g=$(median "${gnu[@]}"); k=$(median "${kiln[@]}")
  speed=$(ratio "$g" "$k")
  echo "  median: gnu $g s, kiln $k s"
  check "untar.gz speed ≥ ${TARGET_UNGZ_SPEED}× tar xzf" "$(ge "$speed" "$TARGET_UNGZ_SPEED")" "${speed}× ($k s vs $g s)"
  check "extracted tree equals GNU's" "$same" "$(head -c 300 "$TMP/diff.out")"
  SUMMARY+=("untargz  gnu ${g}s | kiln ${k}s | speed ${speed}×")
}

for s in $SECTIONS; do "section_$s"; done

finish "summary (medians of $RUNS runs; input $(mb "$INPUT_BYTES"), $INPUT_FILES files)"
