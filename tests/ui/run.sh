#!/usr/bin/env bash
# Dashboard end-to-end: a fresh redis-server and ojs-server on free ports, then the Chromium test.
# Installs Debian's chromium and the pinned playwright-core (npm) when missing.
# Usage: tests/ui/run.sh [screenshot.png]
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/ensure-redis.sh
ensure_redis_server
if ! command -v chromium >/dev/null 2>&1; then
  echo ">> installing Debian's chromium for the dashboard test" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >&2
fi
if [ ! -d tests/ui/node_modules/playwright-core ]; then
  (cd tests/ui && npm install --no-audit --no-fund --silent)
fi
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
rport=$(free_port); hport=$(free_port); work=$(mktemp -d)
cleanup() { kill "${spid:-}" "${rpid:-}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" --loglevel warning & rpid=$!
cargo build --release --quiet -p ojs-server
# Where cargo put it: CARGO_TARGET_DIR when set (a worktree with its own target directory).
bin="$(realpath "${CARGO_TARGET_DIR:-$PWD/target}")/release/ojs-server"
OJS_REDIS_URL="redis://127.0.0.1:$rport" OJS_LISTEN="127.0.0.1:$hport" RUST_LOG=warn "$bin" >"$work/server.log" 2>&1 & spid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$hport/ojs/v1/health" >/dev/null && break; sleep 0.1; done
shot="${1:-}"
[ -n "$shot" ] && shot="$(cd "$(dirname "$shot")" && pwd)/$(basename "$shot")"
node tests/ui/dashboard.test.mjs "http://127.0.0.1:$hport" $shot
