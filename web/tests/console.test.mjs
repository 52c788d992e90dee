// The console in a real browser: Debian's Chromium driven by Playwright, against a real
// `cohort server` running real PyTorch jobs (examples/pytorch). Each test keeps a screenshot of
// what it checked in $COHORT_SCREENSHOTS (default web/test-results/).
//
//   COHORT_BIN=build/cohort node --test web/tests/     (ctest runs it as console_browser)
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const here = dirname(fileURLToPath(import.meta.url));
const examples = resolve(here, "../../examples/pytorch");
const dapClient = resolve(here, "../../tests/integration/dap_client.py");  // VS Code's side
const shots = process.env.COHORT_SCREENSHOTS || resolve(here, "../test-results");
const binary = process.env.COHORT_BIN;
const browserPath = process.env.COHORT_CHROMIUM || "/usr/bin/chromium";
const JOB_DEADLINE = 180_000;
// The preset environments scripts/test builds beside the binary: a session's JupyterLab runs in
// the `jupyter` one.
const envs = binary ? join(dirname(resolve(binary)), "envs") : "";
const labEnv = envs !== "" && existsSync(join(envs, "jupyter", "env.json"));

let server, url, token, tmp, browser;
const problems = [];  // what the browser said went wrong: CSP violations, script errors

function startServer() {
  tmp = mkdtempSync(join(tmpdir(), "cohort-console-"));
  chmodSync(tmp, 0o755);  // a server run as root runs ranks as users of their own
  const child = spawn(binary, ["server", "--listen", "127.0.0.1:0", "--data-root", join(tmp, "data")],
    { stdio: ["ignore", "pipe", "pipe"], env: labEnv ? { ...process.env, COHORT_ENVS: envs } : process.env });
  let err = "";
  child.stderr.on("data", (d) => { err = (err + d).slice(-8000); });
  return new Promise((ok, fail) => {
    let out = "";
    const timer = setTimeout(() => fail(new Error("the server did not listen within 30 s:\n" + err)), 30_000);
    child.on("exit", (code) => fail(new Error("the server exited with " + code + ":\n" + err)));
    child.stdout.on("data", (d) => {
      out += d;
      const where = out.match(/cohort server: listening on (http:\/\/\S+)/);
      if (!where) return;
      clearTimeout(timer);
      const t = out.match(/cohort server: admin token: (\S+)/);
      token = t ? t[1] : readFileSync(join(tmp, "data/server/admin.token"), "utf8").trim();
      url = where[1];
      server = child;
      server.log = () => err;
      ok();
    });
  });
}

