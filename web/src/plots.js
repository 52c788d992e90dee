// The job's plots, drawn with uPlot: each training metric over steps (one line per rank), and
// each rank's CPU and resident memory over time, from GET /v1/jobs/{id}/metrics. While the job
// runs, new records are fetched every two seconds and the plots redrawn.
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import { api, jobPath } from "./api.js";
import { el, replace } from "./dom.js";
import { bytes } from "./format.js";

const COLORS = ["#2459b3", "#c8322f", "#1e8a4c", "#b26b00", "#7b3fb5", "#0f8b8d", "#d0417e",
  "#5f6b77"];
const KEEP = 20000;  // records of each kind kept in the page; older ones are dropped
const NOT_METRICS = new Set(["t", "rank", "step"]);
const STEPS = [1, 2, 5].flatMap((n) => [1, 10, 100, 1e3, 1e4, 1e5, 1e6, 1e7].map((m) => n * m)).sort((a, b) => a - b);

// Records as the server sends them, without the ones already seen: `t` is in unix nanoseconds,
// more than a double holds exactly, so the next request asks from a millisecond back and the
// overlap is dropped here.
class Records {
  constructor() { this.list = []; this.last = 0; this.recent = new Set(); }
  add(records, key) {
    let added = 0;
    for (const r of records) {
      const k = key(r);
      if (this.recent.has(k)) continue;
      this.recent.add(k);
      this.list.push(r);
      this.last = Math.max(this.last, r.t);
      added++;
    }
    if (this.list.length > KEEP) this.list.splice(0, this.list.length - KEEP);
    if (this.recent.size > 4 * KEEP) this.recent = new Set(this.list.slice(-KEEP).map(key));
    return added;
  }
  after() { return this.last > 1e6 ? Math.floor(this.last - 1e6) : 0; }
}

function rankSeries(ranks) {
  return ranks.map((r, i) => ({ label: "rank " + r, stroke: COLORS[i % COLORS.length], width: 1.5,
    spanGaps: true, points: { show: false } }));
}

// [xs, ys of rank 0, ys of rank 1, ...] from per-rank points, aligned on shared x values.
function aligned(byRank, ranks) {
  const xs = [...new Set(ranks.flatMap((r) => [...byRank.get(r).keys()]))].sort((a, b) => a - b);
  return [xs, ...ranks.map((r) => { const m = byRank.get(r); return xs.map((x) => m.has(x) ? m.get(x) : null); })];
}

// One chart that keeps its series (one per rank) and is redrawn with new data.
class Chart {
  constructor(container, { id, title, xLabel, yLabel, time, value, whole }) {
    this.box = el("figure", { class: "plot", "data-plot": id },
      el("figcaption", { text: title }));
    container.append(this.box);
    this.opts = { xLabel, yLabel, time, value, whole };
    this.plot = null;
    this.ranks = "";
  }
  // The plot's width: the figure's, less its padding.
  width() {
    const style = getComputedStyle(this.box);
    const inner = this.box.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
    return Math.max(260, inner || 460);
  }
  draw(data, ranks) {
    const width = this.width();
    const key = ranks.join(",");
    this.box.dataset.points = String(data[0].length);
    if (this.plot && key === this.ranks) { this.plot.setData(data); return; }
    if (this.plot) this.plot.destroy();
    this.ranks = key;
    const { xLabel, yLabel, time, value, whole } = this.opts;
    this.plot = new uPlot({
      width, height: 220,
      scales: { x: { time } },
      legend: { live: true },
      axes: [{ label: xLabel, stroke: "currentColor", grid: { stroke: "rgba(127,127,127,.15)" },
        // Steps are whole numbers; times get room for their labels.
        space: time ? 80 : 40, incrs: whole ? STEPS : undefined },
        { label: yLabel, stroke: "currentColor", grid: { stroke: "rgba(127,127,127,.15)" },
          values: value ? (_, ticks) => ticks.map(value) : undefined, size: 64 }],
      series: [{ label: xLabel, value: time ? undefined : (_, v) => v }, ...rankSeries(ranks)],
    }, data, this.box);
  }
  resize() { if (this.plot) this.plot.setSize({ width: this.width(), height: 220 }); }
}

