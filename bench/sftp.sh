#!/usr/bin/env bash
# bench/sftp.sh — Kiln's SFTP server against OpenSSH's own sftp-server, side
# by side, with the same OpenSSH sftp client over loopback:
#
#   - upload and download of one file of BIG_MB MiB (default 1024),
#   - upload and download of SMALL_FILES files (default 10,000:
#     /work/shared/bench/worldgen.py many),
#   - memory per idle session: IDLE_N sessions held open (pkg/sftp client),
#     the server's RSS before and after, divided by IDLE_N.
#
# Targets: every throughput ≥ 0.9× OpenSSH's; < 256 KiB per idle session.
# Kiln runs as bench/sftpbench (internal/sftp's Server on a real data dir,
# store and root; the servers service stood in by a root and a ledger),
# OpenSSH as an sshd started here (root, a temp config, 127.0.0.1 only, a
# key of its own). Both offer the same cipher to the same client
# (CIPHER, default aes128-gcm@openssh.com). Each transfer runs RUNS times
# (default 3), alternating servers (Kiln first in odd rounds, OpenSSH in
# even ones); the best time of each is compared.
#
# The small files go to a new directory per run (many-R) and come back
# into a new one (dl-many-SERVER-R); nothing is deleted until the end, and
# each run starts after a sync. Deleting the previous run's 10,000 files
# just before a run made that run pay for them: ext4 without a journal (as
# this machine's /tmp) skips recently deleted inodes when it allocates one
# (find_inode_bit -> recently_deleted), and perf showed 58 % of the
# server's CPU there in a run that followed an rm -rf. It hit whichever
# server ran next, 2x swings between runs of either.
#
# Environment: RUNS, BIG_MB, SMALL_FILES, IDLE_N, CIPHER, KEEP=1 (keep TMP),
# SECTIONS (default "big small idle": which measures run).
# Exit: 0 all targets met, 1 a target missed or a check failed, 2 setup.
set -euo pipefail
BENCH_NAME=sftp-bench
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/lib.sh"
RUNS=${RUNS:-3}
BIG_MB=${BIG_MB:-1024}
SMALL_FILES=${SMALL_FILES:-10000}
IDLE_N=${IDLE_N:-100}
CIPHER=${CIPHER:-aes128-gcm@openssh.com}
SECTIONS=${SECTIONS:-big small idle}
want() { [[ " $SECTIONS " == *" $1 "* ]]; }
unset_kiln_env

[ "$(id -u)" = 0 ] || die "run as root (it starts an sshd)"
if ! command -v sshd >/dev/null || ! command -v sftp >/dev/null || ! command -v sshpass >/dev/null || ! command -v bc >/dev/null || [ ! -x /usr/lib/openssh/sftp-server ]; then
  echo "== installing openssh-server openssh-client sshpass bc (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq openssh-server openssh-client sshpass bc >/dev/null
fi
SSHD=$(command -v sshd || echo /usr/sbin/sshd)

TMP=$(mktemp -d /tmp/kiln-sftp-bench.XXXXXX)
chmod 711 "$TMP" # kiln serve as root: servers' users reach their roots below it (--uid-range)
SSHD_PID="" KILN_PID="" IDLE_PID=""
cleanup() {
  stop_pid "$IDLE_PID"
  stop_pid "$KILN_PID"
  stop_pid "$SSHD_PID"
  [ "${KEEP:-}" = 1 ] && echo "kept $TMP" || rm -rf "$TMP"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
now() { date +%s.%N; }
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }

echo "== machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -r); $(ssh -V 2>&1)"
echo "== build sftpbench ($(git -C "$ROOT" rev-parse --short=12 HEAD 2>/dev/null || echo '?'))"
(cd "$ROOT" && go build -o "$TMP/sftpbench" ./bench/sftpbench) || die "go build ./bench/sftpbench failed"

echo "== data: $BIG_MB MiB random file, $SMALL_FILES small files"
mkdir -p "$TMP/src" "$TMP/kdata" "$TMP/kroot" "$TMP/oroot" "$TMP/sshd"
want big && head -c "$((BIG_MB << 20))" /dev/urandom > "$TMP/src/big.bin"
mkdir -p "$TMP/src/many"
want small && python3 /work/shared/bench/worldgen.py many "$TMP/src/many" --files "$SMALL_FILES" >/dev/null
SMALL_BYTES=$(du -sb --apparent-size "$TMP/src/many" | cut -f1)
SMALL_COUNT=$(find "$TMP/src/many" -type f | wc -l)
echo "   many: $SMALL_COUNT files, $SMALL_BYTES bytes"

