// One job: its record and root cause, plots of its metrics, its configuration, ranks, events in
// words, stacks, log and outputs. It is redrawn whenever the job's next event is stored (pushed
// by the server); a queued job is also refreshed every few seconds, so that its estimated start
// stays current.
import { api, jobPath } from "../api.js";
import { badge, clear, el, errorBox, replace, saveBlob, showError } from "../dom.js";
import { FINAL, bytes, clock, duration, eventWords, howItExited, localTime, resources, runTime,
  signalName } from "../format.js";
import { metricsPanel } from "../plots.js";
import { logPanel } from "./logs.js";

export function jobView(view, id) {
  document.title = id + " · cohort";
  const error = errorBox();
  const title = el("h1", {}, el("span", { class: "mono", text: id }));
  const actions = el("div", { class: "toolbar", id: "actions" });
  const record = el("section", { id: "record", "aria-label": "Job record" });
  const rootCause = el("section", { id: "root-cause", "aria-label": "Root cause" });
  const stacks = el("section", { id: "stacks", "aria-label": "Stacks" });
  const debug = el("section", { id: "debug", "aria-label": "Debugger" });
  const session = el("section", { id: "session", "aria-label": "Session" });
  const plots = el("section", { id: "metrics", "aria-label": "Metrics" });
  const startup = el("section", { id: "startup", "aria-label": "Startup" });
  const config = el("section", { id: "config", "aria-label": "Configuration" });
  const ranks = el("section", { id: "ranks", "aria-label": "Ranks" });
  const events = el("section", { id: "events", "aria-label": "Events" });
  const outputs = el("section", { id: "outputs", "aria-label": "Outputs" });
  const logs = el("section", { id: "logs", "aria-label": "Log" });
  document.getElementById("main").append(el("p", {}, el("a", { href: "#/jobs", text: "← Jobs" })),
    title, actions, error, record, rootCause, session, debug, stacks,
    el("h2", { text: "Metrics" }), plots, startup,
    el("div", { class: "grid2" },
      el("div", {}, el("h2", { text: "Ranks" }), ranks),
      el("div", {}, el("h2", { text: "Events" }), events)),
    el("h2", { text: "Log" }), logs,
    el("h2", { text: "Configuration" }), config,
    el("h2", { text: "Outputs" }), outputs);

  let job = null;
  let log = null;
  let plotted = false;
  let configured = false;
  let seen = -1;  // the last event (seq) shown
  const eventList = [];  // every event so far: fetched once, then only the new ones
  const waits = new AbortController();
  view.onLeave(() => waits.abort());
  // Resolves when the job's next event after `seen` is stored: the server pushes it on an event
  // stream (Server-Sent Events, read through fetch so that the token goes along).
  async function nextEvent() {
    const res = await api("GET", jobPath(id) + "/events?after=" + Math.max(seen, 0),
      { signal: waits.signal, raw: true, accept: "text/event-stream" });
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let text = "\n";
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return;
        text += decoder.decode(value, { stream: true });
        if (text.includes("\nid: ")) return;  // an event came
      }
    } finally {
      reader.cancel().catch(() => {});
    }
  }
  async function refresh() {
    let ranksList, fresh;
    try {
      [job, ranksList, fresh] = await Promise.all([
        api("GET", jobPath(id)),
        api("GET", jobPath(id) + "/ranks").then((r) => r.ranks),
        api("GET", jobPath(id) + "/events" + (seen >= 0 ? "?after=" + seen : "")).then((r) => r.events)]);
    } catch (e) {
      if (view.alive()) showError(error, e);
      throw e;
    }
    if (!view.alive()) return false;
    showError(error, null);
    renderJob(job);
    renderRanks(ranksList);
    renderStartup(job.startup);
    for (const e of fresh) {
      if (typeof e.seq !== "number" || e.seq <= seen) continue;
      eventList.push(e);
      seen = e.seq;
    }
    renderEvents(eventList);
    if (!configured) { renderConfig(job); configured = true; }
    if (!log) log = logPanel(view, logs, job, ranksList);
    else if (ranksList.length && !logs.querySelector("optgroup")) log = logPanel(view, logs, job, ranksList);
    if (!plotted) { metricsPanel(view, plots, job, () => !job || FINAL.has(job.state)); plotted = true; }
    renderStacks(job);
    renderDebug(job);
    renderSession(job);
    const final = FINAL.has(job.state);
    if (final) loadOutputs();
    else if (!outputs.firstChild) replace(outputs, el("p", { class: "empty panel", text: "Listed when the job has ended." }));
    return !final;  // a finished job changes no more
  }
  // Shows the job now, then again whenever its next event is stored.
  view.follow(async (first) => {
    if (!first) await nextEvent();
    return refresh();
  });
  view.every(5000, async () => {
    if (job && job.state === "queued") await refresh().catch(() => {});
    return !job || job.state === "queued";
  });

  function renderJob(j) {
    replace(title, el("span", { text: j.name }), el("span", { class: "mono muted", text: j.id }), badge(j.state));
    document.title = j.name + " (" + j.state + ") · cohort";
    const final = FINAL.has(j.state);
    replace(actions,
      !final && el("button", { type: "button", class: "danger", text: j.state === "stopping" ? "Stopping…" : "Stop",
        disabled: j.state === "stopping", onclick: stop }),
      j.spec && el("a", { class: "button", id: "rerun", href: "#/submit?from=" + encodeURIComponent(j.id),
        text: "Re-run…", title: "Open the submit form with this job's configuration" }),
      final && el("button", { type: "button", class: "danger", text: "Delete", onclick: remove }));
    const took = runTime(j);
    const rows = [
      ["State", badge(j.state)], ["Account", j.account],
      ["Submitted", localTime(j.submitted)], ["Priority", j.priority],
      ["Started", localTime(j.started)], ["Framework", j.framework],
      ["Ended", localTime(j.ended)], ["Ranks", j.ranks],
      [final ? "Duration" : "Running for", isNaN(took) ? "—" : duration(took)], ["Resources", resources(j.resources)],
      ["Exit code", j.exit_code === null ? "—" : j.exit_code], ["Attempts", j.attempts],
    ];
    if (j.waiting) rows.push(["Waiting", j.waiting.reason + " (" + j.waiting.kind + ")"]);
    if (j.reason) rows.push(["Reason", j.reason]);
    replace(record, el("div", { class: "panel" }, el("dl", { class: "record" },
      rows.map(([k, v]) => [el("dt", { text: k }), el("dd", {}, v)]))));
    const rc = j.root_cause;
    if (rc) {
      replace(rootCause, el("h2", { text: "Root cause" }), el("div", { class: "panel rootcause" },
        rc.launched
          ? el("div", {}, el("strong", { text: rc.launched.name }), " " + rc.launched.what + ", under " +
            rc.name + " on node " + rc.node + ", which then ", howItExited(rc.exit_code, rc.signal))
          : el("div", {}, el("strong", { text: rc.name }), " on node " + rc.node + " ",
            howItExited(rc.exit_code, rc.signal)),
        rc.hint && el("p", { class: "note", text: "Hint: " + rc.hint }),
        rc.tail && rc.tail.length ? el("pre", { "aria-label": "Last lines of " + rc.name, text: rc.tail.join("\n") }) : null));
    } else if (j.state === "failed" && j.reason) {
      // Ended by cohort, not by a rank's exit: a hang, a timeout, a lost node.
      replace(rootCause, el("h2", { text: "Root cause" }), el("div", { class: "panel rootcause" },
        el("div", { text: j.reason })));
    } else {
      clear(rootCause);
    }
  }

  function renderRanks(list) {
    if (!list.length) {
      replace(ranks, el("p", { class: "empty panel", text: "No ranks yet: the job has not started." }));
      return;
    }
    const live = list.some((r) => typeof r.rss_bytes === "number");
    replace(ranks, el("table", { "aria-label": "Ranks" },
      el("thead", {}, el("tr", {}, ["Rank", "Name", "Node", "State", "Exit", live && "Memory", live && "Last output"]
        .filter(Boolean).map((h, i) => el("th", { scope: "col", class: i === 0 || i === 2 ? "num" : null, text: h })))),
      el("tbody", {}, list.map((r) => el("tr", { "data-rank": r.rank },
        el("td", { class: "num", text: r.rank }),
        el("td", { class: "mono", text: r.name }),
        el("td", { class: "num", text: r.node }),
        el("td", {}, badge(r.state)),
        el("td", { text: r.state !== "exited" ? "" :
          (r.signal ? signalName(r.signal) : r.exit_code === null ? "—" : "exit " + r.exit_code) +
          (r.by_cohort ? " (stopped by cohort)" : "") }),
        live && el("td", { text: typeof r.rss_bytes === "number" ? bytes(r.rss_bytes) : "" }),
        live && el("td", { text: r.last_output ? clock(r.last_output) : "" }))))));
  }

  // How long each node took to stage, spawn, print and log a metric (the last attempt).
  function renderStartup(list) {
    if (!Array.isArray(list) || !list.length) return clear(startup);
    const s = (v) => typeof v === "number" ? duration(v * 1000) : "—";
    replace(startup, el("h3", { text: "Startup, by node (seconds since the start)" }),
      el("table", { "aria-label": "Startup" },
        el("thead", {}, el("tr", {}, ["Node", "Staged", "Spawned", "First output", "First metric"].map(
          (h, i) => el("th", { scope: "col", class: "num", text: h })))),
        el("tbody", {}, list.map((n) => el("tr", { "data-node": n.node },
          el("td", { class: "num", text: n.node }), el("td", { class: "num", text: s(n.staged_s) }),
          el("td", { class: "num", text: s(n.spawned_s) }), el("td", { class: "num", text: s(n.first_output_s) }),
          el("td", { class: "num", text: s(n.first_metric_s) }))))));
  }

  function renderEvents(list) {
    replace(events, el("ol", { class: "events", "aria-label": "Events" }, list.map((e) => {
      const what = e.event === "state" ? e.state : e.event === "rank_exit" ? "rank exit" : e.event.replace(/_/g, " ");
      return el("li", { "data-event": e.event },
        el("span", { class: "mono muted", title: localTime(e.time), text: clock(e.time) }),
        el("span", { class: "what", text: what }),
        el("span", { text: eventWords(e) }));
    })));
  }

  // The configuration the job ran with (the API's `spec`: the job file with every field).
  function renderConfig(j) {
    const s = j.spec;
    if (!s) {
      replace(config, el("p", { class: "empty panel", text: "This job's configuration is not recorded." }));
      return;
    }
    const table = (label, head, rows) => rows.length
      ? el("table", { "aria-label": label }, el("thead", {}, el("tr", {}, head.map((h) => el("th", { scope: "col", text: h })))),
        el("tbody", {}, rows.map((r) => el("tr", {}, r.map((c) => el("td", { class: "mono", text: c }))))))
      : el("p", { class: "note", text: "None." });
    const pairs = (o) => Object.entries(o || {}).map(([k, v]) => [k, String(v)]);
    const roles = Object.entries(s.roles || {}).map(([name, r]) => {
      const res = r.resources || {};
      return [name, String(r.nodes), String(r.procs_per_node), res.cpus === undefined ? "1 (not limited)" : String(Number(res.cpus)),
        String(res.gpus || 0), Number(res.memory) ? bytes(Number(res.memory)) : "not limited"];
    });
    const policy = Object.entries(s.policy || {}).map(([k, v]) => [k, typeof v === "object" ? JSON.stringify(v) : String(v)]);
    replace(config, el("div", { class: "panel config" },
      el("dl", { class: "record" },
        el("dt", { text: "Command" }), el("dd", { class: "mono", id: "config-command", text: (s.command || []).map(quote).join(" ") }),
        el("dt", { text: "Working directory" }), el("dd", { class: "mono", text: s.workdir || "—" }),
        el("dt", { text: "Framework" }), el("dd", { text: s.framework + (s.launcher ? " (" + s.launcher + " launcher)" : "") })),
      el("h3", { text: "Hyperparameters" }), table("Hyperparameters", ["Name", "Value"], pairs(s.hyperparameters)),
      el("h3", { text: "Environment" }), table("Environment", ["Variable", "Value"], pairs(s.env)),
      el("h3", { text: "Roles and resources" }),
      table("Roles", ["Role", "Nodes", "Ranks per node", "CPUs per rank", "GPUs per rank", "Memory per rank"], roles),
      el("h3", { text: "Inputs" }),
      table("Inputs", ["Source", "Target", "Mode"], (s.inputs || []).map((i) => [i.source, i.target, i.mode || "copy"])),
      el("h3", { text: "Outputs" }),
      table("Outputs", ["From", "To", "When"], (s.outputs || []).map((o) => [o.source, o.target, o.when])),
      el("p", {}, el("button", { type: "button", class: "link", text: "Download what the job left in output/",
        onclick: () => outputs.scrollIntoView({ behavior: "smooth" }) })),
      el("h3", { text: "Policy" }), table("Policy", ["Field", "Value"], policy)));
  }

  // An interactive session (docs/sessions.md): the commands that reach it, from the machine
  // that started it (its keys are there).
  function renderSession(j) {
    if (j.kind !== "session" || FINAL.has(j.state)) return clear(session);
    const name = j.name;
    const steps = ["cohort session ssh " + name, "cohort session ssh " + name + " --config >> ~/.ssh/config   # VS Code, PyCharm: host cohort-" + name, "cohort session stop " + name].join("\n");
    const lab = j.session && j.session.jupyter && j.state === "running" &&
      el("div", { class: "toolbar" },
        el("button", { type: "button", id: "open-lab", text: "Open JupyterLab", onclick: openLab }),
        el("span", { class: "note", id: "lab-status", text: "in a new tab, signed in for this session alone" }));
    replace(session, el("h2", { text: "Session" }), el("div", { class: "panel" },
      lab || null,
      el("p", { text: "Idle timeout " + (j.session ? j.session.idle_timeout : "") + " · " + (j.session ? j.session.connections : 0) + " connection(s) open through the server" }),
      el("pre", { class: "log steps", id: "session-steps", "aria-label": "How to connect", text: steps })));
  }

  // The session's JupyterLab in a new tab: a ticket (a URL good once, for a minute) signs that
  // tab in with a cookie of this session's alone (docs/sessions.md). The tab is opened first,
  // while the click still counts, and shares nothing with this page.
  async function openLab() {
    const tab = window.open("", "_blank");
    try {
      if (tab) tab.opener = null;
      const ticket = await api("POST", jobPath(id) + "/session/jupyter/ticket", { body: {} });
      if (tab) tab.location.replace(ticket.url); else location.assign(ticket.url);
    } catch (e) {
      if (tab) tab.close();
      showError(error, e);
    }
  }

  // A job run with debug: its ranks that wait for a debugger or have one, and how to attach
  // (docs/debugging.md), as `cohort debug JOB` says it. Redrawn on each event: a rank's debug
  // state is one.
  let debugShown = "";
  async function renderDebug(j) {
    if (!j.spec || !j.spec.debug || FINAL.has(j.state) || j.state === "queued") {
      debugShown = "";
      return clear(debug);
    }
    let body;
    try {
      body = await api("GET", jobPath(id) + "/debug");
    } catch (e) {
      return view.alive() && showError(error, e);
    }
    if (!view.alive()) return;
    const key = JSON.stringify(body);
    if (key === debugShown) return;
    debugShown = key;
    const list = body.ranks || [];
    // A rank listens inside its job's network on the server: `cohort debug --attach` carries a
    // local port to it through the server, as the account whose token it holds.
    const steps = list.length ? [
      "# in your copy of the code (" + (body.workdir || "the job's workdir") + " on the server):",
      "cohort debug " + j.id + " --attach " + list[0].rank + " --vscode --write --local-root .",
      "# it writes .vscode/launch.json for a local port and carries it to the rank until Ctrl-C;",
      "# then VS Code: Run and Debug > \"cohort: " + j.id + " " + list[0].name + "\"",
      ...list.slice(1).map((r) => "# " + r.name + ": cohort debug " + j.id + " --attach " + r.rank + " --port PORT")].join("\n") : "";
    replace(debug, el("h2", { text: "Debugger" }), el("div", { class: "panel" },
      list.length ? [
        el("table", { "aria-label": "Ranks being debugged" },
          el("thead", {}, el("tr", {}, ["Rank", "Node", "State", "Attach to", "Where"].map((h, i) =>
            el("th", { scope: "col", class: i === 1 ? "num" : null, text: h })))),
          el("tbody", {}, list.map((r) => el("tr", { "data-rank": r.rank, "data-state": r.state },
            el("td", { class: "mono", text: r.name }),
            el("td", { class: "num", text: r.node }),
            el("td", {}, badge(r.state)),
            el("td", { class: "mono", text: r.address }),
            el("td", { class: "mono", text: r.reason + (r.where ? ": " + r.where : "") }))))),
        el("pre", { class: "log steps", id: "debug-steps", "aria-label": "How to attach", text: steps }),
        el("p", { class: "note", text: "While a rank waits or has a debugger, max_runtime, hang detection and fail-fast hold; a paused rank's peers may still time out in their collectives." })]
        : el("p", { class: "note", text: "No rank waits for a debugger now. A breakpoint() in a rank, or an exception with post_mortem, pauses it here." })));
  }

  // Every rank's stacks: those recorded when the job hung, and the latest `cohort stacks`.
  let stacksShown = "", endedShown = false;
  async function renderStacks(j) {
    const running = j.state === "running" || j.state === "stopping";
    if (!running && !FINAL.has(j.state)) return clear(stacks);
    if (!running && endedShown) return;
    endedShown = !running;
    // A finished job is drawn once: a request that failed (a server busy for a moment) is tried
    // again, or its stacks would never show.
    let body;
    for (let tries = running ? 1 : 5; ; ) {
      try {
        body = (await api("GET", jobPath(id) + "/stacks")) || {};
        break;
      } catch (e) {
        if (!view.alive()) return;
        if (--tries <= 0) return showError(error, e);
        await new Promise((r) => setTimeout(r, 2000));
      }
    }
    if (!view.alive()) return;
    if (!running && !body.hang && !body.stacks) return clear(stacks);
    const key = JSON.stringify([body.time, body.hang, running]);
    if (key === stacksShown) return;
    stacksShown = key;
    const button = running && el("button", { type: "button", id: "dump-stacks", text: "Dump stacks now", onclick: dump });
    replace(stacks, el("h2", { text: "Stacks" }), el("div", { class: "panel" },
      el("div", { class: "toolbar" }, button, el("span", { class: "note", id: "stacks-status",
        text: body.stacks ? "Dumped at " + new Date(body.time / 1e6).toLocaleTimeString() : "" })),
      body.hang && [el("h3", { text: "When the job hung" }), el("pre", { class: "log stacks", id: "hang-stacks", text: body.hang })],
      body.stacks && [el("h3", { text: "Latest dump" }), el("pre", { class: "log stacks", id: "now-stacks", text: body.stacks })],
      !body.hang && !body.stacks && el("p", { class: "note", text: "Each rank's Python stack, read from outside by py-spy: ranks with the same stack print once." })));
    async function dump() {
      button.disabled = true;
      const before = body.time;
      try {
        await api("POST", jobPath(id) + "/stacks", { body: {} });
        for (let i = 0; i < 60 && view.alive(); i++) {
          await new Promise((r) => setTimeout(r, 500));
          const now = await api("GET", jobPath(id) + "/stacks");
          if (now.time !== before) { stacksShown = ""; return renderStacks(job); }
        }
        showError(error, "No stacks came within 30 s: is the job still running?");
      } catch (e) {
        showError(error, e);
      } finally {
        button.disabled = false;
      }
    }
  }

  async function loadOutputs() {
    try {
      const files = (await api("GET", jobPath(id) + "/outputs")).files;
      if (!view.alive()) return;
      if (!files.length) {
        replace(outputs, el("p", { class: "empty panel", text: "The job left nothing in output/." }));
        return;
      }
      replace(outputs, el("div", { class: "panel" }, el("ul", { class: "files" }, files.map((f) => el("li", {},
        el("button", { type: "button", class: "link", text: f.path, "aria-label": "Download " + f.path,
          onclick: () => download(f.path) }),
        el("span", { class: "muted", text: bytes(f.size) }))))));
    } catch (e) {
      if (view.alive()) showError(error, e);
    }
  }

  async function download(path) {
    try {
      const res = await api("GET", jobPath(id) + "/outputs/" + path.split("/").map(encodeURIComponent).join("/"), { raw: true });
      saveBlob(await res.blob(), path.split("/").pop());
    } catch (e) {
      showError(error, e);
    }
  }

  async function stop() {
    if (!confirm("Stop job " + id + "? Its ranks get the stop signal, then SIGKILL after the grace period.")) return;
    try {
      renderJob(await api("POST", jobPath(id) + "/stop", { body: {} }));
      showError(error, null);
    } catch (e) {
      showError(error, e);
    }
  }
  async function remove() {
    if (!confirm("Delete job " + id + "? Its record, logs and outputs are removed for good.")) return;
    try {
      await api("DELETE", jobPath(id));
      location.hash = "#/jobs";
    } catch (e) {
      showError(error, e);
    }
  }
}

// A word of a command as a shell would need it.
function quote(word) {
  return /^[A-Za-z0-9_./=:,+@%-]+$/.test(word) ? word : "'" + String(word).replace(/'/g, "'\\''") + "'";
}
