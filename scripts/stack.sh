# shellcheck shell=bash
# Sourced by scripts/conformance and scripts/readme-test: a throw-away redis-server and a freshly built
# ojs-server, each on a free port, both gone when the calling script exits.
#   stack_start_redis        sets STACK_REDIS_URL and STACK_WORK (a temporary directory); call first.
#                            With OJS_STACK_CLUSTER=1: a 3-primary Redis Cluster instead, STACK_REDIS_CLUSTER
#                            its seed nodes, and STACK_REDIS_URL the primary holding namespace `main`
#                            (so run.py's FLUSHDB resets the deployment)
#   stack_build_server       cargo build --release of ojs-server; sets STACK_SERVER_BIN
#   stack_start_server ARGS  starts ojs-server ARGS (extra flags) on STACK_REDIS_URL; sets STACK_URL;
#                            fails, showing its log, when it does not answer /health within 10 s
# The caller runs from the repository root and has sourced scripts/ensure-redis.sh.

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# A free port for a cluster node: its cluster bus listens on port + 10000, which must exist and be free.
free_cluster_port() {
  python3 -c '
import socket
while True:
    a, b = socket.socket(), socket.socket()
    a.bind(("127.0.0.1", 0))
    p = a.getsockname()[1]
    if p + 10000 <= 65535:
        try:
            b.bind(("127.0.0.1", p + 10000))
            print(p)
            break
        except OSError:
            pass
'
}

stack_cleanup() {
  if [ -n "${stack_spid:-}" ]; then kill "$stack_spid" 2>/dev/null || true; fi
  # shellcheck disable=SC2086
  if [ -n "${stack_rpid:-}" ]; then kill $stack_rpid 2>/dev/null || true; fi
  wait 2>/dev/null || true
  if [ -n "${STACK_WORK:-}" ]; then rm -rf "$STACK_WORK"; fi
}

wait_port() {
  for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done
  echo "!! redis-server did not start on port $1" >&2
  return 1
}

stack_start_cluster() {
  local ports=() seeds=() p
  for _ in 1 2 3; do
    p=$(free_cluster_port)
    redis-server --port "$p" --bind 127.0.0.1 --cluster-enabled yes --cluster-config-file "nodes-$p.conf" \
      --cluster-node-timeout 1000 --save '' --appendonly no --dir "$STACK_WORK" \
      --loglevel warning --logfile "$STACK_WORK/redis-$p.log" &
    stack_rpid="${stack_rpid:-} $!"
    ports+=("$p")
    seeds+=("127.0.0.1:$p")
  done
  for p in "${ports[@]}"; do wait_port "$p" || return 1; done
  redis-cli --cluster create "${seeds[@]}" --cluster-replicas 0 --cluster-yes >"$STACK_WORK/cluster.log" 2>&1 ||
    { cat "$STACK_WORK/cluster.log" >&2; return 1; }
  local ok
  for _ in $(seq 300); do
    ok=0
    for p in "${ports[@]}"; do redis-cli -p "$p" cluster info | grep -q 'cluster_state:ok' && ok=$((ok + 1)); done
    [ "$ok" = "${#ports[@]}" ] && break
    sleep 0.1
  done
  [ "$ok" = "${#ports[@]}" ] || { echo "!! the Redis Cluster did not reach cluster_state:ok" >&2; return 1; }
  STACK_REDIS_CLUSTER=$(IFS=,; echo "${seeds[*]}")
  # The primary that holds the slot of namespace `main` (every key of it shares the tag {main}).
  local owner
  owner=$(redis-cli -c -p "${ports[0]}" set 'ojs:{main}:stack-probe' 1 2>&1 >/dev/null; \
    for p in "${ports[@]}"; do [ "$(redis-cli -p "$p" exists 'ojs:{main}:stack-probe')" = 1 ] && echo "$p"; done)
  [ -n "$owner" ] || { echo "!! no primary of the Redis Cluster holds namespace main" >&2; return 1; }
  redis-cli -p "$owner" del 'ojs:{main}:stack-probe' >/dev/null
  STACK_REDIS_URL="redis://127.0.0.1:$owner"
  echo ">> Redis Cluster of 3 primaries: $STACK_REDIS_CLUSTER (namespace main on $STACK_REDIS_URL)" >&2
}

stack_start_redis() {
  ensure_redis_server
  STACK_WORK=$(mktemp -d)
  trap stack_cleanup EXIT
  if [ "${OJS_STACK_CLUSTER:-}" = 1 ]; then
    stack_start_cluster
    return
  fi
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
  # Where cargo put it: CARGO_TARGET_DIR when set (a worktree with its own target directory).
  STACK_SERVER_BIN="$(realpath "${CARGO_TARGET_DIR:-$PWD/target}")/release/ojs-server"
}

stack_start_server() {
  local hport
  hport=$(free_port)
  local target=(--redis-url "$STACK_REDIS_URL")
  [ -n "${STACK_REDIS_CLUSTER:-}" ] && target=(--redis-cluster "$STACK_REDIS_CLUSTER")
  OJS_LISTEN="127.0.0.1:$hport" RUST_LOG=warn \
    "$STACK_SERVER_BIN" "${target[@]}" "$@" >"$STACK_WORK/server.log" 2>&1 &
  stack_spid=$!
  STACK_URL="http://127.0.0.1:$hport"
  for _ in $(seq 100); do curl -sf "$STACK_URL/ojs/v1/health" >/dev/null && return 0; sleep 0.1; done
  echo "!! ojs-server did not answer on $STACK_URL; its log:" >&2
  cat "$STACK_WORK/server.log" >&2
  return 1
}
