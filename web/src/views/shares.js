// Shares: who may read or write a store:// prefix of whose bucket.
import { api, session } from "../api.js";
import { el, errorBox, replace, showError } from "../dom.js";
import { ago, localTime } from "../format.js";

export function sharesView(view) {
  document.title = "Shares · cohort";
  const error = errorBox();
  const list = el("div", { id: "shares" });
  const prefix = el("input", { id: "share-prefix", type: "text", required: true, placeholder: "store://bucket/prefix/" });
  const who = el("input", { id: "share-with", type: "text", required: true, placeholder: "account" });
  const access = el("select", { id: "share-access" },
    el("option", { value: "read", text: "read" }), el("option", { value: "write", text: "write (and read)" }));
  const formError = errorBox();
  const form = el("form", { class: "panel", onsubmit: async (ev) => {
    ev.preventDefault();
    showError(formError, null);
    try {
      await api("POST", "/v1/shares", { body: { prefix: prefix.value.trim(), with: who.value.trim(), access: access.value } });
      prefix.value = "";
      who.value = "";
      load();
    } catch (e) {
      showError(formError, "Not shared: " + e.message);
    }
  } },
    el("div", { class: "form-row" },
      el("div", {}, el("label", { for: "share-prefix", text: "Prefix" }), prefix),
      el("div", {}, el("label", { for: "share-with", text: "With account" }), who),
      el("div", {}, el("label", { for: "share-access", text: "Access" }), access),
      el("div", {}, el("button", { type: "submit", class: "primary", text: "Share" }))),
    formError);
  document.getElementById("main").append(el("h1", { text: "Shares" }),
    el("p", { class: "note", text: "A share gives another account read or write access to a store:// prefix of one of your buckets. Revoking works at once." }),
    error, list, el("h2", { text: "Share a prefix" }), form);

  async function load() {
    try {
      const shares = (await api("GET", "/v1/shares")).shares;
      if (!view.alive()) return;
      showError(error, null);
      if (!shares.length) {
        replace(list, el("p", { class: "empty panel", text: "Nothing shared by you or with you." }));
        return;
      }
      replace(list, el("table", { "aria-label": "Shares" },
        el("thead", {}, el("tr", {}, ["ID", "Prefix", "Owner", "With", "Access", "Created", ""].map(
          (h) => el("th", { scope: "col", text: h })))),
        el("tbody", {}, shares.map((s) => el("tr", { "data-share": s.id },
          el("td", { text: s.id }), el("td", { class: "mono", text: s.prefix }),
          el("td", { text: s.owner }), el("td", { text: s.with }), el("td", { text: s.access }),
          el("td", { title: localTime(s.created), text: ago(s.created) }),
          el("td", {}, (s.owner === session.account || session.admin) &&
            el("button", { type: "button", class: "danger", text: "Revoke", "aria-label": "Revoke share " + s.id,
              onclick: () => revoke(s) })))))));
    } catch (e) {
      if (view.alive()) showError(error, e);
    }
  }
  async function revoke(s) {
    if (!confirm("Revoke share " + s.id + " (" + s.prefix + " with " + s.with + ")?")) return;
    try {
      await api("DELETE", "/v1/shares/" + encodeURIComponent(s.id));
      load();
    } catch (e) {
      showError(error, e);
    }
  }
  load();
}
