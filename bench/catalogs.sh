#!/usr/bin/env bash
# bench/catalogs.sh — the performance targets of issue 15 (mod catalogs),
# measured by Go benchmarks of internal/modcatalog, in-process, loopback
# only (the catalogs and the modpack's file host are local httptest
# stand-ins serving the upstreams' published example shapes):
#
#   search  BenchmarkCachedSearch: a CurseForge search of 10 results
#           answered from the cache, validation included; the median and
#           p99 of the calls. Target: p99 < TARGET_P99_US (1000 µs = 1 ms).
#   cache   BenchmarkCacheMemory: 1,000 distinct searches of 10 results
#           (a popular mod's page each: 40 latest-file entries, real-length
#           names and URLs) cached with the default bounds; the live heap
#           they hold after two GCs. Target: < TARGET_CACHE_MIB (20) MiB.
#   pack    BenchmarkModpack200: a 200-file .mrpack (1 to 4 MiB a file,
#           ~500 MiB, generated on the fly from seeded streams so neither
#           side holds a file) installed into a real Paper server's root
#           (SQLite, the disk ledger, the stager). Reported: the most
#           downloads in flight, the Go heap's peak growth (sampled every
#           ms), the process's peak RSS growth (VmHWM after a reset through
#           /proc/self/clear_refs) and the throughput. Targets: in flight ≤
#           8; heap growth < TARGET_PACK_HEAP_MIB (8 MiB: 1 MiB per download
#           in flight; the files are 500 MiB).
#
# Settings (environment): RUNS=3 (-count of each benchmark; the worst run
# is judged), REV=<commit> (measure that commit, from git archive; default
# the work tree), QUIET_WAIT=30, KEEP=1 (keep the temp dir), SECTIONS
# (default "search cache pack").
# Exit: 0 every target met, 1 a target missed, 2 setup error.
set -euo pipefail
export LC_ALL=C
BENCH_NAME=catalogs-bench
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/lib.sh"
RUNS=${RUNS:-3}
REV=${REV:-}
QUIET_WAIT=${QUIET_WAIT:-30}
SECTIONS=${SECTIONS:-search cache pack}
TARGET_P99_US=${TARGET_P99_US:-1000}
TARGET_CACHE_MIB=${TARGET_CACHE_MIB:-20}
TARGET_PACK_HEAP_MIB=${TARGET_PACK_HEAP_MIB:-8}
want() { [[ " $SECTIONS " == *" $1 "* ]]; }
unset_kiln_env

TMP=$(mktemp -d /tmp/kiln-catalogs-bench.XXXXXX)
chmod 711 "$TMP" # kiln serve as root: servers' users reach their roots below it (--uid-range)
cleanup() { [ "${KEEP:-}" = 1 ] && echo "kept $TMP" || rm -rf "$TMP"; }
trap cleanup EXIT

kiln_source
echo "== machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -r), $(go version | cut -d' ' -f3)"
echo "== measuring $KILN_FROM"
(cd "$KILN_SRC" && go test -c -o "$TMP/modcatalog.test" ./internal/modcatalog) || die "go test -c ./internal/modcatalog failed"

# bench NAME BENCHTIME: runs one benchmark RUNS times; its output in $TMP/NAME.out.
bench() {
  wait_quiet
  echo "== $1 (-benchtime $2, -count $RUNS)"
  (cd "$KILN_SRC/internal/modcatalog" && "$TMP/modcatalog.test" -test.run '^$' -test.bench "^$1\$" \
    -test.benchtime "$2" -test.count "$RUNS" -test.benchmem) | tee "$TMP/$1.out" | grep -E "^$1" || die "$1 failed"
}
# worst NAME UNIT max|min: the worst value of UNIT over the runs.
worst() {
  awk -v u="$2" -v how="$3" '$1 ~ "^"name { for (i = 2; i < NF; i++) if ($(i+1) == u) { v = $i
      if (n == 0 || (how == "max" && v > w) || (how == "min" && v < w)) w = v; n++ } }
    END { if (n == 0) exit 1; print w }' name="$1" "$TMP/$1.out"
}

SUMMARY=()
if want search; then
  bench BenchmarkCachedSearch 2s
  p99=$(worst BenchmarkCachedSearch p99-ns max); p50=$(worst BenchmarkCachedSearch p50-ns max)
  p99us=$(awk -v n="$p99" 'BEGIN {printf "%.1f", n/1000}'); p50us=$(awk -v n="$p50" 'BEGIN {printf "%.1f", n/1000}')
  SUMMARY+=("cached search: p50 ${p50us} µs, p99 ${p99us} µs (worst of $RUNS)")
  check "cached search p99 < ${TARGET_P99_US} µs" "$(lt "$p99us" "$TARGET_P99_US")" "${p99us} µs"
fi
if want cache; then
  bench BenchmarkCacheMemory 1x
  mib=$(worst BenchmarkCacheMemory MiB/1000-entries max); per=$(worst BenchmarkCacheMemory B/entry max)
  acc=$(worst BenchmarkCacheMemory accounted-B/entry max)
  SUMMARY+=("1,000 cached searches: ${mib} MiB live heap (${per} B/entry; the cache accounts ${acc} B/entry)")
  check "1,000 cached entries < ${TARGET_CACHE_MIB} MiB" "$(lt "$mib" "$TARGET_CACHE_MIB")" "${mib} MiB"
fi
if want pack; then
  bench BenchmarkModpack200 1x
  inflight=$(worst BenchmarkModpack200 max-in-flight max); heap=$(worst BenchmarkModpack200 heap-growth-MiB max)
  rss=$(worst BenchmarkModpack200 rss-growth-MiB max); mbs=$(worst BenchmarkModpack200 MB/s min)
  SUMMARY+=("200-file modpack (~500 MiB): ≤ ${inflight} in flight, heap +${heap} MiB, RSS +${rss} MiB, ≥ ${mbs} MB/s (worst of $RUNS)")
  check "modpack downloads in flight ≤ 8" "$(awk -v a="$inflight" 'BEGIN {print (a <= 8) ? 1 : 0}')" "$inflight"
  check "modpack heap growth < ${TARGET_PACK_HEAP_MIB} MiB" "$(lt "$heap" "$TARGET_PACK_HEAP_MIB")" "+${heap} MiB (RSS +${rss} MiB)"
fi
finish "catalogs: $KILN_FROM"
