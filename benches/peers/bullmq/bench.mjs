// BullMQ side of benches/compare.sh. Prints one JSON line per scenario:
// {"scenario", "jobs", "seconds", "jobs_per_s", "redis_cpu_us", ...}. Usage:
//   node bench.mjs <redis-url> <scenario> <jobs>
// scenarios: add (queue.add, 64 in flight), bulk (addBulk of 1000), process (pre-load jobs with
// priorities 0..9 and a ~100-byte payload, then a Worker with concurrency 50 and a no-op processor;
// process_split is the same run: BullMQ has only one way to process), latency (500 jobs/s,
// enqueue -> processed p50/p99).
import { Queue, Worker, QueueEvents } from "bullmq";
import IORedis from "ioredis";
import { execSync } from "node:child_process";

const [url, scenario, jobsArg] = process.argv.slice(2);
const jobs = Number(jobsArg);
// The same ~100-byte payload as ojs_bench::PAYLOAD (benches/src/lib.rs).
const PAYLOAD = "user=48213;order=ord_7f3c2a91e4b5;action=send_receipt;locale=en-US;channel=email;retry_hint=none";
const connection = new IORedis(url, { maxRetriesPerRequest: null });
const probe = new IORedis(url);

async function cpuUs() {
  const info = await probe.info("cpu");
  let t = 0;
  for (const l of info.split("\n")) {
    const [k, v] = l.trim().split(":");
    if (k === "used_cpu_user" || k === "used_cpu_sys") t += Number(v);
  }
  return t * 1e6;
}
async function usedMemory() {
  const info = await probe.info("memory");
  const m = info.split("\n").find((l) => l.startsWith("used_memory:"));
  return Number(m.split(":")[1]);
}
const queue = new Queue("bench", { connection });
const opts = { removeOnComplete: true, removeOnFail: true };

// INFO commandstats since CONFIG RESETSTAT, split as ojs_bench::CommandStats splits it: script calls
// (with the commands they call in their µs), blocking reads (which no script can call) and every other
// command (the probe's INFO and CONFIG left out).
async function commandStats() {
  const info = await probe.info("commandstats");
  const scripts = ["fcall", "fcall_ro", "evalsha", "evalsha_ro", "eval", "eval_ro"];
  const blocking = ["xread", "xreadgroup", "bzpopmin", "bzpopmax", "bzmpop", "blpop", "brpop", "brpoplpush", "blmove", "blmpop"];
  const out = { script_calls: 0, script_us: 0, command_calls: 0, command_us: 0, blocking_calls: 0, blocking_us: 0 };
  for (const l of info.split("\n")) {
    const m = l.trim().match(/^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/);
    if (!m || m[1] === "info" || m[1] === "config") continue;
    const [calls, us] = [Number(m[2]), Number(m[3])];
    if (scripts.includes(m[1])) {
      out.script_calls += calls;
      out.script_us += us;
    } else if (blocking.includes(m[1])) {
      out.blocking_calls += calls;
      out.blocking_us += us;
    } else {
      out.command_calls += calls;
      out.command_us += us;
    }
  }
  return out;
}

async function timed(fn) {
  await probe.config("RESETSTAT");
  // benches/redis_cpu.sh counts Redis' instructions from here (`callgrind_control -z`), as http_load does.
  if (process.env.OJS_BENCH_AT_BEGIN) execSync(process.env.OJS_BENCH_AT_BEGIN, { stdio: "inherit", shell: "/bin/sh" });
  const c0 = await cpuUs();
  const t0 = process.hrtime.bigint();
  const extra = (await fn()) || {};
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  const cpu = (await cpuUs()) - c0;
  Object.assign(extra, await commandStats());
  return { seconds, redis_cpu_us: cpu, ...extra };
}

let out;
if (scenario === "add") {
  out = await timed(async () => {
    let next = 0;
    await Promise.all(Array.from({ length: 64 }, async () => {
      while (next < jobs) { next++; await queue.add("noop", { n: next }, opts); }
    }));
  });
} else if (scenario === "bulk") {
  out = await timed(async () => {
    for (let i = 0; i < jobs; i += 1000) {
      const n = Math.min(1000, jobs - i);
      await queue.addBulk(Array.from({ length: n }, (_, k) => ({ name: "noop", data: { n: i + k }, opts })));
    }
  });
} else if (scenario === "process" || scenario === "process_split") {
  const m0 = await usedMemory();
  for (let i = 0; i < jobs; i += 1000) {
    const n = Math.min(1000, jobs - i);
    await queue.addBulk(Array.from({ length: n }, (_, k) => ({
      name: "noop", data: { n: i + k, s: PAYLOAD }, opts: { ...opts, priority: 1 + Math.floor(Math.random() * 10) } })));
  }
  const perJob = ((await usedMemory()) - m0) / jobs;
  out = await timed(async () => {
    let done = 0, failed = 0;
    await new Promise((resolve) => {
      const w = new Worker("bench", async () => {}, { connection: new IORedis(url, { maxRetriesPerRequest: null }), concurrency: 50 });
      const finish = () => { if (done + failed === jobs) { w.close().then(resolve); } };
      w.on("completed", () => { done++; finish(); });
      w.on("failed", () => { failed++; finish(); });
    });
    return { memory_per_queued_job: perJob, failed };
  });
} else if (scenario === "latency") {
  const events = new QueueEvents("bench", { connection: new IORedis(url, { maxRetriesPerRequest: null }) });
  await events.waitUntilReady();
  const sent = new Map();
  const fetched = [];
  const acked = [];
  const w = new Worker("bench", async (job) => { fetched.push(Date.now() - sent.get(job.id)); },
    { connection: new IORedis(url, { maxRetriesPerRequest: null }), concurrency: 50 });
  w.on("completed", (job) => acked.push(Date.now() - sent.get(job.id)));
  out = await timed(async () => {
    const interval = 1000 / 500;
    const start = Date.now();
    for (let i = 0; i < jobs; i++) {
      const due = start + i * interval;
      const wait = due - Date.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      const j = await queue.add("noop", { n: i }, opts);
      sent.set(j.id, Date.now());
    }
    while (acked.length < jobs) await new Promise((r) => setTimeout(r, 10));
    await w.close();
    const pct = (a, p) => { const s = [...a].sort((x, y) => x - y); return s[Math.min(s.length - 1, Math.floor(s.length * p))]; };
    return { fetched_p50_ms: pct(fetched, 0.5), fetched_p99_ms: pct(fetched, 0.99), acked_p50_ms: pct(acked, 0.5), acked_p99_ms: pct(acked, 0.99) };
  });
  await events.close();
} else {
  console.error("unknown scenario", scenario);
  process.exit(2);
}
out.jobs_per_s = jobs / out.seconds;
console.log(JSON.stringify({ peer: "bullmq", scenario, jobs, ...out }));
await queue.close();
await connection.quit();
await probe.quit();
process.exit(0);
