#!/usr/bin/env bash
# Redis' cost per job, counted in instructions under valgrind's callgrind (the Redis twin of
# benches/server_cpu.sh: a count this shared 2-core VM's noise does not move). Each scenario of
# benches/src/bin/http_load.rs runs once against a release server on a private redis-server run under
# callgrind; counting starts when the measured part begins (http_load runs OJS_BENCH_AT_BEGIN =
# callgrind_control -z), after a warm-up run of 500 jobs.
#   benches/redis_cpu.sh [jobs=3000]
# OJS_BENCH_SCENARIOS (default "add process_split") picks the scenarios. With OJS_BASELINE_SERVER=<path
# to another ojs-server binary> (which brings its own Lua library), each scenario also runs against it.
# With OJS_BENCH_BULLMQ=1, BullMQ (benches/peers/bullmq, as compare.sh runs it) does too: the peer's
# count under the same instrument (BullMQ's process_split is its one way to process: a Worker).
# Prints, per job: all of Redis' instructions, the scripts' (FCALL or EVALSHA, inclusive), the commands the scripts
# call (`call` under `scriptCall`), their dispatch (the rest of `scriptCall`: lookup, ACL), and the rest
# of FCALL: Lua, with the conversion of each redis.call's arguments and reply. With a redis-server
# that has symbols (below), a second table splits that rest. Redis under callgrind runs
# ~50x slower, so the server's group commit packs more requests into each script call than it would on
# a real Redis: read the per-call fixed costs as smaller than they are, and compare builds, not peers.
# The callgrind outputs stay in target/bench/. Installs valgrind (apt) when missing.
# OJS_BENCH_REDIS_SERVER=<path> runs another redis-server binary: Debian's has no symbols for its Lua, so
# a build from source with `-g` (`apt-get source redis`, `make CFLAGS=-g`) names the VM's own functions
# in the callgrind output (luaV_execute, luaS_newlstr, luaH_*, the collector).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/ensure-redis.sh
. benches/common.sh
ensure_redis_server
jobs="${1:-3000}"
ensure_valgrind
callgrind_runs
start_redis() { # <label> <scenario> <port>: a fresh Redis under callgrind
  valgrind --tool=callgrind --callgrind-out-file="$work/cg.$1.$2" \
    "${OJS_BENCH_REDIS_SERVER:-$(command -v redis-server)}" --port "$3" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" \
    --loglevel warning >>"$work/redis.log" 2>&1 & rpid=$!
  for _ in $(seq 300); do redis-cli -p "$3" ping >/dev/null 2>&1 && break; sleep 0.2; done
}
# dump <label> <scenario> <jobs>: writes Redis' counts since the measured part began and stops it.
dump() {
  callgrind_control -d "$rpid" >/dev/null 2>&1
  local out
  for _ in $(seq 50); do out=$(ls "$work"/cg."$1"."$2".* 2>/dev/null | head -1); [ -n "$out" ] && break; sleep 0.2; done
  cp "$out" "target/bench/redis-callgrind-$1-$2.out"
  kill "$rpid" 2>/dev/null || true; wait "$rpid" 2>/dev/null || true
  echo "$1 $2 $3 target/bench/redis-callgrind-$1-$2.out" >>"$rows"
  echo ">> $1 $2 done" >&2
}
# one <label> <binary> <scenario>: a fresh Redis under callgrind and a server, warm-up, the measured run.
one() {
  local rport hport out
  rport=$(free_port); hport=$(free_port)
  start_redis "$1" "$3" "$rport"
  OJS_REDIS_URL="redis://127.0.0.1:$rport" OJS_LISTEN="127.0.0.1:$hport" RUST_LOG=warn "$2" >>"$work/server.log" 2>&1 & spid=$!
  for _ in $(seq 300); do curl -sf "http://127.0.0.1:$hport/ojs/v1/health" >/dev/null && break; sleep 0.2; done
  # The server opens its Redis connections lazily, one per request until --redis-pool (32) are open: under
  # callgrind, 64 requests at once opening them met the 2 s connect timeout (a 503 now and then). One
  # request at a time opens them first.
  for _ in $(seq 40); do curl -sf "http://127.0.0.1:$hport/ojs/v1/ready" >/dev/null || true; done
  ./target/release/http_load "http://127.0.0.1:$hport" "redis://127.0.0.1:$rport" "$3" 500 >/dev/null
  redis-cli -p "$rport" FLUSHALL >/dev/null
  out=$(OJS_BENCH_AT_BEGIN="callgrind_control -z $rpid >/dev/null 2>&1" \
    ./target/release/http_load "http://127.0.0.1:$hport" "redis://127.0.0.1:$rport" "$3" "$jobs")
  kill "$spid" 2>/dev/null || true; wait "$spid" 2>/dev/null || true
  dump "$1" "$3" "$(echo "$out" | python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["jobs"])')"
}
# bullmq <scenario>: the peer against a fresh Redis under callgrind.
bullmq() {
  local rport out
  rport=$(free_port)
  start_redis bullmq "$1" "$rport"
  out=$(OJS_BENCH_AT_BEGIN="callgrind_control -z $rpid >/dev/null 2>&1" \
    node benches/peers/bullmq/bench.mjs "redis://127.0.0.1:$rport" "$1" "$jobs")
  dump bullmq "$1" "$(echo "$out" | python3 -c 'import json,sys; print(json.loads(sys.stdin.read().splitlines()[-1])["jobs"])')"
}
if [ "${OJS_BENCH_BULLMQ:-0}" = 1 ]; then
  (cd benches/peers/bullmq && [ -d node_modules/bullmq ] || npm install --no-audit --no-fund --silent)
