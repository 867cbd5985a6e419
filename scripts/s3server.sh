# shellcheck shell=bash
# Sourced by scripts/test (or by hand: `source scripts/s3server.sh;
# start_s3server; …; stop_s3server`): a real S3-compatible server for the
# blob store's S3 suite.
#
# start_s3server installs versitygw (the Versity S3 Gateway, Apache-2.0)
# into $(go env GOPATH)/bin through the Go module proxy when it is missing,
# starts it with its posix backend in a temporary directory on a free
# loopback port, waits until it answers and exports KILN_TEST_S3_URL,
# KILN_TEST_S3_ACCESS_KEY and KILN_TEST_S3_SECRET_KEY. It creates no bucket:
# each test creates its own. Idempotent: a set KILN_TEST_S3_URL is used as
# it is, and a server this shell started is reused. When versitygw cannot
# be installed or started it prints one loud SKIP line and returns 0; the
# suite then skips (or fails, with KILN_REQUIRE_S3=1).
# stop_s3server stops the server it started and removes its directory.

VERSITYGW_VERSION=v1.8.0 # a release that builds with our Go (1.26)

declare -F log >/dev/null || log() { printf '\n== %s\n' "$*" >&2; }
declare -F free_port >/dev/null || free_port() {
  local p
  for _ in $(seq 1 50); do
    p=$(( 20000 + RANDOM % 20000 ))
    if ! (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null; then echo "$p"; return 0; fi
  done
  return 1
}

S3DIR=""
S3_PID=""

stop_s3server() {
  if [ -n "$S3_PID" ]; then
    kill "$S3_PID" 2>/dev/null || true
    wait "$S3_PID" 2>/dev/null || true
    S3_PID=""
  fi
  if [ -n "$S3DIR" ] && [ -d "$S3DIR" ]; then
    rm -rf "$S3DIR"
  fi
  S3DIR=""
}

ensure_versitygw() {
  local bin
  bin="$(go env GOPATH)/bin/versitygw"
  if [ ! -x "$bin" ]; then
    log "installing versitygw $VERSITYGW_VERSION (go install, through the Go module proxy)"
    go install "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION" >&2 || return 1
  fi
  echo "$bin"
}

start_s3server() {
  if [ -n "${KILN_TEST_S3_URL:-}" ]; then
    log "using S3 from KILN_TEST_S3_URL"
    return 0
  fi
  if [ -n "$S3_PID" ] && kill -0 "$S3_PID" 2>/dev/null; then
    return 0
  fi
  local bin port key secret code
  if ! bin=$(ensure_versitygw); then
    echo "SKIP S3 SUITE: versitygw is not installed and 'go install github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION' failed" >&2
    return 0
  fi
  if ! port=$(free_port); then
    echo "SKIP S3 SUITE: no free loopback port for versitygw" >&2
    return 0
  fi
  S3DIR=$(mktemp -d "${TMPDIR:-/tmp}/kiln-s3.XXXXXX")
  mkdir "$S3DIR/root"
  key="kilntest"
  secret=$(head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n')
  log "starting versitygw $(go version -m "$bin" 2>/dev/null | awk '$1=="mod"{print $3}') on 127.0.0.1:$port"
  # The credentials go in through the environment, not the command line
  # (which every user of the machine can read).
  ROOT_ACCESS_KEY_ID="$key" ROOT_SECRET_ACCESS_KEY="$secret" \
    "$bin" --port "127.0.0.1:$port" --quiet posix "$S3DIR/root" >"$S3DIR/log" 2>&1 &
  S3_PID=$!
  for _ in $(seq 1 100); do
    if ! kill -0 "$S3_PID" 2>/dev/null; then
      break
    fi
    # Any HTTP answer (403 for an unsigned request) means it serves.
    code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/" 2>/dev/null || true)
    if [ -n "$code" ] && [ "$code" != 000 ]; then
      export KILN_TEST_S3_URL="s3://kiln-test/blobs?endpoint=http://127.0.0.1:$port&region=us-east-1"
      export KILN_TEST_S3_ACCESS_KEY="$key"
      export KILN_TEST_S3_SECRET_KEY="$secret"
      return 0
    fi
    sleep 0.1
  done
  echo "versitygw did not start; its log:" >&2
  tail -20 "$S3DIR/log" >&2 || true
  stop_s3server
  echo "SKIP S3 SUITE: versitygw did not answer on 127.0.0.1:$port" >&2
  return 0
}