echo "== start OpenSSH sshd (127.0.0.1 only)"
mkdir -p /run/sshd
ssh-keygen -q -t ed25519 -N '' -f "$TMP/sshd/host_ed25519"
ssh-keygen -q -t ed25519 -N '' -f "$TMP/sshd/client"
cp "$TMP/sshd/client.pub" "$TMP/sshd/authorized_keys"
SSHD_PORT=$(free_port)
cat > "$TMP/sshd/sshd_config" <<EOF
Port $SSHD_PORT
ListenAddress 127.0.0.1
HostKey $TMP/sshd/host_ed25519
PidFile $TMP/sshd/sshd.pid
AuthorizedKeysFile $TMP/sshd/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
Subsystem sftp /usr/lib/openssh/sftp-server
Ciphers aes128-gcm@openssh.com,aes256-gcm@openssh.com,chacha20-poly1305@openssh.com
EOF
"$SSHD" -D -e -f "$TMP/sshd/sshd_config" 2>"$TMP/sshd/log" &
SSHD_PID=$!

echo "== start Kiln's SFTP server (bench/sftpbench)"
LOGINS=$(( (IDLE_N + 7) / 8 ))
"$TMP/sftpbench" serve -data "$TMP/kdata" -root "$TMP/kroot" -creds "$TMP/creds" -logins "$LOGINS" >"$TMP/kiln.out" 2>"$TMP/kiln.log" &
KILN_PID=$!
for _ in $(seq 100); do grep -q SFTPBENCH "$TMP/kiln.out" 2>/dev/null && break; sleep 0.1; done
KILN_PORT=$(sed -n 's/.*port=\([0-9]*\).*/\1/p' "$TMP/kiln.out")
[ -n "$KILN_PORT" ] || die "sftpbench did not start: $(cat "$TMP/kiln.log")"
read -r KUSER KPASS < "$TMP/creds"
for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$SSHD_PORT") 2>/dev/null && break; sleep 0.1; done

COMMON=(-oStrictHostKeyChecking=no -oUserKnownHostsFile=/dev/null -oLogLevel=ERROR "-oCiphers=$CIPHER")
# sftp_kiln BATCH / sftp_ossh BATCH: run a batch in TMP as the client does.
sftp_kiln() { (cd "$TMP" && SSHPASS=$KPASS sshpass -e sftp -oBatchMode=no -b - -P "$KILN_PORT" "${COMMON[@]}" \
  -oPreferredAuthentications=password -oPubkeyAuthentication=no "$KUSER@127.0.0.1" <<<"$1" >/dev/null); }
sftp_ossh() { (cd "$TMP" && sftp -b - -P "$SSHD_PORT" "${COMMON[@]}" -i "$TMP/sshd/client" -oIdentitiesOnly=yes \
  root@127.0.0.1 <<<"$1" >/dev/null); }
sftp_kiln "pwd" || die "cannot log in to Kiln's SFTP"
sftp_ossh "pwd" || die "cannot log in to sshd: $(cat "$TMP/sshd/log")"

fails=()
check() { if [ "$1" = 1 ]; then echo "   ok: $2"; else echo "   FAILED: $2"; fails+=("$2"); fi; }

# timed NAME SERVER SETUP BATCH: best of RUNS for one server; SETUP runs
# (untimed) before each run.
declare -A BEST
timed() {
  local name=$1 server=$2 setup=$3 batch=$4 t0 t1 d
  eval "$setup"
  t0=$(now)
  if ! "sftp_$server" "$batch"; then echo "   FAILED: $name on $server"; fails+=("$name on $server ran"); return; fi
  t1=$(now)
  d=$(echo "$t1 - $t0" | bc -l)
  echo "   $name $server run: $(printf %.3f "$d") s"
  if [ -z "${BEST[$name.$server]:-}" ] || [ "$(echo "$d < ${BEST[$name.$server]}" | bc -l)" = 1 ]; then
    BEST[$name.$server]=$d
  fi
}

