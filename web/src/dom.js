// Every node of the console is built here; strings always become text, never markup.

export function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = String(value);
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key in node && typeof node[key] === "boolean") node[key] = !!value;
    else if (value !== false) node.setAttribute(key, value === true ? "" : String(value));
  }
  append(node, children);
  return node;
}

export function append(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }
export function replace(node, ...children) { clear(node); return append(node, children); }

export function badge(state) {
  return el("span", { class: "badge " + state, "data-state": state, text: state });
}

export function errorBox() { return el("div", { class: "error", role: "alert" }); }
export function showError(box, e) { box.textContent = e ? (e.message || String(e)) : ""; }

// Saves `blob` as a file named `name`, the way a download link would.
export function saveBlob(blob, name) {
  const url = URL.createObjectURL(blob);
  const a = el("a", { href: url, download: name });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60000);
}
