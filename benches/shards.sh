#!/usr/bin/env bash
# Shards on a Redis Cluster (issues 13, 39): the same load on a local 3-primary cluster made by
# `redis-cli --cluster create` (even slot ranges), namespace `main`, six queues q0..q5: with --shards 1
# (all on one primary), --shards 3 (pinned two per shard: q0,q3 on 0, q1,q4 on 1, q2,q5 on 2) and
# --shards 6 (one per shard), alternately (1 3 6 1 3 6 …), every primary flushed and the server restarted
# between runs, so each run is a fresh deployment whose shards the server places on the primaries
# (issue 39: one per primary at 3, two each at 6). Then a table of medians: jobs/s, Redis CPU per job on
# each primary and on all together, the busiest primary's (the one that caps a deployment's throughput)
# and its share of the single-shard run's, and the keys each primary held at the end of the run.
#   benches/shards.sh [rounds=3] [jobs=20000]
# OJS_BENCH_SCENARIOS="add process" (default) picks the scenarios of http_load (see benches/src/bin).
# BullMQ is not in this run: the claim here is how this server scales over primaries; its ratios to
# BullMQ come from benches/compare.sh. Honours CARGO_TARGET_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/ensure-redis.sh
. scripts/stack.sh
rounds="${1:-3}"
jobs="${2:-20000}"
target="${CARGO_TARGET_DIR:-$PWD/target}"
cargo build --release --quiet -p ojs-server -p ojs-bench
OJS_STACK_CLUSTER=1 stack_start_redis
IFS=, read -r -a seeds <<<"$STACK_REDIS_CLUSTER"
ports=("${seeds[@]##*:}")
urls=$(printf 'redis://%s,' "${seeds[@]}")
urls="${urls%,}"
ns=main
queues=q0,q1,q2,q3,q4,q5

results="$STACK_WORK/results.jsonl"
STACK_SERVER_BIN="$target/release/ojs-server"
# run <label> <scenario> <server flags...>
run() {
  local label=$1 scenario=$2
  shift 2
  for p in "${ports[@]}"; do redis-cli -p "$p" FLUSHALL >/dev/null; done
  stack_start_server --namespace "$ns" "$@"
  OJS_BENCH_PEER=$label OJS_BENCH_SERVER_PID=$stack_spid OJS_BENCH_QUEUES=$queues \
    "$target/release/http_load" "$STACK_URL" "$urls" "$scenario" "$jobs" >>"$results"
  # Requests per coalesced script call (the group commit's mean batch, every kind of the run).
  batch=$(curl -fsS "$STACK_URL/metrics" | awk '/^ojs_coalesced_batch_size_sum/ {s += $2} /^ojs_coalesced_batch_size_count/ {c += $2} END {printf "%.1f", c ? s / c : 0}')
  # The keys each primary holds after the run (in the order of the seeds, as the CPU per node).
  keys=$(for p in "${ports[@]}"; do redis-cli -p "$p" DBSIZE; done | paste -sd, -)
  tags=$(redis-cli -c -p "${ports[0]}" HGETALL "ojs:{$ns}:tags" | paste -sd' ' -)
  echo "{\"peer\": \"$label\", \"scenario\": \"$scenario\", \"keys\": [$keys], \"tags\": \"$tags\", \"batch\": $batch}" >>"$results.keys"
  kill "$stack_spid" 2>/dev/null && wait "$stack_spid" 2>/dev/null || true
  stack_spid=""
}
# A warm-up run, not recorded: right after the cluster is made, every primary spent about 0.1 ms of
# CPU per job of the first run on something else (5-6 µs per job on the primaries that held no shard).
results_kept=$results
results="$STACK_WORK/warmup.jsonl"
run 1 add --shards 1
results=$results_kept
for round in $(seq "$rounds"); do
  for scenario in ${OJS_BENCH_SCENARIOS:-add process}; do
    run 1 "$scenario" --shards 1
    run 3 "$scenario" --shards 3 --queue-shard q0=0,q1=1,q2=2,q3=0,q4=1,q5=2
    run 6 "$scenario" --shards 6 --queue-shard q0=0,q1=1,q2=2,q3=3,q4=4,q5=5
  done
  echo ">> round $round of $rounds done" >&2
done

echo ">> primaries (in this order below): ${seeds[*]}" >&2
python3 - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
keys = [json.loads(l) for l in open(sys.argv[1] + ".keys") if l.strip().startswith("{")]
def pick(peer, sc):
    return [r for r in rows if r["peer"] == peer and r["scenario"] == sc]
def med(peer, sc, f):
    v = [f(r) for r in pick(peer, sc)]
    return statistics.median(v) if v else float("nan")
def per_node(peer, sc):
    rs = pick(peer, sc)
    if not rs:
        return []
    n = len(rs[0]["redis_cpu_us_per_node"])
    return [statistics.median([r["redis_cpu_us_per_node"][i] / r["jobs"] for r in rs]) for i in range(n)]
names = {"add": "add (1 job per request, 64 in flight)", "bulk": "bulk (1,000 per request)",
         "process": "process, ack-and-fetch-next (50 workers)",
         "process_split": "process, separate fetch + ack (50 workers)"}
print("| scenario (6 queues) | shards | jobs/s | Redis CPU µs/job per primary | all primaries | busiest primary | busiest vs 1 shard | requests per script call | scripts µs/job, all primaries | keys per primary (last run) |")
print("|---|---:|---:|---|---:|---:|---:|---:|---:|---|")
for sc in [s for s in names if any(r["scenario"] == s for r in rows)]:
    one = med("1", sc, lambda r: r["redis_cpu_us_busiest_node"] / r["jobs"])
    for peer in ["1", "3", "6"]:
        if not pick(peer, sc):
            continue
        nodes = per_node(peer, sc)
        busiest = med(peer, sc, lambda r: r["redis_cpu_us_busiest_node"] / r["jobs"])
        k = [r["keys"] for r in keys if r["peer"] == peer and r["scenario"] == sc]
        print(f"| {names[sc]} | {peer} | {med(peer, sc, lambda r: r['jobs_per_s']):,.0f} | "
              + " / ".join(f"{c:.1f}" for c in nodes)
              + f" | {med(peer, sc, lambda r: r['redis_cpu_us'] / r['jobs']):.1f} | {busiest:.1f} | {busiest / one:.2f}x | "
              + f"{statistics.median([r.get('batch', 0) for r in keys if r['peer'] == peer and r['scenario'] == sc] or [0]):.1f} | "
              + f"{med(peer, sc, lambda r: r['script_us'] / r['jobs']):.1f} | "
              + (" / ".join(f"{n:,}" for n in k[-1]) if k else "") + " |")
tags = [r["tags"] for r in keys if r["peer"] != "1"]
print("\nrecorded tags (last runs):", "; ".join(sorted(set(tags))))
PY
