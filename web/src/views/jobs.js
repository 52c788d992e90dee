// The job list: every job the account may see, refreshed every two seconds, searchable by name
// and sortable by any column. The address bar keeps the filter, search and sort.
import { api, session } from "../api.js";
import { badge, el, errorBox, replace, showError } from "../dom.js";
import { ACTIVE, ago, duration, jobInfo, localTime, parseTime, plural, runTime } from "../format.js";

const COLUMNS = [
  { key: "id", label: "ID", value: (j) => j.id },
  { key: "name", label: "Name", value: (j) => j.name.toLowerCase() },
  { key: "account", label: "Account", value: (j) => j.account, others: true },
  { key: "state", label: "State", value: (j) => j.state },
  { key: "ranks", label: "Ranks", value: (j) => j.ranks, num: true },
  { key: "submitted", label: "Submitted", value: (j) => parseTime(j.submitted) || 0 },
  { key: "started", label: "Started", value: (j) => parseTime(j.started) || 0 },
  { key: "duration", label: "Duration", value: (j) => runTime(j) || 0, num: true },
  { key: "info", label: "Info", value: (j) => jobInfo(j), sortable: false },
];

export function jobsView(view, params) {
  document.title = "Jobs · cohort";
  const filter = params.get("state") || "";
  const sort = params.get("sort") || "submitted";
  const descending = params.get("order") !== "asc";
  // The address bar's query, kept as the user changes the search and the sort: each change
  // starts from the last one.
  const query = new URLSearchParams(params);
  const address = (changes) => {
    for (const [k, v] of Object.entries(changes)) { if (v) query.set(k, v); else query.delete(k); }
    return "#/jobs" + (query.toString() ? "?" + query : "");
  };
  const go = (changes) => history.replaceState(null, "", address(changes));
  const select = el("select", { id: "state-filter", onchange: () => {
    location.hash = address({ state: select.value });  // a new filter: the list is fetched again
  } }, [["", "All states"], [ACTIVE, "Active"], ["queued", "Queued"], ["running", "Running"],
      ["succeeded", "Succeeded"], ["failed", "Failed"], ["stopped", "Stopped"]].map(
    ([value, label]) => el("option", { value, text: label, selected: value === filter })));
  const search = el("input", { id: "job-search", type: "search", placeholder: "Search by name",
    value: params.get("q") || "", "aria-label": "Search jobs by name" });
  const status = el("span", { class: "note", "aria-live": "off" });
  const error = errorBox();
  const body = el("tbody");
  const head = el("thead");
  const table = el("table", { id: "jobs", "aria-label": "Jobs" }, head, body);
  main().append(el("h1", { text: "Jobs" }),
    el("div", { class: "toolbar" },
      el("label", { class: "inline", for: "state-filter" }, "State", select), search,
      el("span", { class: "spacer" }), status,
      el("a", { class: "button", href: "#/submit", text: "Submit a job" })),
    error, table);

  let jobs = [];
  let column = COLUMNS.find((c) => c.key === sort && c.sortable !== false) || COLUMNS[5];
  let down = descending;
  search.addEventListener("input", () => { go({ q: search.value }); show(); });

  function show() {
    const others = jobs.some((j) => j.account !== session.account);
    const columns = COLUMNS.filter((c) => !c.others || others);
    // The header changes with the columns and the sort only (a click then finds it in place).
    const headKey = columns.length + column.key + down;
    if (head.dataset.key !== headKey) head.dataset.key = headKey, replace(head, el("tr", {}, columns.map((c) => {
      const th = el("th", { scope: "col", class: c.num ? "num" : null,
        "aria-sort": c === column ? (down ? "descending" : "ascending") : null });
      if (c.sortable === false) return replace(th, c.label);
      return replace(th, el("button", { type: "button", class: "sort", "data-sort": c.key,
        text: c.label + (c === column ? (down ? " ↓" : " ↑") : ""), onclick: () => {
          down = c === column ? !down : c.num || c.key === "submitted" || c.key === "started";
          column = c;
          go({ sort: c.key, order: down ? "" : "asc" });
          show();
        } }));
    })));
    const words = search.value.trim().toLowerCase();
    const shown = jobs.filter((j) => !words || j.name.toLowerCase().includes(words));
    const v = column.value;
    shown.sort((a, b) => {
      const x = v(a), y = v(b);
      const c = x < y ? -1 : x > y ? 1 : 0;
      return down ? -c : c;
    });
    if (!shown.length) {
      replace(body, el("tr", {}, el("td", { colspan: columns.length, class: "empty" },
        words ? "No job's name contains '" + search.value.trim() + "'." :
          filter ? "No jobs in this state." : "No jobs yet. ",
        !filter && !words && el("a", { href: "#/submit", text: "Submit one." }))));
      return;
    }
    replace(body, shown.map((j) => {
      const took = runTime(j);
      const cells = {
        id: el("td", { class: "mono" }, el("a", { href: "#/jobs/" + encodeURIComponent(j.id), text: j.id })),
        name: el("td", { text: j.kind === "session" ? j.name + " (session)" : j.name }),
        account: el("td", { text: j.account }),
        state: el("td", {}, badge(j.state)),
        ranks: el("td", { class: "num", text: j.ranks }),
        submitted: el("td", { title: localTime(j.submitted), text: ago(j.submitted) }),
        started: el("td", { title: localTime(j.started), text: j.started ? ago(j.started) : "—" }),
        duration: el("td", { class: "num", text: isNaN(took) ? "—" : duration(took) }),
        info: el("td", { class: "info", text: jobInfo(j) }),
      };
      return el("tr", { "data-job": j.id, "data-state": j.state }, columns.map((c) => cells[c.key]));
    }));
  }

  view.every(2000, async () => {
    try {
      const q = filter ? "?state=" + encodeURIComponent(filter) : "";
      jobs = (await api("GET", "/v1/jobs" + q)).jobs;
      showError(error, null);
    } catch (e) {
      if (view.alive()) showError(error, e);
      return;
    }
    if (!view.alive()) return;
    show();
    status.textContent = plural(jobs.length, "job") + " · refreshed " + new Date().toLocaleTimeString();
  });
}

function main() { return document.getElementById("main"); }
