#!/usr/bin/env bash
# The official JS SDK's durable worker against this server, unchanged (tests/sdk-js/durable.mjs): fetches
# ojs-js-sdk at the commit read for docs/sdks.md from GitHub (or takes the checkout OJS_JS_SDK_DIR names),
# builds it with tsc (its own build reports type errors in files this test does not use; tsc emits the
# JavaScript anyway), starts a fresh redis-server and this server on free ports, and runs the test. Needs
# the npm registry (and github.com without OJS_JS_SDK_DIR): run by hand (docs/sdks.md records the last
# run), not by CI.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/ensure-redis.sh
ensure_redis_server
sdk_commit=3fb1e32
work=$(mktemp -d)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
rport=$(free_port); hport=$(free_port)
cleanup() { kill "${spid:-}" "${rpid:-}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
sdk="${OJS_JS_SDK_DIR:-$work/sdk}"
if [ -z "${OJS_JS_SDK_DIR:-}" ]; then
  git clone -q https://github.com/openjobspec/ojs-js-sdk "$sdk"
  git -C "$sdk" checkout -q "$sdk_commit"
fi
(cd "$sdk" && npm install --no-audit --no-fund --silent && (npx tsc >/dev/null 2>&1 || true))
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" --loglevel warning & rpid=$!
cargo build --release --quiet -p ojs-server
bin="$(realpath "${CARGO_TARGET_DIR:-$PWD/target}")/release/ojs-server"
OJS_REDIS_URL="redis://127.0.0.1:$rport" OJS_LISTEN="127.0.0.1:$hport" RUST_LOG=warn "$bin" >"$work/server.log" 2>&1 & spid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$hport/ojs/v1/health" >/dev/null && break; sleep 0.1; done
node tests/sdk-js/durable.mjs "$(realpath "$sdk")/dist/esm/index.js" "http://127.0.0.1:$hport"
