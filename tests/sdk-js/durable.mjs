// The official JS SDK's durable worker against this server, unchanged (issue 41): a handler records a
// side effect, saves a checkpoint, and fails its first attempt; the retried attempt must get the
// checkpoint, replay the side effect from it (not run it again) and complete.
// Usage: node durable.mjs <sdk dist/esm/index.js> <server url>   (run.sh builds the SDK and the server)
import assert from "node:assert/strict";
const [, , sdk, url] = process.argv;
const { OJSWorker } = await import(sdk);
const post = async (path, body) => (await fetch(url + path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) })).json();

const { job } = await post("/ojs/v1/jobs", { type: "etl.process", args: [{ n: 1 }],
  options: { queue: "durable-js", retry: { max_attempts: 3, initial_interval: "PT0.3S", jitter: false } } });
let realCalls = 0;
const attempts = [];
const worker = new OJSWorker({ url, queues: ["durable-js"], pollInterval: 100, heartbeatInterval: 60000, handleSignals: false });
worker.registerDurable("etl.process", async (ctx, dc) => {
  const replaying = dc.isReplaying();
  const data = await dc.sideEffect("fetch-data", async () => ({ token: `real-call-${++realCalls}` }));
  attempts.push({ attempt: ctx.attempt, replaying, token: data.token, checkpoint: ctx.job.checkpoint ?? null });
  await dc.checkpoint(1, { step: 1, token: data.token });
  if (ctx.attempt === 1) throw new Error("fails on its first attempt");
  await dc.complete();
  return { token: data.token };
});
await worker.start();
const deadline = Date.now() + 20000;
let state;
while (Date.now() < deadline) {
  state = (await (await fetch(`${url}/ojs/v1/jobs/${job.id}`)).json()).job.state;
  if (state === "completed" || state === "discarded") break;
  await new Promise((r) => setTimeout(r, 100));
}
await worker.stop();
console.log(JSON.stringify({ state, realCalls, attempts }, null, 1));
assert.equal(state, "completed");
assert.equal(realCalls, 1, "the side effect ran once: the second attempt replayed it");
assert.deepEqual(attempts.map((a) => [a.attempt, a.replaying]), [[1, false], [2, true]]);
assert.deepEqual(attempts[1].checkpoint.state, { step: 1, token: "real-call-1" }, "FETCH handed the checkpoint over");
console.log("ok: the JS SDK's durable worker resumed from its checkpoint after a NACK");
