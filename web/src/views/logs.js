// The log of a job: the merged log, one node's ranks, or one rank's; followed live while the job
// runs. The page keeps at most the last MAX_CHARS of it (a job can print for days): older text
// is dropped from the view, and the download button saves the whole log.
import { api, jobPath } from "../api.js";
import { clear, el, replace, saveBlob } from "../dom.js";
import { FINAL } from "../format.js";

const MAX_CHARS = 1 << 20;

export function logPanel(view, container, job, ranks) {
  const nodes = [...new Set(ranks.map((r) => r.node))].sort((a, b) => a - b);
  const select = el("select", { id: "log-rank" },
    el("option", { value: "", text: "All ranks (merged)" }),
    nodes.length > 1 && el("optgroup", { label: "Nodes" },
      nodes.map((n) => el("option", { value: "node:" + n, text: "Node " + n + " (its ranks, merged)" }))),
    el("optgroup", { label: "Ranks" }, (ranks.length ? ranks : Array.from({ length: job.ranks },
      (_, r) => ({ rank: r }))).map((r) => el("option", { value: String(r.rank),
      text: "Rank " + r.rank + (r.name ? " (" + r.name + " on node " + r.node + ")" : "") }))));
  const status = el("span", { class: "note", id: "log-status", "aria-live": "polite" });
  const pre = el("pre", { class: "log", id: "log", tabindex: "0", "aria-label": "Log output" });
  const save = el("button", { type: "button", id: "log-download", text: "Download log", onclick: download });
  replace(container, el("div", { class: "toolbar" },
    el("label", { class: "inline", for: "log-rank" }, "Show", select), el("span", { class: "spacer" }),
    status, save), pre);
  let abort = null;
  let dropped = false;
  view.onLeave(() => abort && abort.abort());
  select.addEventListener("change", () => start(job));

  function query(follow) {
    const q = new URLSearchParams();
    if (select.value && !select.value.startsWith("node:")) q.set("rank", select.value);
    if (follow) q.set("follow", "1");
    return q;
  }
  // One node's lines of the merged log: those its ranks printed ("[worker/1 node0] ...").
  function lineFilter() {
    if (!select.value.startsWith("node:")) return null;
    const mark = " node" + select.value.slice(5) + "] ";
    return (line) => line.startsWith("[") && line.indexOf(mark) > 0 && line.indexOf(mark) < line.indexOf("]") + 2;
  }
  function show(text) {
    const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 8;
    pre.append(document.createTextNode(text));
    if (pre.textContent.length > MAX_CHARS) {
      const kept = pre.textContent.slice(-MAX_CHARS / 2);
      replace(pre, kept.slice(kept.indexOf("\n") + 1));
      dropped = true;
    }
    if (atBottom) pre.scrollTop = pre.scrollHeight;
  }

  async function start(j) {
    if (abort) abort.abort();
    const mine = new AbortController();
    abort = mine;
    clear(pre);
    dropped = false;
    const final = FINAL.has(j.state);
    const keep = lineFilter();
    let partial = "";
    status.textContent = j.state === "queued"
      ? "The job is waiting to start" + (j.waiting ? ": " + j.waiting.reason : "") + ". Its log follows when it runs."
      : final ? "" : "following…";
    try {
      // A finished job's log ends: read it whole. A live one is followed until the job ends
      // (the server holds a queued job's request until it starts).
      const res = await api("GET", jobPath(j.id) + "/logs?" + query(!final), { signal: mine.signal, raw: true });
      const reader = res.body.getReader();
      const decoder = new TextDecoder();
      for (;;) {
        const { done, value } = await reader.read();
        let text = decoder.decode(value || new Uint8Array(), { stream: !done });
        if (abort !== mine) return;
        if (keep) {
          const lines = (partial + text).split("\n");
          partial = done ? "" : lines.pop();
          text = lines.filter(keep).map((l) => l + "\n").join("");
        }
        if (text) {
          show(text);
          if (j.state === "queued" && status.textContent.startsWith("The job is waiting")) status.textContent = "following…";
        }
        if (done) break;
      }
      status.textContent = (dropped ? "Showing the last part of the log; download it for all of it. " : "") +
        (pre.firstChild ? "" : "The log is empty.");
    } catch (e) {
      if (e.name === "AbortError") return;
      if (abort === mine) status.textContent = "The log could not be read: " + e.message;
    }
  }

  async function download() {
    try {
      const res = await api("GET", jobPath(job.id) + "/logs?" + query(false), { raw: true });
      let blob = await res.blob();
      const keep = lineFilter();
      if (keep) blob = new Blob([(await blob.text()).split("\n").filter(keep).join("\n") + "\n"], { type: "text/plain" });
      const v = select.value;
      saveBlob(blob, job.id + (v.startsWith("node:") ? "-node" + v.slice(5) : v ? "-rank" + v : "") + ".log");
    } catch (e) {
      status.textContent = "The log could not be downloaded: " + e.message;
    }
  }
  start(job);
  return { restart: (j) => { job = j; start(j); } };
}
