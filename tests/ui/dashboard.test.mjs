// Loads the dashboard in headless Chromium, sees a queue the test enqueued into, pauses it from the page,
// and checks the queue is paused (in the page and through the API). Optionally saves a screenshot.
// Usage: node dashboard.test.mjs <base-url> [screenshot.png]
import { chromium } from "playwright-core";
import assert from "node:assert/strict";

const base = process.argv[2];
const shot = process.argv[3];
const queue = "ui-demo";

async function post(path, body) {
  const r = await fetch(base + path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  const text = await r.text();
  assert.ok(r.ok, `${path}: ${r.status} ${text}`);
  return JSON.parse(text);
}

for (let i = 0; i < 5; i++) await post("/ojs/v1/jobs", { type: "report.build", args: [i], queue, priority: i % 3 });
await post("/ojs/v1/jobs", { type: "email.send", args: [], queue: "mail", rate_limit: { key: "smtp-provider", concurrency: 2 } });

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
let failed = 0;
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.on("pageerror", (e) => { console.error("page error:", e.message); failed++; });
  await page.goto(base + "/ui");
  const row = page.locator(`#queues tr[data-queue="${queue}"]`);
  await row.waitFor({ timeout: 10000 });
  assert.match(await row.innerText(), /active/);
  assert.match(await row.innerText(), /0: 2\s+1: 2\s+2: 1/, "available by priority");
  await page.locator("#ratelimits").getByText("smtp-provider").waitFor({ timeout: 10000 });
  await row.getByRole("button", { name: "pause" }).click();
  await row.locator(".pill.paused").waitFor({ timeout: 10000 });
  const q = await (await fetch(`${base}/ojs/v1/queues/${queue}/stats`)).json();
  assert.equal(q.queue.paused, true, "paused through the page");
  await page.locator("#events li").first().waitFor({ timeout: 10000 });
  if (shot) await page.screenshot({ path: shot, fullPage: true });
  console.log("dashboard e2e: 1 passed, 0 failed");
} catch (e) {
  console.error("dashboard e2e failed:", e.message);
  failed++;
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);
