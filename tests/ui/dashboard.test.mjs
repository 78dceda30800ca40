// Drives the dashboard in headless Chromium against a live server:
//  - overview: sees a queue the test enqueued into (counts by priority), pauses it from the page and checks
//    the API agrees; rate-limit keys; backpressure bound; active jobs with lease holder and progress;
//    the charts (per-minute series from /admin/stats/history) draw non-empty SVG; live events arrive;
//  - jobs: filtered by queue and state (ended ones too, with their result and a link to explain), paginated; a job found by id, its page (why it waits, lease holder, progress, checkpoint,
//    error history, events), cancelled from the page (the API agrees);
//  - bulk retry of dead-lettered jobs through the confirmation dialog (it shows what the filter matches);
//  - cron: the entry the test registered;
//  - workflows: a chain half done, listed with its counters; its page shows each step's state; cancelled
//    through the confirmation dialog (the API agrees).
// Usage: node dashboard.test.mjs <base-url> [screenshot.png]   (also writes <name>-jobs.png, <name>-job.png, <name>-why.png,
//        <name>-workflow.png)
import { chromium } from "playwright-core";
import assert from "node:assert/strict";

const base = process.argv[2];
const shot = process.argv[3];
const queue = "ui-demo";

async function call(method, path, body) {
  const r = await fetch(base + path, {
    method,
    headers: body === undefined ? {} : { "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await r.text();
  assert.ok(r.ok, `${method} ${path}: ${r.status} ${text}`);
  return text ? JSON.parse(text) : null;
}
const post = (path, body) => call("POST", path, body);
const get = (path) => call("GET", path);

// ---- fixtures through the API ----
const demo = [];
for (let i = 0; i < 5; i++) demo.push((await post("/ojs/v1/jobs", { type: "report.build", args: [i], queue, priority: i % 3 })).job.id);
await post("/ojs/v1/jobs", { type: "email.send", args: [], queue: "mail", rate_limit: { key: "smtp-provider", concurrency: 2 } });
// A bounded queue (backpressure) with a few waiting jobs.
await call("PUT", "/ojs/v1/admin/queues/ui-bounded/config", { backpressure: { max_depth: 10, strategy: "reject" } });
for (let i = 0; i < 4; i++) await post("/ojs/v1/jobs", { type: "thumb.make", args: [i], queue: "ui-bounded" });
// Completed jobs (throughput chart) at two priorities.
for (let i = 0; i < 6; i++) await post("/ojs/v1/jobs", { type: "fast.job", args: [i], queue: "ui-fast", priority: i % 2 });
for (let i = 0; i < 6; i++) {
  const { jobs } = await post("/ojs/v1/workers/fetch", { queues: ["ui-fast"], worker_id: "w-fast" });
  await post("/ojs/v1/workers/ack", { job_id: jobs[0].id, result: { ok: i } });
}
// Dead-lettered jobs: one attempt each, failed by a worker.
const deadIds = [];
for (let i = 0; i < 3; i++) {
  const { job } = await post("/ojs/v1/jobs", { type: "pdf.render", args: [i], queue: "ui-dead", options: { retry: { max_attempts: 1, on_exhaustion: "dead_letter" } } });
  deadIds.push(job.id);
  await post("/ojs/v1/workers/fetch", { queues: ["ui-dead"], worker_id: "w-dead" });
  await post("/ojs/v1/workers/nack", { job_id: job.id, error: { type: "RenderError", message: `page ${i} has no fonts` } });
}
// An active job with progress.
const { job: work } = await post("/ojs/v1/jobs", { type: "video.encode", args: ["big.mov"], queue: "ui-work", priority: 1 });
await post("/ojs/v1/workers/fetch", { queues: ["ui-work"], worker_id: "w-encoder-1", visibility_timeout_ms: 600000 });
await call("PUT", `/ojs/v1/jobs/${work.id}/progress`, { progress: 0.4, message: "pass 1 of 2" });
await call("PUT", `/ojs/v1/jobs/${work.id}/checkpoint`, { state: { frames_done: 1200 } });
// A completed job, with its result (the jobs view lists ended jobs).
const { job: doneJob } = await post("/ojs/v1/jobs", { type: "report.render", args: [], queue: "ui-done" });
await post("/ojs/v1/workers/fetch", { queues: ["ui-done"], worker_id: "w-done" });
await post("/ojs/v1/workers/ack", { job_id: doneJob.id, result: { pages: 12 } });
// A cron entry.
await post("/ojs/v1/cron", { name: "ui.nightly", expression: "0 3 * * *", timezone: "Europe/Berlin",
  job_template: { type: "report.nightly", args: [], options: { queue: "reports" } } });

// Two tenants with weights 3 and 1, both backlogged, and 8 claims by fair share: 6 and 2.
await call("PUT", "/ojs/v1/admin/tenants/ui-big", { fairness_weight: 3 });
for (const [tenant, n] of [["ui-big", 10], ["ui-small", 10]]) {
  const jobs = Array.from({ length: n }, (_, i) => ({ type: "tenant.work", args: [i], queue: "ui-tenants", meta: { tenant_id: tenant } }));
  await post("/ojs/v1/jobs/batch", { jobs });
}
await post("/ojs/v1/workers/fetch", { queues: ["ui-tenants"], worker_id: "w-tenants", count: 8 });

// An adaptive key whose upstream answered 429 once: its concurrency is halved from 8 to 4.
await post("/ojs/v1/jobs", { type: "geo.lookup", args: [], queue: "ui-adaptive",
  rate_limit: { key: "ui-adaptive", concurrency: 8, adaptive: { errors: ["TooManyRequests"] } } });
{
  const { jobs } = await post("/ojs/v1/workers/fetch", { queues: ["ui-adaptive"], worker_id: "w-adaptive" });
  await post("/ojs/v1/workers/nack", { job_id: jobs[0].id, error: { type: "TooManyRequests", message: "429" } });
}

// A key with a floor of 2 in a queue whose concurrency of 6 is the pool (burstable concurrency).
await call("PUT", "/ojs/v1/admin/queues/ui-burst/rate-limit", { concurrency: 6 });
await post("/ojs/v1/jobs", { type: "shop.sync", args: [], queue: "ui-burst",
  rate_limit: { key: "ui-burst", concurrency: 6, floor: 2 } });

// A chain whose first step is done: step 1 waits for a worker, step 2 is pending.
const { workflow: wf } = await post("/ojs/v1/workflows", { type: "chain", name: "ui.etl", steps: [
  { type: "etl.extract", args: [], queue: "ui-etl" }, { type: "etl.transform", args: [], queue: "ui-etl" },
  { type: "etl.load", args: [], queue: "ui-etl" }] });
{
  const { jobs } = await post("/ojs/v1/workers/fetch", { queues: ["ui-etl"], worker_id: "w-etl" });
  await post("/ojs/v1/workers/ack", { job_id: jobs[0].id, result: { rows: 42 } });
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
let failed = 0, passed = 0;
const T = { timeout: 10000 };
async function step(name, fn) {
  try { await fn(); passed++; console.log("ok  ", name); }
  catch (e) {
    failed++; console.error("FAIL", name + ":", e.message);
    try { console.error("  at", await page.evaluate(() => location.hash), "status:", await page.locator("#status").innerText()); } catch {}
  }
}
const shotName = (suffix) => shot.replace(/\.png$/, "") + suffix + ".png";
let page;
try {
  page = await browser.newPage({ viewport: { width: 1360, height: 900 } });
  page.on("pageerror", (e) => { console.error("page error:", e.message); failed++; });
  await page.goto(base + "/ui");

  await step("overview: queue, priorities, pause", async () => {
    const row = page.locator(`#queues tr[data-queue="${queue}"]`);
    await row.waitFor(T);
    assert.match(await row.innerText(), /active/);
    assert.match(await row.innerText(), /0: 2\s+1: 2\s+2: 1/, "available by priority");
    await page.locator("#ratelimits").getByText("smtp-provider").waitFor(T);
    await row.getByRole("button", { name: "pause" }).click();
    await row.locator(".pill.paused").waitFor(T);
    const q = await get(`/ojs/v1/queues/${queue}/stats`);
    assert.equal(q.queue.paused, true, "paused through the page");
    await page.locator("#events li").first().waitFor(T);
  });

  await step("overview: an adaptive key shows its effective limit against its policy's", async () => {
    const row = page.locator("#ratelimits tr", { hasText: "ui-adaptive" });
    await row.waitFor(T);
    assert.match(await row.locator("td.adaptive").innerText(), /concurrency 4 \/ 8/);
  });

  await step("overview: a key with a floor shows it beside its ceiling", async () => {
    const row = page.locator("#ratelimits tr", { hasText: "ui-burst" });
    await row.waitFor(T);
    assert.match(await row.locator("td.conc").innerText(), /0 \/ 6 \(floor 2\)/);
  });

  await step("overview: tenants with their weights, shares, and shares of the last hour", async () => {
    const big = page.locator('#tenants tr[data-tenant="ui-big"]');
    await big.waitFor(T);
    const cells = async (row) => (await row.locator("td").allInnerTexts()).map((t) => t.trim());
    const b = await cells(big);
    const s = await cells(page.locator('#tenants tr[data-tenant="ui-small"]'));
    assert.deepEqual(b.slice(1, 6), ["3", "10", "6", "75%", "75%"], "weight, enqueued, dispatched, share, share last hour");
    assert.deepEqual(s.slice(1, 6), ["1", "10", "2", "25%", "25%"]);
  });

  await step("overview: backpressure bound, active job with lease holder and progress", async () => {
    await page.locator('#queues tr[data-queue="ui-bounded"]').getByText("4 / 10").waitFor(T);
    const active = page.locator(`#activejobs tr[data-job="${work.id}"]`);
    await active.waitFor(T);
    const text = await active.innerText();
    assert.match(text, /w-encoder-1/);
    assert.match(text, /40%/);
    assert.match(text, /pass 1 of 2/);
  });

  await step("overview: charts draw the last hour", async () => {
    await page.locator('#chart-throughput circle[data-series="completed"]').first().waitFor(T);
    await page.locator('#chart-failures circle[data-series="failed for good"]').first().waitFor(T);
    await page.locator('#chart-wait circle[data-series="priority 0"]').first().waitFor(T);
    for (const id of ["#chart-throughput", "#chart-failures", "#chart-wait"]) {
      const n = await page.locator(`${id} path, ${id} circle`).count();
      assert.ok(n > 0, `${id} is empty`);
    }
    const h = await get("/ojs/v1/admin/stats/history?minutes=60");
    const sum = (a) => a.reduce((x, y) => x + y, 0);
    assert.equal(sum(h.series.completed), 8, "completed in the window (6 ui-fast jobs, the ui-done job and the chain's first step)");
    assert.equal(sum(h.series.failed), 3, "failed in the window");
    assert.equal(sum(h.series.dead_lettered), 3, "dead-lettered in the window");
    assert.ok(h.wait_by_priority["0"] && h.wait_by_priority["1"], "wait by priority 0 and 1");
    await page.locator("#wait-table td").first().waitFor(T);
    if (shot) await page.screenshot({ path: shot, fullPage: true });
  });

  await step("jobs: filter by queue and state, paginate", async () => {
    await page.click('header nav a[data-view="jobs"]');
    await page.locator('#f-queue option[value="ui-demo"]').waitFor({ state: "attached", timeout: 10000 });
    await page.selectOption("#f-queue", queue);
    await page.selectOption("#f-state", "available");
    await page.click("#jobsfilter button.primary");
    await page.waitForFunction(() => location.hash.includes("queue=ui-demo") && location.hash.includes("state=available"));
    await page.waitForFunction(() => document.querySelectorAll("#jobs tbody tr[data-job]").length === 5);
    for (const s of await page.locator("#jobs tbody tr[data-job] .pill").allInnerTexts()) assert.equal(s, "available");
    // priority order: 0, 0, 1, 1, 2
    const prios = await page.locator("#jobs tbody tr[data-job] td:nth-child(5)").allInnerTexts();
    assert.deepEqual(prios, ["0", "0", "1", "1", "2"]);
    await page.goto(base + "/ui#/jobs?queue=ui-demo&state=available&per_page=2");
    await page.waitForFunction(() => document.querySelectorAll("#jobs tbody tr[data-job]").length === 2);
    await page.locator("#pageinfo").getByText("page 1 of 3").waitFor(T);
    await page.click("#next");
    await page.locator("#pageinfo").getByText("page 2 of 3").waitFor(T);
    await page.goto(base + "/ui#/jobs?queue=ui-dead&state=discarded");
    await page.waitForFunction(() => document.querySelectorAll("#jobs tbody tr[data-job]").length === 3);
    await page.locator("#jobs").getByText("has no fonts").first().waitFor(T);
    // Ended jobs are listed too, with their result and a link to explain.
    await page.goto(base + "/ui#/jobs?queue=ui-done&state=completed");
    await page.waitForFunction(() => document.querySelectorAll("#jobs tbody tr[data-job]").length === 1);
    assert.match(await page.locator("#jobs tbody tr[data-job] .result").innerText(), /"pages":12/, "result");
    assert.equal(await page.locator("#jobs tbody tr[data-job] a.explain").getAttribute("href"), `/ojs/v1/jobs/${doneJob.id}/explain`);
    if (shot) await page.screenshot({ path: shotName("-jobs"), fullPage: true });
  });

  await step("job page: lease holder, progress, events", async () => {
    await page.fill("#searchid", work.id);
    await page.press("#searchid", "Enter");
    await page.locator("#job-id").getByText(work.id).waitFor(T);
    const text = await page.locator("#jobpage").innerText();
    assert.match(text, /w-encoder-1/, "worker_id");
    assert.match(text, /lease_id/);
    assert.match(text, /visibility_deadline/);
    assert.match(text, /pass 1 of 2/, "progress message");
    assert.match(await page.locator("#job-checkpoint").innerText(), /frames_done[\s\S]*1200/, "checkpoint state");
    assert.match(text, /big\.mov/, "args");
    assert.match(text, /job\.started/, "events");
    if (shot) await page.screenshot({ path: shotName("-job"), fullPage: true });
  });

  await step("job page: why is this waiting? (the chain's pending step)", async () => {
    const pending = wf.jobs[2].id;
    await page.goto(base + "/ui#/job/" + encodeURIComponent(pending));
    await page.locator("#job-id").getByText(pending).waitFor(T);
    const row = page.locator('#job-explain tr[data-gate="pending"]');
    await row.waitFor(T);
    assert.match(await row.innerText(), /step 2 of chain/, "the gate says what it waits for");
    assert.match(await row.innerText(), new RegExp(wf.jobs[1].id), "the step it waits for");
    const why = await get(`/ojs/v1/jobs/${pending}/explain`);
    assert.equal(why.gates[0].gate, "pending", "the page shows the API's answer");
    if (shot) await page.screenshot({ path: shotName("-why"), fullPage: true });
    // A job nothing holds back says so instead.
    await page.goto(base + "/ui#/job/" + encodeURIComponent(work.id));
    await page.locator("#job-id").getByText(work.id).waitFor(T);
    await page.locator("#job-explain-detail").getByText(/not waiting: running since/).waitFor(T);
  });

  await step("job page: error history of a dead-lettered job", async () => {
    await page.fill("#searchid", deadIds[0]);
    await page.press("#searchid", "Enter");
    await page.locator("#job-id").getByText(deadIds[0]).waitFor(T);
    await page.locator("#jobpage").getByText("page 0 has no fonts").first().waitFor(T);
    await page.locator("#job-retry").waitFor(T);
    assert.match(await page.locator("#jobpage").innerText(), /job\.dead_lettered/);
  });

  await step("search by id, cancel from the job page", async () => {
    const id = demo[3];
    await page.fill("#searchid", id);
    await page.press("#searchid", "Enter");
    await page.locator("#job-id").getByText(id).waitFor(T);
    await page.locator("#job-state .pill.available").waitFor(T);
    await page.click("#job-cancel");
    await page.locator("#confirm").waitFor(T);
    await page.click("#confirm-yes");
    await page.locator("#job-state .pill.cancelled").waitFor(T);
    const { job } = await get(`/ojs/v1/jobs/${id}`);
    assert.equal(job.state, "cancelled", "cancelled through the page");
  });

  await step("bulk retry of dead-lettered jobs, with confirmation", async () => {
    await page.goto(base + "/ui#/jobs?queue=ui-dead&state=discarded");
    await page.waitForFunction(() => document.querySelectorAll("#jobs tbody tr[data-job]").length === 3);
    assert.equal(await page.locator("[data-bulk=cancel]").count(), 0, "cancel does not apply to the dead letter");
    await page.click("[data-bulk=retry]");
    await page.locator("#confirm #bulk-matched").waitFor(T);
    assert.equal(await page.locator("#bulk-matched").innerText(), "3");
    assert.match(await page.locator("#confirm-body").innerText(), /"queue":"ui-dead"/);
    // Dismissing does nothing.
    await page.click("#confirm-no");
    assert.equal((await get("/ojs/v1/admin/dead-letter?queue=ui-dead")).pagination.total, 3, "nothing retried before confirming");
    await page.click("[data-bulk=retry]");
    await page.locator("#confirm #bulk-matched").waitFor(T);
    await page.click("#confirm-yes");
    await page.locator("#jobs").getByText("the dead letter is empty").waitFor(T);
    assert.equal((await get("/ojs/v1/admin/dead-letter?queue=ui-dead")).pagination.total, 0, "dead letter emptied");
    for (const id of deadIds) assert.equal((await get(`/ojs/v1/jobs/${id}`)).job.state, "available");
  });

  await step("cron view lists the entry", async () => {
    await page.click('header nav a[data-view="cron"]');
    const row = page.locator('#cron tr[data-cron="ui.nightly"]');
    await row.waitFor(T);
    const text = await row.innerText();
    assert.match(text, /0 3 \* \* \*/);
    assert.match(text, /Europe\/Berlin/);
    assert.match(text, /report\.nightly → reports/);
    assert.match(text, /never/);
  });

  await step("workflows view lists the chain and its page shows each step; cancel it", async () => {
    await page.click('header nav a[data-view="workflows"]');
    const row = page.locator(`#workflows tr[data-wf="${wf.id}"]`);
    await row.waitFor(T);
    assert.match(await row.innerText(), /chain\s+ui\.etl\s+running\s+1\s+0\s+3/);
    await row.locator("a").click();
    await page.locator("#wfjobs").waitFor(T);
    const states = await page.locator("#wfjobs tbody tr td:last-child").allInnerTexts();
    assert.deepEqual(states, ["completed", "available", "pending"]);
    if (shot) await page.screenshot({ path: shot.replace(/\.png$/, "-workflow.png"), fullPage: true });
    await page.click(`#wfpage [data-wf-cancel="${wf.id}"]`);
    await page.click("#confirm-yes");
    await page.locator("#wfpage .pill.cancelled").first().waitFor(T);
    assert.equal((await get(`/ojs/v1/workflows/${wf.id}`)).workflow.state, "cancelled");
  });
} catch (e) {
  console.error("dashboard e2e failed:", e.message);
  failed++;
} finally {
  await browser.close();
}
console.log(`dashboard e2e: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
