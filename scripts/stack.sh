# shellcheck shell=bash
# Sourced by scripts/conformance and scripts/readme-test: a throw-away redis-server and a freshly built
# ojs-server, each on a free port, both gone when the calling script exits.
#   stack_start_redis        sets STACK_REDIS_URL and STACK_WORK (a temporary directory); call first
#   stack_build_server       cargo build --release of ojs-server; sets STACK_SERVER_BIN
#   stack_start_server ARGS  starts ojs-server ARGS (extra flags) on STACK_REDIS_URL; sets STACK_URL;
#                            fails, showing its log, when it does not answer /health within 10 s
# The caller runs from the repository root and has sourced scripts/ensure-redis.sh.

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

stack_cleanup() {
  if [ -n "${stack_spid:-}" ]; then kill "$stack_spid" 2>/dev/null || true; fi
  if [ -n "${stack_rpid:-}" ]; then kill "$stack_rpid" 2>/dev/null || true; fi
  wait 2>/dev/null || true
  if [ -n "${STACK_WORK:-}" ]; then rm -rf "$STACK_WORK"; fi
}

stack_start_redis() {
  ensure_redis_server
  STACK_WORK=$(mktemp -d)
  trap stack_cleanup EXIT
  local rport
  rport=$(free_port)
  redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --dir "$STACK_WORK" \
    --loglevel warning --logfile "$STACK_WORK/redis.log" &
  stack_rpid=$!
  STACK_REDIS_URL="redis://127.0.0.1:$rport"
  for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$rport") 2>/dev/null && return 0; sleep 0.05; done
  echo "!! redis-server did not start on port $rport" >&2
  return 1
}

stack_build_server() {
  cargo build --release --quiet -p ojs-server
  STACK_SERVER_BIN="$PWD/target/release/ojs-server"
}

stack_start_server() {
  local hport
  hport=$(free_port)
  OJS_REDIS_URL="$STACK_REDIS_URL" OJS_LISTEN="127.0.0.1:$hport" RUST_LOG=warn \
    "$STACK_SERVER_BIN" "$@" >"$STACK_WORK/server.log" 2>&1 &
  stack_spid=$!
  STACK_URL="http://127.0.0.1:$hport"
  for _ in $(seq 100); do curl -sf "$STACK_URL/ojs/v1/health" >/dev/null && return 0; sleep 0.1; done
  echo "!! ojs-server did not answer on $STACK_URL; its log:" >&2
  cat "$STACK_WORK/server.log" >&2
  return 1
}