# The remote places: Kiln's are relative to its root, OpenSSH's absolute.
echo "== transfers (best of $RUNS, cipher $CIPHER)"
for r in $(seq "$RUNS"); do
  order="kiln ossh"; [ $((r % 2)) = 0 ] && order="ossh kiln"
  for server in $order; do
    if [ "$server" = kiln ]; then rdir=""; rroot="$TMP/kroot"; else rdir="$TMP/oroot/"; rroot="$TMP/oroot"; fi
    timed login "$server" ":" "pwd"
    if want big; then
      timed big-up "$server" "rm -rf '$rroot/big.bin'" "put src/big.bin ${rdir}big.bin"
      timed big-down "$server" "rm -f '$TMP/dl-big.bin'" "get ${rdir}big.bin dl-big.bin"
    fi
    if want small; then
      timed small-up "$server" "sync" "put -r src/many ${rdir}many-$r"
      timed small-down "$server" "sync" "get -r ${rdir}many-$r dl-many-$server-$r"
    fi
  done
done
if want big; then
  cmp -s "$TMP/src/big.bin" "$TMP/kroot/big.bin" && ok=1 || ok=0; check $ok "the big file arrived intact in Kiln's root"
fi
if want small; then
  ok=1; for r in $(seq "$RUNS"); do diff -r -q "$TMP/src/many" "$TMP/kroot/many-$r" >/dev/null || ok=0; done
  check $ok "the small files arrived intact in Kiln's root (every run)"
  ok=1; for r in $(seq "$RUNS"); do diff -r -q "$TMP/src/many" "$TMP/dl-many-kiln-$r" >/dev/null || ok=0; done
  check $ok "the small files came back intact from Kiln (every run)"
fi

echo "== results (MiB/s; files/s for the small files; ratio = Kiln / OpenSSH, target ≥ 0.9)"
# Each batch is one connection: 'net' also gives the ratio with each
# server's best login time (a 'pwd' batch) taken out, for reading only.
lk=${BEST[login.kiln]:-0} lo=${BEST[login.ossh]:-0}
printf "   login      kiln %.3f s   openssh %.3f s (connect, key exchange, login, one realpath)\n" "$lk" "$lo"
for name in big-up big-down small-up small-down; do
  k=${BEST[$name.kiln]:-} o=${BEST[$name.ossh]:-}
  [ -n "$k" ] && [ -n "$o" ] || continue
  case $name in
    big-*) kr=$(echo "$BIG_MB / $k" | bc -l); orr=$(echo "$BIG_MB / $o" | bc -l); unit="MiB/s" ;;
    small-*) kr=$(echo "$SMALL_COUNT / $k" | bc -l); orr=$(echo "$SMALL_COUNT / $o" | bc -l); unit="files/s" ;;
  esac
  ratio=$(echo "$o / $k" | bc -l)
  net=$(echo "($o - $lo) / ($k - $lk)" | bc -l)
  printf "   %-10s kiln %8.1f %s (%.2f s)   openssh %8.1f %s (%.2f s)   ratio %.3f (net of login %.3f)\n" "$name" "$kr" "$unit" "$k" "$orr" "$unit" "$o" "$ratio" "$net"
  echo "SFTP_RESULT name=$name kiln_s=$(printf %.3f "$k") openssh_s=$(printf %.3f "$o") ratio=$(printf %.3f "$ratio") net_ratio=$(printf %.3f "$net")"
  check "$(echo "$ratio >= 0.9" | bc -l)" "$name ≥ 0.9× OpenSSH ($(printf %.3f "$ratio"))"
done

if want idle; then
echo "== memory per idle session ($IDLE_N sessions)"
sleep 1
before=$(rss_kib "$KILN_PID")
"$TMP/sftpbench" idle -port "$KILN_PORT" -creds "$TMP/creds" -n "$IDLE_N" >"$TMP/idle.out" 2>&1 &
IDLE_PID=$!
for _ in $(seq 300); do grep -q "IDLE READY" "$TMP/idle.out" 2>/dev/null && break; sleep 0.1; done
grep -q "IDLE READY" "$TMP/idle.out" || die "idle sessions did not open: $(cat "$TMP/idle.out")"
sleep 2
after=$(rss_kib "$KILN_PID")
per=$(( (after - before) / IDLE_N ))
echo "   RSS before $before KiB, with $IDLE_N idle sessions $after KiB: $per KiB per session"
echo "SFTP_RESULT name=idle-session rss_before_kib=$before rss_after_kib=$after per_session_kib=$per"
check "$([ "$per" -lt 256 ] && echo 1 || echo 0)" "< 256 KiB per idle session ($per KiB)"
stop_pid "$IDLE_PID"; IDLE_PID=""
fi

if [ ${#fails[@]} -gt 0 ]; then
  echo "== ${#fails[@]} failed: ${fails[*]}"
  exit 1
fi
echo "== all targets met"
