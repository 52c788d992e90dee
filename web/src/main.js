// The console's entry: signing in and out, and the router that draws a view for the address
// bar's fragment (#/jobs, #/jobs/ID, #/submit, #/shares).
import "./style.css";
import { api, session, whenSignedOut } from "./api.js";
import { clear, el, replace } from "./dom.js";
import { newView } from "./view.js";
import { jobView } from "./views/job.js";
import { jobsView } from "./views/jobs.js";
import { sharesView } from "./views/shares.js";
import { submitView } from "./views/submit.js";

const TOKEN_KEY = "cohort.token";
const main = document.getElementById("main");

function route() {
  const hash = location.hash.replace(/^#/, "");
  const [path, query] = hash.split("?");
  const parts = path.split("/").filter(Boolean).map((p) => { try { return decodeURIComponent(p); } catch (_) { return p; } });
  return { parts, params: new URLSearchParams(query || "") };
}

function render() {
  if (!session.token) return;
  const { parts, params } = route();
  const name = parts[0] || "jobs";
  for (const a of document.querySelectorAll("#nav a")) {
    if (a.dataset.view === name) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  const view = newView();
  clear(main);
  main.dataset.route = location.hash;  // what the address bar shows (a link's token is gone)
  if (name === "jobs" && parts[1]) return jobView(view, parts[1]);
  if (name === "jobs") return jobsView(view, params);
  if (name === "submit") return submitView(view, params);
  if (name === "shares") return sharesView(view);
  main.append(el("h1", { text: "Not found" }),
    el("p", {}, "No page '" + location.hash + "'. ", el("a", { href: "#/jobs", text: "See the jobs" })));
}

// ---------------------------------------------------------------------------------------
// Signing in and out.

function showSignedIn(on) {
  document.getElementById("nav").hidden = !on;
  document.getElementById("who").hidden = !on;
  document.getElementById("who-name").textContent =
    on ? session.account + (session.admin ? " (admin)" : "") : "";
}

function signInView(message) {
  newView();
  showSignedIn(false);
  document.title = "Sign in · cohort";
  const input = el("input", { id: "token", type: "password", autocomplete: "off", required: true,
    placeholder: "cohort_…", "aria-describedby": "token-help" });
  const error = el("div", { class: "error", id: "signin-error", role: "alert" });
  if (message) error.textContent = message;
  const button = el("button", { type: "submit", class: "primary", text: "Sign in" });
  const form = el("form", { class: "panel signin", onsubmit: async (ev) => {
    ev.preventDefault();
    button.disabled = true;
    const err = await signIn(input.value.trim());
    button.disabled = false;
    if (err) { error.textContent = err; input.focus(); }
  } },
    el("h1", { text: "Sign in to cohort" }),
    el("label", { for: "token", text: "Access token" }), input,
    el("p", { id: "token-help", class: "note" },
      "A token of your account: the admin's is in <data-root>/server/admin.token; ",
      el("code", { text: "cohort tokens create" }), " makes another."),
    error,
    el("div", {}, button));
  replace(main, form);
  input.focus();
}

// Checks `token` with /v1/whoami; on success keeps it and shows the console. Returns an
// error message, or "" when signed in.
async function signIn(token) {
  if (!token) return "Enter a token";
  let me;
  try {
    me = await api("GET", "/v1/whoami", { token });
  } catch (e) {
    // A kept token that the server no longer knows (revoked) is forgotten.
    if (e.status === 401) {
      try {
        if (localStorage.getItem(TOKEN_KEY) === token) localStorage.removeItem(TOKEN_KEY);
      } catch (_) { /* nothing kept */ }
    }
    return "Sign-in failed: " + e.message;
  }
  session.token = token;
  session.account = me.account;
  session.admin = !!me.admin;
  try { localStorage.setItem(TOKEN_KEY, token); } catch (_) { /* private mode: this tab only */ }
  showSignedIn(true);
  if (!location.hash || location.hash === "#") history.replaceState(null, "", "#/jobs");
  render();
  return "";
}

function signOut(message) {
  session.token = "";
  session.account = "";
  session.admin = false;
  try { localStorage.removeItem(TOKEN_KEY); } catch (_) { /* nothing kept */ }
  signInView(message);
}

// A link may carry the token: #token=T, or #/jobs/ID?token=T. It is taken out of the address
// bar (and so out of the history) at once.
function tokenFromFragment() {
  const hash = location.hash.replace(/^#/, "");
  let token = "", rest = hash;
  if (hash.startsWith("token=")) {
    const amp = hash.indexOf("&");
    token = hash.slice(6, amp < 0 ? undefined : amp);
    rest = amp < 0 ? "/jobs" : hash.slice(amp + 1);
  } else {
    const q = hash.indexOf("?");
    if (q >= 0) {
      const params = new URLSearchParams(hash.slice(q + 1));
      if (params.has("token")) {
        token = params.get("token");
        params.delete("token");
        rest = hash.slice(0, q) + (params.toString() ? "?" + params : "");
      }
    }
  }
  if (!token) return "";
  history.replaceState(null, "", location.pathname + location.search + "#" + rest);
  try { return decodeURIComponent(token); } catch (_) { return token; }
}

document.getElementById("signout").addEventListener("click", () => signOut(""));
window.addEventListener("hashchange", async () => {
  const linked = tokenFromFragment();
  if (!linked) return render();
  const err = await signIn(linked);
  if (err) signInView(err.replace("Sign-in failed", "Sign-in with the link's token failed"));
});

(async function start() {
  const linked = tokenFromFragment();
  let stored = "";
  try { stored = localStorage.getItem(TOKEN_KEY) || ""; } catch (_) { /* none */ }
  const token = linked || stored;
  if (!token) return signInView("");
  const err = await signIn(token);
  if (err) signInView(linked ? err.replace("Sign-in failed", "Sign-in with the link's token failed") : err);
})();
whenSignedOut(signOut);
