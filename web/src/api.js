// The JSON API (docs/server-api.md), with the signed-in account's token.

export const session = { token: "", account: "", admin: false };
let onUnauthenticated = () => {};
// `f(message)` runs when the server no longer takes the session's token.
export function whenSignedOut(f) { onUnauthenticated = f; }

export class ApiError extends Error {
  constructor(status, code, message) { super(message); this.status = status; this.code = code; }
}

export async function api(method, path, { body, token, signal, raw, accept } = {}) {
  const headers = { "Authorization": "Bearer " + (token || session.token) };
  if (accept) headers["Accept"] = accept;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let res;
  try {
    res = await fetch(path, {
      method, headers, signal, cache: "no-store",
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (e) {
    if (e.name === "AbortError") throw e;
    throw new ApiError(0, "unavailable", "cannot reach the server (" + e.message + ")");
  }
  if (!res.ok) {
    let code = "", message = res.status + " " + res.statusText;
    try {
      const j = await res.json();
      if (j && j.error) { code = j.error.code || ""; message = j.error.message || message; }
    } catch (_) { /* not JSON: keep the status line */ }
    if (res.status === 401 && !token) onUnauthenticated("Signed out: " + message);
    throw new ApiError(res.status, code, message);
  }
  if (raw) return res;
  if (res.status === 204) return null;
  return res.json();
}

export const jobPath = (id) => "/v1/jobs/" + encodeURIComponent(id);