fi
for scenario in ${OJS_BENCH_SCENARIOS:-add process_split}; do
  one ours ./target/release/ojs-server "$scenario"
  [ -z "$baseline" ] || one baseline "$baseline" "$scenario"
  [ "${OJS_BENCH_BULLMQ:-0}" != 1 ] || bullmq "$scenario"
done
python3 - "$rows" <<'PY'
import sys
sys.path.insert(0, "benches")
from callgrind import Profile
rows = [l.split() for l in open(sys.argv[1])]
table, inside = {}, {}
for label, sc, jobs, path in rows:
    p = Profile(path)
    n = int(jobs)
    # Our library runs by FCALL; BullMQ's scripts by EVALSHA.
    scripts = p.exact("fcallCommand") + p.exact("evalShaCommand") + p.exact("evalCommand")
    bridge_and_commands = p.exact("scriptCall")
    # `call` runs FCALL itself too, so callgrind names the commands a script calls `call'2`.
    commands = sum(v for (a, b), v in p.edge.items() if a == "scriptCall" and b.split("'")[0] == "call")
    table[(label, sc)] = [p.total / n, scripts / n, commands / n, (bridge_and_commands - commands) / n,
                          (scripts - bridge_and_commands) / n]
    if p.exact("luaRedisGenericCommand"):
        # Names only a redis-server with symbols has (Redis 7.0's script_lua.c, its Lua 5.1, cmsgpack).
        inside[(label, sc)] = [x / n for x in (
            p.exact("luaRedisGenericCommand") - bridge_and_commands,
            p.exact("mp_unpack") + p.exact("mp_pack"),
            p.exact("luaS_newlstr"),
            p.exact("luaC_step"),
            p.exact("luaReplyToRedisReply") + p.exact("luaCreateArray"),
            p.exact("luaV_concat"),
            p.exact("str_format") + p.exact("luaB_tonumber"),
        )]
print("Redis instructions per job (callgrind):\n")
print("| scenario | build | all of Redis | scripts (FCALL, EVALSHA) | their commands | their dispatch | Lua and the conversions | vs baseline (all / scripts) |")
print("|---|---|---:|---:|---:|---:|---:|---:|")
for (label, sc), v in table.items():
    base = table.get(("baseline", sc))
    if label == "ours" and ("bullmq", sc) in table:
        b = table[("bullmq", sc)]
        print(f"| {sc} | ours vs BullMQ | {v[0] / b[0]:.2f}x | {v[1] / b[1]:.2f}x | {v[2] / b[2]:.2f}x | | | |")
    ratio = f"{v[0] / base[0]:.2f}x / {v[1] / base[1]:.2f}x" if base and label == "ours" and base[1] else ""
    print(f"| {sc} | {label} | " + " | ".join(f"{x:,.0f}" for x in v) + f" | {ratio} |")
if inside:
    print("\nInside the scripts (instructions per job; parts overlap where one calls another):\n")
    print("| scenario | build | redis.call's arguments and replies | cmsgpack | string interning | collector | KEYS/ARGV in, reply out | concatenation | string.format, tonumber |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for (label, sc), v in inside.items():
        print(f"| {sc} | {label} | " + " | ".join(f"{x:,.0f}" for x in v) + " |")
PY