async function api(method, path, body) {
  const res = await fetch(url + path, {
    method, headers: { Authorization: "Bearer " + token, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(method + " " + path + ": " + res.status + " " + text);
  return text ? JSON.parse(text) : null;
}

async function waitForJob(id, states = ["succeeded", "failed", "stopped"]) {
  const until = Date.now() + JOB_DEADLINE;
  for (;;) {
    const job = await api("GET", "/v1/jobs/" + id);
    if (states.includes(job.state)) return job;
    if (Date.now() > until) throw new Error("job " + id + " is still " + job.state + "\n" + server.log());
    await new Promise((r) => setTimeout(r, 250));
  }
}

// A job file of examples/pytorch as YAML text, with its workdir made absolute.
function example(file, changes = "") {
  const text = readFileSync(join(examples, file), "utf8").replace(/^workdir: \.$/m, "workdir: " + examples);
  return text + changes;
}

async function open(fragment) {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.on("console", (m) => { if (m.type() === "error") problems.push(fragment + ": " + m.text()); });
  page.on("pageerror", (e) => problems.push(fragment + ": " + e.message));
  await page.goto(url + "/#" + fragment + (fragment.includes("?") ? "&" : "?") + "token=" + token);
  return page;
}

// A screenshot of the elements `what` (locators, one below the other), or of the page in view.
async function shot(page, name, ...what) {
  const path = join(shots, name + ".png");
  if (!what.length) return page.screenshot({ path });
  const boxes = await Promise.all(what.map((l) => l.boundingBox()));
  const top = Math.min(...boxes.map((b) => b.y)), bottom = Math.max(...boxes.map((b) => b.y + b.height));
  const left = Math.min(...boxes.map((b) => b.x)), right = Math.max(...boxes.map((b) => b.x + b.width));
  await page.screenshot({ path, fullPage: true, clip: { x: left - 8, y: top - 8, width: right - left + 16, height: bottom - top + 16 } });
}

let ddp, hang;  // the records of a finished training job and of a job that hung

before(async () => {
  assert.ok(binary, "set COHORT_BIN to the cohort binary");
  mkdirSync(shots, { recursive: true });
  await startServer();
  browser = await chromium.launch({
    executablePath: browserPath, headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  // Two real jobs, one after the other (the machine may have two cores): the DDP example for
  // 4 epochs on 2 nodes, and the hang example, one of whose ranks stops itself.
  const a = await api("POST", "/v1/jobs", { job: example("ddp.yaml").replace(/epochs: 8/, "epochs: 4")
    .replace(/procs_per_node: 2/, "procs_per_node: 1") });
  ddp = await waitForJob(a.id);
  assert.equal(ddp.state, "succeeded", JSON.stringify(ddp) + "\n" + server.log());
  const b = await api("POST", "/v1/jobs", { job: example("hang.yaml").replace(/procs_per_node: 2/, "procs_per_node: 1")
    .replace(/hang_timeout: 10s/, "hang_timeout: 5s").replace(/^env:.*$/m, "") + "env: {LAGGARD: \"1\"}\n" });
  hang = await waitForJob(b.id);
  assert.equal(hang.state, "failed", JSON.stringify(hang));
  const stacks = await api("GET", "/v1/jobs/" + hang.id + "/stacks");
  assert.ok(stacks.hang, "the hang job has no stacks.txt: " + JSON.stringify(hang) + "\n" +
    JSON.stringify(await api("GET", "/v1/jobs/" + hang.id + "/events")) + "\n" + server.log());
});

after(async () => {
  if (browser) await browser.close();
  if (server) {
    server.kill("SIGTERM");
    await new Promise((r) => server.once("exit", r));
  }
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

test("the job list shows when each job started and how long it ran; it searches and sorts", async () => {
  const page = await open("/jobs");
  const row = page.locator(`tr[data-job="${ddp.id}"]`);
  await row.waitFor();
  const cells = await row.locator("td").allTextContents();
  assert.ok(cells.some((c) => /ago$/.test(c)), "no 'started … ago' cell: " + cells);
  assert.ok(cells.some((c) => /^\d+(\.\d)?s$|^\d+m\d\ds$/.test(c)), "no duration cell: " + cells);
  await page.fill("#job-search", "hang");
  await page.locator(`tr[data-job="${ddp.id}"]`).waitFor({ state: "detached" });
  assert.equal(await page.locator(`tr[data-job="${hang.id}"]`).count(), 1);
  await page.fill("#job-search", "");
  const names = () => page.locator("#jobs tbody tr td:nth-child(2)").allTextContents();
  await page.click('button[data-sort="name"]');
  await page.locator('th[aria-sort="ascending"] button[data-sort="name"]').waitFor();
  assert.deepEqual(await names(), [...await names()].sort(), "not sorted by name");
  await page.click('button[data-sort="name"]');  // the second click turns the order
  await page.locator('th[aria-sort="descending"] button[data-sort="name"]').waitFor();
  assert.deepEqual(await names(), [...await names()].sort().reverse(), "not sorted by name, descending");
  assert.match(page.url(), /#\/jobs\?sort=name/, "the address bar keeps the sort");
  // A search, then a sort: the address bar keeps both.
  await page.fill("#job-search", "digits");
  await page.click('button[data-sort="ranks"]');
  await page.locator('th[aria-sort="descending"] button[data-sort="ranks"]').waitFor();
  assert.match(page.url(), /q=digits/, "the sort dropped the search: " + page.url());
  assert.match(page.url(), /sort=ranks/);
  await page.fill("#job-search", "");
  await shot(page, "jobs");
  await page.close();
});

test("a job's plots show its loss over steps and every rank's CPU and memory", async () => {
  const page = await open("/jobs/" + ddp.id);
  const loss = page.locator('figure[data-plot="metric:loss"]');
  await loss.locator("canvas").waitFor();
  assert.ok(Number(await loss.getAttribute("data-points")) >= 4, "fewer than 4 steps drawn");
  // The numbers behind the plot are the ones the script logged: a line per rank that logged
  // (named in the legend), a point per step.
  const logged = (await api("GET", "/v1/jobs/" + ddp.id + "/metrics")).metrics.filter((m) => "loss" in m);
  const legend = (await loss.locator(".u-legend .u-series th").allTextContents()).slice(1);
  const ranks = [...new Set(logged.map((m) => m.rank))].sort().map((r) => "rank " + r);
  assert.deepEqual(legend.map((l) => l.trim()), ranks);
  assert.equal(Number(await loss.getAttribute("data-points")), new Set(logged.map((m) => m.step)).size);
  // Every rank is sampled, whether it logged or not.
  for (const id of ["cpu", "rss"]) {
    const plot = page.locator(`figure[data-plot="${id}"]`);
    await plot.locator("canvas").waitFor();
    const lines = (await plot.locator(".u-legend .u-series th").allTextContents()).slice(1);
    assert.deepEqual(lines.map((l) => l.trim()), ["rank 0", "rank 1"], id);
  }
  // Each node's startup phases: a row per node, the first output after the spawn.
  const startup = await page.locator('#startup tbody tr').allTextContents();
  assert.equal(startup.length, 2, startup.join("|"));
  await shot(page, "job-plots", page.locator("#metrics"));
  await page.close();
});

test("a running job's plots grow while it runs", async () => {
  const script = "import time\nfor s in range(40):\n    print(f'cohort.log step={s} loss={1/(s+1):.4f}', flush=True)\n    time.sleep(0.25)\n";
  const job = await api("POST", "/v1/jobs", { job: {
    name: "live-metrics", framework: "generic", workdir: examples,
    command: ["/usr/bin/python3", "-c", script], roles: { worker: { nodes: 1, procs_per_node: 1 } } } });
  await waitForJob(job.id, ["running", "succeeded", "failed"]);
  const page = await open("/jobs/" + job.id);
  const loss = page.locator('figure[data-plot="metric:loss"]');
  await loss.locator("canvas").waitFor();
  const first = Number(await loss.getAttribute("data-points"));
  await page.waitForFunction((n) => Number(document.querySelector('figure[data-plot="metric:loss"]').dataset.points) > n,
    first, { timeout: 20_000 });
  assert.equal((await waitForJob(job.id)).state, "succeeded");
  await page.close();
});

test("the configuration view shows what the job ran with", async () => {
  const page = await open("/jobs/" + ddp.id);
  const config = page.locator("#config");
  await config.locator("#config-command").waitFor();
  assert.equal(await config.locator("#config-command").textContent(), "/usr/bin/python3 ddp.py");
  const hp = await config.locator('table[aria-label="Hyperparameters"] tbody').textContent();
  assert.match(hp, /epochs4/);
  assert.match(hp, /lr0\.05/);
  assert.match(await config.locator('table[aria-label="Environment"]').textContent(), /PYTHONUNBUFFERED1/);
  const roles = await config.locator('table[aria-label="Roles"] tbody tr').allTextContents();
  assert.equal(roles.length, 1);
  assert.match(roles[0], /^worker21/);  // worker, 2 nodes, 1 rank per node
  assert.match(await config.locator('table[aria-label="Policy"]').textContent(), /max_runtime10m/);  // as the job file says it
  await shot(page, "job-config", config);
  await page.close();
});

test("Re-run opens the submit form with the job's configuration, and submits it", async () => {
  const page = await open("/jobs/" + ddp.id);
  await page.click("#rerun");
  await page.locator('form[aria-busy="false"]').waitFor();
  assert.equal(await page.inputValue("#f-name"), ddp.name);
  assert.equal(await page.inputValue("#f-command"), "/usr/bin/python3 ddp.py");
  assert.equal(await page.inputValue("#f-nodes"), "2");
  const yaml = await page.inputValue("#job-yaml");
  assert.match(yaml, /^command: \[\/usr\/bin\/python3, ddp\.py\]$/m);
  assert.match(yaml, /epochs: "?4"?/);
  // A change in the form is a change in the YAML; one in the YAML is one in the form.
  await page.fill("#f-name", "digits-again");
  assert.match(await page.inputValue("#job-yaml"), /^name: digits-again$/m);
  await page.fill("#job-yaml", (await page.inputValue("#job-yaml")).replace(/epochs: "?4"?/, "epochs: \"2\""));
  assert.equal(await page.inputValue("#f-name"), "digits-again");
  await shot(page, "rerun");
  await page.click('button[type="submit"]');
  await page.waitForURL(/#\/jobs\/digits-again-/);
  const id = decodeURIComponent(page.url().split("#/jobs/")[1]);
  const again = await waitForJob(id);
  assert.equal(again.state, "succeeded");
  const record = await api("GET", "/v1/jobs/" + id);
  assert.equal(record.spec.hyperparameters.epochs, "2");
  assert.deepEqual(record.spec.command, ddp.spec ? ddp.spec.command : ["/usr/bin/python3", "ddp.py"]);
  await page.close();
});

test("a bad job file is refused with the server's words, naming the field", async () => {
  const page = await open("/submit");
  await page.fill("#job-yaml", "name: x\nworkdir: /tmp\ncommand: [true]\nroles: {worker: {nodes: zero}}\n");
  await page.click('button[type="submit"]');
  await page.locator(".error", { hasText: "Not submitted" }).waitFor();
  assert.match(await page.locator(".error").first().textContent(), /nodes/);
  await page.close();
});

test("a job that hung shows the root cause and every rank's stack", async () => {
  const page = await open("/jobs/" + hang.id);
  const stacks = page.locator("#hang-stacks");
  await page.locator("#hang-stacks", { hasText: "grouped" }).waitFor().catch(async (e) => {
    throw new Error(e.message + "\nthe page: " + await page.locator("#main").innerText());
  });
  const text = await stacks.textContent();
  assert.match(text, /worker\/1/);
  assert.match(text, /stopped|T \(stopped\)/i);
  assert.match(text, /all_reduce/);
  assert.match(await page.locator("#root-cause").textContent(), /worker\/1/);
  await shot(page, "hang", page.locator("#root-cause"), page.locator("#stacks"));
  await page.close();
});

test("a rank waiting for a debugger shows where to attach; once attached, it goes on", async () => {
  const job = await api("POST", "/v1/jobs", { job: {
    name: "debug-me", framework: "generic", workdir: "/tmp",
    // It stays a while once let go: its agent looks at its debug state once a second.
    command: ["/usr/bin/python3", "-c", "import time\ntotal = 40 + 2\nprint('total', total)\ntime.sleep(3)\n"],
    roles: { worker: { nodes: 1, procs_per_node: 2 } }, debug: { ranks: [1], wait_limit: "120s" } } });
  const page = await open("/jobs/" + job.id);
  const row = page.locator('#debug tr[data-rank="1"][data-state="waiting"]');
  await row.waitFor({ timeout: 60_000 }).catch(async (e) => {
    throw new Error(e.message + "\nthe page: " + await page.locator("#main").innerText() + "\n" + server.log());
  });
  const cells = await row.locator("td").allTextContents();
  assert.equal(cells[0], "worker/1");
  assert.match(cells[3], /^127\.0\.0\.1:\d+$/);
  assert.match(cells[4], /^start: before -c/);
  const steps = await page.locator("#debug-steps").textContent();
  assert.match(steps, new RegExp("cohort debug " + job.id + " --attach 1 --vscode --write"));
  const waiting = page.locator('li[data-event="debug"]', { hasText: "is waiting for a debugger" });
  assert.match(await waiting.first().textContent(), /worker\/1 on node 0 is waiting for a debugger at 127\.0\.0\.1:\d+ \(start/);
  await shot(page, "debug", page.locator("#record"), page.locator("#debug"));
  // VS Code's side, as the panel says: cohort debug --attach carries a local port to the rank
  // through the server; a DAP client attaches there and lets the rank go on; the job succeeds.
  const carrier = spawn(binary, ["debug", job.id, "--attach", "1"],
    { env: { ...process.env, COHORT_SERVER: url, COHORT_TOKEN: token }, stdio: ["ignore", "pipe", "pipe"] });
  const local = await new Promise((done, fail) => {
    let out = "", err = "";
    carrier.stderr.on("data", (d) => { err += d; });
    carrier.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/^127\.0\.0\.1:(\d+)$/m);
      if (m) done(m[1]);
    });
    carrier.on("exit", (code) => fail(new Error("cohort debug --attach exited with " + code + ":\n" + err)));
  });
  const attach = spawnSync("/usr/bin/python3", [dapClient, "--port", local, "--no-stop"],
    { encoding: "utf8", timeout: 60_000 });
  carrier.kill();
  assert.equal(attach.status, 0, attach.stdout + attach.stderr);
  assert.equal((await waitForJob(job.id)).state, "succeeded");
  await page.locator('li[data-event="debug"]', { hasText: "a debugger is attached to worker/1 on node 0" }).waitFor();
  await page.locator("#debug").locator("*").first().waitFor({ state: "detached" });
  await page.close();
});

test("events read in words, and a rank's log can be downloaded", async () => {
  const page = await open("/jobs/" + ddp.id);
  const exit = page.locator('li[data-event="rank_exit"]').first();
  await exit.waitFor();
  assert.match(await exit.textContent(), /worker\/\d on node \d exited with code 0/);
  await page.selectOption("#log-rank", "1");
  await page.locator("#log", { hasText: "ready" }).waitFor();
  const [download] = await Promise.all([page.waitForEvent("download"), page.click("#log-download")]);
  assert.equal(download.suggestedFilename(), ddp.id + "-rank1.log");
  const saved = readFileSync(await download.path(), "utf8");
  assert.match(saved, /rank 1\/2/);
  assert.doesNotMatch(saved, /rank 0\/2/);
  await shot(page, "job");
  await page.close();
});

test("Open JupyterLab signs a new tab in to the session's lab, whose notebook runs in the session",
  { skip: !labEnv && "the jupyter preset is not built beside the binary (scripts/test builds it)" },
  async () => {
    // A session as cohort session start --jupyter makes one: its SSH keys made here.
    const keys = mkdtempSync(join(tmp, "keys-"));
    for (const name of ["login", "host"]) {
      const made = spawnSync("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", join(keys, name)]);
      assert.equal(made.status, 0, "ssh-keygen: " + made.stderr);
    }
    const hostKey = readFileSync(join(keys, "host"), "utf8").split("\n")
      .filter((line) => line && !line.startsWith("-----")).join("");
    const created = await api("POST", "/v1/jobs", { job: {
      name: "lab", framework: "generic", command: ["cohort", "session-host"], workdir: "/",
      environment: "jupyter", roles: { worker: { resources: { memory: "2Gi" } } },
      session: { jupyter: true, authorized_key: readFileSync(join(keys, "login.pub"), "utf8").trim(),
        host_key: hostKey } } });
    try {
      await waitForJob(created.id, ["running", "failed", "stopped"]);
      const base = "/v1/jobs/" + created.id + "/session/jupyter/";
      for (let until = Date.now() + 60_000; ; await new Promise((r) => setTimeout(r, 500))) {
        const res = await fetch(url + base + "api/status", { headers: { Authorization: "Bearer " + token } });
        if (res.ok) break;
        if (Date.now() > until) throw new Error("the lab did not answer: " + res.status + " " + await res.text());
      }
      const page = await open("/jobs/" + created.id);
      const button = page.locator("#open-lab");
      await button.waitFor();
      const [lab] = await Promise.all([page.waitForEvent("popup"), button.click()]);
      const said = [];
      lab.on("console", (m) => said.push(m.type() + ": " + m.text()));
      lab.on("websocket", (ws) => said.push("websocket " + ws.url()));
      await lab.locator(".jp-LabShell").waitFor({ timeout: 120_000 });
      assert.match(lab.url(), new RegExp(base + "lab"));
      // A notebook from the launcher: its kernel (over the proxy's WebSocket) runs a cell.
      await lab.locator('.jp-LauncherCard[data-category="Notebook"]').first().click({ timeout: 60_000 });
      await lab.locator('.jp-Notebook-ExecutionIndicator[data-status="idle"]').waitFor({ timeout: 120_000 });
      const cell = lab.locator(".jp-Notebook .jp-Cell .cm-content").first();
      const code = "import os; print(6 * 7, os.environ['COHORT_JOB_ID'])";
      await cell.click({ timeout: 60_000 });
      await lab.keyboard.type(code);
      assert.equal(await cell.textContent(), code);
      // A cell run before the page has attached its kernel is not run at all (its prompt stays
      // empty): it is run again then, up to three times.
      const output = lab.locator(".jp-OutputArea-output").first();
      for (let attempt = 1; ; attempt++) {
        await cell.click();
        await lab.keyboard.press("Shift+Enter");
        const shown = await output.waitFor({ timeout: 40_000 }).then(() => true, () => false);
        if (shown) break;
        if (attempt === 3) {
          await shot(lab, "jupyterlab-failed");
          throw new Error("the cell printed nothing\nthe lab said:\n" + said.join("\n") + "\n" + server.log());
        }
      }
      assert.equal((await output.textContent()).trim(), "42 " + created.id);
      await shot(lab, "jupyterlab");
    } finally {
      await api("POST", "/v1/jobs/" + created.id + "/stop", {});
      await waitForJob(created.id);
    }
  });

test("no page broke the Content-Security-Policy or threw", () => {
  assert.deepEqual(problems.filter((p) => !/Failed to load resource: the server responded with a status of 4\d\d/.test(p)), []);
});