export function metricsPanel(view, container, job, isFinal) {
  const training = el("div", { class: "plots", id: "training-plots" });
  const usage = el("div", { class: "plots", id: "resource-plots" });
  const status = el("p", { class: "note", "aria-live": "off" });
  replace(container,
    el("h3", { text: "Training metrics" }), training,
    el("h3", { text: "CPU and memory per rank" }), usage, status);
  const metrics = new Records(), samples = new Records();
  const charts = new Map();
  const chart = (box, id, opts) => {
    if (!charts.has(id)) charts.set(id, new Chart(box, { id, ...opts }));
    return charts.get(id);
  };
  const onResize = () => { for (const c of charts.values()) c.resize(); };
  window.addEventListener("resize", onResize);
  view.onLeave(() => { window.removeEventListener("resize", onResize); for (const c of charts.values()) c.plot && c.plot.destroy(); });

  function drawTraining() {
    const keys = new Map();  // metric -> rank -> step -> value
    const stepped = new Map();  // metric -> whether every record of it has a step
    for (const r of metrics.list) {
      for (const [k, v] of Object.entries(r)) {
        if (NOT_METRICS.has(k)) continue;
        stepped.set(k, stepped.get(k) !== false && typeof r.step === "number");
        if (!keys.has(k)) keys.set(k, new Map());
        const byRank = keys.get(k);
        if (!byRank.has(r.rank)) byRank.set(r.rank, new Map());
        // A record without a step is drawn at its time, in seconds since the first record.
        const x = typeof r.step === "number" ? r.step : (r.t - metrics.list[0].t) / 1e9;
        byRank.get(r.rank).set(x, v);
      }
    }
    if (!keys.size) {
      replace(training, el("p", { class: "empty panel" }, "No training metrics. A rank reports them with ",
        el("code", { text: "cohort.log(step=..., loss=...)" }), " or by printing ",
        el("code", { text: "cohort.log step=10 loss=0.5" }), " (docs/observing.md)."));
      charts.forEach((c, id) => { if (id.startsWith("metric:")) charts.delete(id); });
      return;
    }
    if (training.querySelector(".empty")) replace(training);
    for (const [k, byRank] of keys) {
      const ranks = [...byRank.keys()].sort((a, b) => a - b);
      const whole = stepped.get(k);
      chart(training, "metric:" + k, { title: k, xLabel: whole ? "step" : "seconds", yLabel: k, time: false, whole })
        .draw(aligned(byRank, ranks), ranks);
    }
  }

  function drawUsage() {
    const cpu = new Map(), rss = new Map(), previous = new Map();
    for (const s of samples.list) {
      const x = s.t / 1e9;
      for (const r of s.ranks || []) {
        if (!cpu.has(r.rank)) { cpu.set(r.rank, new Map()); rss.set(r.rank, new Map()); }
        rss.get(r.rank).set(x, r.rss_bytes);
        const p = previous.get(r.rank);
        // CPU use between two samples of the same attempt, in percent of one core.
        if (p && p.attempt === s.attempt && x > p.x) {
          cpu.get(r.rank).set(x, Math.max(0, 100 * (r.cpu_seconds - p.cpu) / (x - p.x)));
        }
        previous.set(r.rank, { x, cpu: r.cpu_seconds, attempt: s.attempt });
      }
    }
    if (!rss.size) {
      replace(usage, el("p", { class: "empty panel", text: "No samples yet: the node agents sample every rank's CPU and memory every 2 s while it runs." }));
      charts.delete("cpu"); charts.delete("rss");
      return;
    }
    if (usage.querySelector(".empty")) replace(usage);
    const ranks = [...rss.keys()].sort((a, b) => a - b);
    chart(usage, "cpu", { title: "CPU (% of one core)", xLabel: "time", yLabel: "CPU %", time: true,
      value: (v) => v.toFixed(0) + "%" }).draw(aligned(cpu, ranks), ranks);
    chart(usage, "rss", { title: "Resident memory", xLabel: "time", yLabel: "memory", time: true,
      value: (v) => bytes(v) }).draw(aligned(rss, ranks), ranks);
  }

  let first = true;
  view.every(2000, async () => {
    const q = "?limit=10000&after=" + Math.min(metrics.after() || samples.after(), samples.after() || metrics.after());
    let body;
    try {
      body = await api("GET", jobPath(job.id) + "/metrics" + q);
    } catch (e) {
      status.textContent = "The metrics could not be read: " + e.message;
      return true;
    }
    if (!view.alive()) return false;
    const a = metrics.add(body.metrics || [], (r) => r.t + "|" + r.rank + "|" + r.step);
    const b = samples.add(body.resources || [], (s) => s.t + "|" + s.node + "|" + s.attempt);
    if (first || a) drawTraining();
    if (first || b) drawUsage();
    first = false;
    status.textContent = metrics.list.length + " metric records, " + samples.list.length + " resource samples";
    return !isFinal();
  });
}
