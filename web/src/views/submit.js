// Submitting a job: a form for the fields most jobs set, and the whole job file as YAML beside
// it; each follows the other. `#/submit?from=ID` opens it with that job's configuration (the
// console's Re-run).
import { api, jobPath } from "../api.js";
import { el, errorBox, showError } from "../dom.js";
import { fromYaml, toYaml } from "../yaml.js";

const EXAMPLE = {
  name: "hello",
  framework: "generic",
  workdir: "/tmp",
  command: ["/bin/sh", "-c", "echo hello from rank $COHORT_RANK; sleep 5"],
  roles: { worker: { nodes: 1, procs_per_node: 2 } },
};
const FRAMEWORKS = ["generic", "pytorch", "tensorflow", "mindspore", "mpi", "deepspeed"];

// "python3 train.py --lr '0.1 0.2'" as words, the way a shell splits it (quotes, no expansion).
export function words(line) {
  const out = [];
  let word = null, quote = "";
  for (let i = 0; i < line.length; i++) {
    const c = line[i];
    if (quote) {
      if (c === quote) quote = "";
      else if (c === "\\" && quote === "\"" && i + 1 < line.length) word += line[++i];
      else word += c;
    } else if (c === "'" || c === "\"") { quote = c; word = word ?? ""; }
    else if (c === "\\" && i + 1 < line.length) word = (word ?? "") + line[++i];
    else if (/\s/.test(c)) { if (word !== null) out.push(word); word = null; }
    else word = (word ?? "") + c;
  }
  if (quote) throw new Error("the command has an unclosed " + quote);
  if (word !== null) out.push(word);
  return out;
}
function line(command) {
  return (command || []).map((w) => /^[A-Za-z0-9_./=:,+@%-]+$/.test(w) ? w : "'" + String(w).replace(/'/g, "'\\''") + "'").join(" ");
}

export function submitView(view, params) {
  document.title = "Submit · cohort";
  const from = params.get("from");
  const text = el("textarea", { id: "job-yaml", spellcheck: false, "aria-describedby": "job-help" });
  const field = (id, label, input) => el("div", {}, el("label", { for: id, text: label }), input);
  const name = el("input", { id: "f-name", type: "text" });
  const framework = el("select", { id: "f-framework" }, FRAMEWORKS.map((f) => el("option", { value: f, text: f })));
  const workdir = el("input", { id: "f-workdir", type: "text" });
  const command = el("input", { id: "f-command", type: "text", class: "mono" });
  const nodes = el("input", { id: "f-nodes", type: "number", min: "1", step: "1" });
  const procs = el("input", { id: "f-procs", type: "text", placeholder: "auto or a number" });
  const priority = el("input", { id: "priority", type: "number", value: "0", step: "1" });
  const formNote = el("p", { class: "note", id: "form-note" });
  const error = errorBox();
  const button = el("button", { type: "submit", class: "primary", text: "Submit" });

  let job = structuredClone(EXAMPLE);
  // The first role is the one the form's nodes and ranks per node change.
  const role = () => { const names = Object.keys(job.roles || {}); return names.length ? job.roles[names[0]] : null; };
  function fill() {
    name.value = job.name ?? "";
    framework.value = FRAMEWORKS.includes(job.framework) ? job.framework : "generic";
    workdir.value = job.workdir ?? "";
    command.value = Array.isArray(job.command) ? line(job.command) : "";
    const r = role();
    nodes.value = r ? String(r.nodes ?? 1) : "";
    procs.value = r ? String(r.procs_per_node ?? 1) : "";
    formNote.textContent = Object.keys(job.roles || {}).length > 1
      ? "Nodes and ranks per node apply to the first role, " + Object.keys(job.roles)[0] + "; edit the others below." : "";
  }
  function fromForm() {
    try {
      job.name = name.value;
      job.framework = framework.value;
      job.workdir = workdir.value;
      job.command = words(command.value);
      if (!job.roles || !Object.keys(job.roles).length) job.roles = { worker: {} };
      const r = role();
      r.nodes = Number(nodes.value) || 1;
      r.procs_per_node = procs.value.trim() === "auto" ? "auto" : Number(procs.value) || 1;
      text.value = toYaml(job);
      showError(error, null);
    } catch (e) {
      showError(error, e);
    }
  }
  for (const input of [name, framework, workdir, command, nodes, procs]) input.addEventListener("input", fromForm);
  text.addEventListener("input", () => {
    try {
      job = fromYaml(text.value);
      fill();
      showError(error, null);
    } catch (e) {
      showError(error, "The YAML does not read: " + e.message);
    }
  });

  const form = el("form", { class: "panel", onsubmit: async (ev) => {
    ev.preventDefault();
    showError(error, null);
    const p = Number(priority.value || 0);
    if (!Number.isInteger(p)) { showError(error, "The priority must be a whole number"); return; }
    button.disabled = true;
    try {
      // The text goes as it is: the server reads it as `cohort submit` reads a job file, and
      // its message names the field that is wrong.
      const created = await api("POST", "/v1/jobs", { body: { job: text.value, priority: p } });
      if (view.alive()) location.hash = "#/jobs/" + encodeURIComponent(created.id);
    } catch (e) {
      if (view.alive()) showError(error, "Not submitted: " + e.message);
    } finally {
      button.disabled = false;
    }
  } },
    el("div", { class: "form-grid" },
      field("f-name", "Name", name), field("f-framework", "Framework", framework),
      field("f-nodes", "Nodes", nodes), field("f-procs", "Ranks per node", procs)),
    el("div", { class: "form-grid wide" }, field("f-command", "Command", command), field("f-workdir", "Working directory", workdir)),
    formNote,
    el("label", { for: "job-yaml", text: "Job file (YAML)" }),
    el("p", { id: "job-help", class: "note" },
      "The same fields as job.yaml (name, framework, workdir, command, roles, env, hyperparameters, inputs, outputs, policy, ...); ",
      "the form above edits the common ones. workdir is an absolute path on the server's machine."),
    text,
    el("div", { class: "form-row" },
      el("div", {}, el("label", { for: "priority", text: "Priority" }), priority),
      el("div", {}, button)),
    error);
  const heading = el("h1", { text: from ? "Re-run " + from : "Submit a job" });
  document.getElementById("main").append(heading, form);

  const show = () => { text.value = toYaml(job); fill(); };
  if (!from) { show(); name.focus(); return; }
  // The form is busy until the job's configuration is in it, so nothing reads or submits it half-filled.
  const ready = () => { button.disabled = false; form.setAttribute("aria-busy", "false"); };
  button.disabled = true;
  form.setAttribute("aria-busy", "true");
  api("GET", jobPath(from)).then((j) => {
    if (!view.alive()) return;
    if (!j.spec) throw new Error("job " + from + " has no recorded configuration");
    job = j.spec;
    show();
    ready();
    command.focus();
  }).catch((e) => { if (view.alive()) { show(); ready(); showError(error, "Could not open job " + from + ": " + e.message); } });
}
