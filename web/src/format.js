// How times, sizes and jobs read, as the CLI prints them.

export const FINAL = new Set(["succeeded", "failed", "stopped"]);
export const ACTIVE = "queued,starting,staging,running,restarting,stopping";

export function parseTime(iso) { return iso ? Date.parse(iso) : NaN; }

export function duration(ms) {
  if (!(ms >= 0)) return "";
  const s = ms / 1000;
  if (s < 10) return s.toFixed(1) + "s";
  if (s < 60) return Math.round(s) + "s";
  const m = Math.floor(s / 60);
  if (m < 60) return m + "m" + String(Math.round(s % 60)).padStart(2, "0") + "s";
  const h = Math.floor(m / 60);
  if (h < 48) return h + "h" + String(m % 60).padStart(2, "0") + "m";
  return Math.floor(h / 24) + "d" + (h % 24) + "h";
}

export function ago(iso) {
  const t = parseTime(iso);
  if (isNaN(t)) return "";
  const s = Math.max(0, (Date.now() - t) / 1000);
  if (s < 60) return Math.floor(s) + "s ago";
  if (s < 3600) return Math.floor(s / 60) + "m ago";
  if (s < 86400) return Math.floor(s / 3600) + "h ago";
  return Math.floor(s / 86400) + "d ago";
}

export function localTime(iso) {
  const t = parseTime(iso);
  return isNaN(t) ? "—" : new Date(t).toLocaleString();
}

export function clock(iso) {
  const t = parseTime(iso);
  if (isNaN(t)) return "";
  const d = new Date(t);
  const two = (n) => String(n).padStart(2, "0");
  return two(d.getHours()) + ":" + two(d.getMinutes()) + ":" + two(d.getSeconds()) + "." +
    String(d.getMilliseconds()).padStart(3, "0");
}

export function bytes(n) {
  if (!n) return "0";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(n < 10 ? 1 : 0) : n) + " " + units[i];
}

export function plural(n, word) { return n + " " + word + (n === 1 ? "" : "s"); }

export function resources(r) {
  if (!r) return "";
  const parts = [plural(Number(r.cpus), "CPU")];
  if (Number(r.gpus)) parts.push(plural(Number(r.gpus), "GPU"));
  if (Number(r.memory)) parts.push(bytes(Number(r.memory)) + " memory");
  return parts.join(", ");
}

// How long the job ran (or has been running), in ms; NaN before it started.
export function runTime(job) {
  const start = parseTime(job.started), end = parseTime(job.ended);
  if (isNaN(start)) return NaN;
  return (isNaN(end) ? Date.now() : end) - start;
}

// One line about a job, as `cohort ps` prints it.
export function jobInfo(job) {
  if (job.state === "queued" && job.waiting) return job.waiting.reason;
  if (FINAL.has(job.state)) {
    const parts = [];
    if (job.exit_code !== null && job.exit_code !== undefined) parts.push("exit " + job.exit_code);
    if (isNaN(runTime(job))) parts.push("never started");  // how long it ran has a column
    return parts.join(" · ");
  }
  if (job.state === "running") return "";
  if (job.state === "stopping") return job.reason || "";
  return job.reason || "";
}

const SIGNALS = { 1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS",
  8: "SIGFPE", 9: "SIGKILL", 10: "SIGUSR1", 11: "SIGSEGV", 12: "SIGUSR2", 13: "SIGPIPE",
  14: "SIGALRM", 15: "SIGTERM", 19: "SIGSTOP" };
export function signalName(n) { return SIGNALS[n] || "signal " + n; }

// "exited with code 1", "was killed by SIGKILL".
export function howItExited(code, signal) {
  if (Number(signal) > 0) return "was killed by " + signalName(Number(signal));
  if (code === null || code === undefined) return "exited";
  return "exited with code " + code;
}

// What an event says, the important fields first, as `cohort status` prints it:
// "worker/3 on node 1 exited with code 1", "running", "node 0: 3 files, 1.2 MiB in 0.4s"; any
// other field as key=value.
export function eventWords(e) {
  const shown = new Set(["time", "event", "seq", "t"]);
  const parts = [];
  if (e.event === "state") {
    let line = String(e.state);
    if (typeof e.exit_code === "number") line += " (exit code " + e.exit_code + ")";
    if (e.reason) line += ": " + e.reason;
    parts.push(line);
    ["state", "exit_code", "reason"].forEach((k) => shown.add(k));
  } else if (e.event === "rank_exit") {
    let line = String(e.name || "rank " + e.rank);
    if (e.node !== undefined) line += " on node " + e.node;
    line += " " + howItExited(e.code ?? e.exit_code, e.signal);
    if (e.by_cohort) line += " (stopped by cohort)";
    parts.push(line);
    ["name", "node", "code", "exit_code", "signal", "by_cohort", "rank", "role", "role_rank",
      "exit_time", "exit_t"].forEach((k) => shown.add(k));
  } else if (e.event === "debug") {
    // As cohort run prints it: "worker/1 on node 0 is waiting for a debugger at 127.0.0.1:41235".
    const who = String(e.name || "rank " + e.rank) + " on node " + e.node;
    let line = e.state === "waiting" ? who + " is waiting for a debugger" + (e.address ? " at " + e.address : "")
      : e.state === "attached" ? "a debugger is attached to " + who
      : who + " goes on without a debugger";
    if (e.state === "waiting" && e.reason) line += " (" + e.reason + (e.where ? ": " + e.where : "") + ")";
    parts.push(line);
    ["name", "node", "rank", "state", "reason", "where", "address", "attempt"].forEach((k) => shown.add(k));
  } else if (e.event === "staged" && typeof e.files === "number") {
    let line = "node " + e.node + ": " + plural(e.files, "file") + ", " + bytes(Number(e.bytes) || 0);
    if (typeof e.seconds === "number") line += " in " + duration(e.seconds * 1000);
    parts.push(line);
    ["node", "files", "bytes", "seconds"].forEach((k) => shown.add(k));
  }
  for (const [k, v] of Object.entries(e)) {
    if (shown.has(k) || v === null || v === undefined) continue;
    if (k === "attempt" && v === 0) continue;
    let value = typeof v === "object" ? JSON.stringify(v) : String(v);
    if (!value) continue;
    if (typeof v === "string" && value.includes(" ")) value = "'" + value + "'";
    parts.push(k + "=" + value);
  }
  return parts.join(" ");
}
