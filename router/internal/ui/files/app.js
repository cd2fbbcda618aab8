// The status page: polls /ui/state about every second and redraws. The
// admin token, when the node asks for one, comes from the #token= fragment
// (which never reaches the server) or the form, and stays in this tab's
// sessionStorage.
"use strict";

const TOKEN_KEY = "ringgate-admin-token";
const POLL_MS = 1000;

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k instanceof Node ? k : String(k));
  return e;
}

function fmt(n) { return Number(n || 0).toLocaleString("en-US"); }

function takeFragmentToken() {
  const m = location.hash.match(/token=([^&]+)/);
  if (!m) return;
  let token = m[1];
  try {
    token = decodeURIComponent(token);
  } catch (e) {
    // A malformed escape: the token as written; a wrong one gets the form.
  }
  sessionStorage.setItem(TOKEN_KEY, token);
  history.replaceState(null, "", location.pathname + location.search);
  document.getElementById("auth").hidden = true;
}

// dim draws one window against its limit: a bar, "used / limit".
function dim(d) {
  const used = d.used || 0, limit = d.limit || 0;
  const frac = limit > 0 ? Math.min(used / limit, 1) : 0;
  const cls = limit > 0 && used >= limit ? "dim full" : frac >= 0.8 ? "dim high" : "dim";
  const bar = el("span", { class: "bar" }, el("span"));
  bar.firstChild.style.width = (frac * 100).toFixed(1) + "%";
  return el("div", { class: cls }, bar, el("span", { class: "fig" }, fmt(used) + " / " + (limit > 0 ? fmt(limit) : "∞")));
}

function atLimit(t) {
  return [t.requests, t.tokens, t.in_flight].some(d => d.limit > 0 && d.used >= d.limit);
}

function drawMembers(s) {
  const down = new Set(s.nodes.filter(n => n.error).map(n => n.node));
  const box = document.getElementById("members");
  box.replaceChildren(...s.cluster.members.map(m => el("div",
    { class: "member state-" + m.state + (down.has(m.name) ? " down" : ""), "data-name": m.name },
    el("div", { class: "name" }, m.name),
    el("div", { class: "meta state" }, down.has(m.name) ? m.state + ", not answering" : m.state),
    el("div", { class: "meta" }, m.addr))));
  document.getElementById("self").textContent = "served by " + s.cluster.self;
  document.getElementById("ring").textContent = "ring version " + s.cluster.ring_version +
    (s.cluster.configs_differ ? " · configs differ" : "");
}

function drawTenants(s) {
  const rows = s.tenants.map(t => el("tr", { "data-tenant": t.name, class: atLimit(t) ? "at-limit" : "" },
    el("td", { class: "name" }, t.name),
    el("td", { class: "owner" }, t.owner),
    el("td", {}, dim(t.requests)), el("td", {}, dim(t.tokens)), el("td", {}, dim(t.in_flight)),
    el("td", { class: "num queued" }, fmt(t.queued))));
  document.querySelector("#tenants tbody").replaceChildren(...rows);
  document.getElementById("tenant-count").textContent = s.tenants_left_out > 0
    ? "busiest " + s.tenants.length + " of " + fmt(s.tenants_matched) : fmt(s.tenants_matched);
  const w = s.totals;
  document.getElementById("totals").textContent = "all of them: " + fmt(w.requests) + " requests, " +
    fmt(w.tokens) + " tokens, " + fmt(w.in_flight) + " in flight, " + fmt(w.queued) + " queued";
}

// left is what a lease holds of a dimension, "–" where the budget has no
// limit on it.
function left(limit, n) { return limit > 0 ? fmt(n) : "–"; }

function budgetRows(node) {
  const rows = [];
  const add = (name, b) => {
    if (!b) return;
    const q = b.queue || { interactive: {}, batch: {} };
    rows.push(el("tr", {}, el("td", {}, name),
      el("td", { class: "num" }, left(b.limits.requests, b.lease.left_requests)),
      el("td", { class: "num" }, left(b.limits.tokens, b.lease.left_tokens)),
      el("td", { class: "num" }, b.limits.concurrency > 0 ? fmt(b.lease.slots_in_flight) + " / " + fmt(b.lease.slots_held) : "–"),
      el("td", { class: "num" }, fmt((q.interactive.waiting || 0) + (q.batch.waiting || 0))),
      el("td", { class: b.degraded ? "error" : "" }, b.degraded ? "degraded" : "ok")));
  };
  for (const u of node.upstreams || []) {
    add(u.name, u.budget);
    for (const [m, b] of Object.entries(u.models || {})) add(u.name + " · " + m, b);
  }
  return rows;
}

function drawLeases(s) {
  const parts = s.nodes.map(n => {
    const head = el("h3", {}, n.node);
    if (n.error) return el("div", { class: "node-leases", "data-node": n.node }, head, el("div", { class: "error" }, n.error));
    const rows = budgetRows(n);
    if (rows.length === 0) return el("div", { class: "node-leases", "data-node": n.node }, head, el("div", { class: "muted" }, "no provider limits configured"));
    const t = el("table", {}, el("thead", {}, el("tr", {}, ...["Budget", "Requests left", "Tokens left", "Slots in use / held", "Queued", "Store"].map(h => el("th", {}, h)))), el("tbody", {}, ...rows));
    return el("div", { class: "node-leases", "data-node": n.node }, head, t);
  });
  document.getElementById("leases").replaceChildren(...parts);
}

function drawRebalances(s) {
  const all = [];
  for (const n of s.nodes) for (const r of n.rebalances || []) all.push([n.node, r]);
  all.sort((a, b) => b[1].at.localeCompare(a[1].at));
  const rows = all.slice(0, 20).map(([node, r]) => el("tr", {},
    el("td", {}, new Date(r.at).toLocaleTimeString()), el("td", {}, node), el("td", { class: "num" }, r.ring_version),
    el("td", {}, (r.members || []).join(", ")), el("td", { class: "num" }, r.moved),
    el("td", { class: "num" }, r.taken_over), el("td", { class: "num" }, r.handed_over),
    el("td", {}, Object.entries(r.state || {}).filter(([, v]) => v > 0).map(([k, v]) => k.replaceAll("_", " ") + " " + v).join(", ") || "–")));
  document.querySelector("#rebalances tbody").replaceChildren(...rows);
}

function draw(s) {
  drawMembers(s);
  drawTenants(s);
  drawLeases(s);
  drawRebalances(s);
}

function setStatus(text, bad) {
  const e = document.getElementById("status");
  e.textContent = text;
  e.className = bad ? "error" : "muted";
}

async function poll() {
  const token = sessionStorage.getItem(TOKEN_KEY);
  const filter = document.getElementById("filter").value;
  const headers = token ? { Authorization: "Bearer " + token } : {};
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), 5000);
  try {
    const resp = await fetch("/ui/state?filter=" + encodeURIComponent(filter), { headers, signal: ctl.signal, cache: "no-store" });
    if (resp.status === 401) {
      document.getElementById("auth").hidden = false;
      setStatus(token ? "the admin token was refused" : "waiting for the admin token", true);
      return;
    }
    if (!resp.ok) throw new Error("HTTP " + resp.status);
    draw(await resp.json());
    setStatus("updated " + new Date().toLocaleTimeString(), false);
  } catch (err) {
    setStatus("cannot reach the node: " + err.message, true);
  } finally {
    clearTimeout(timer);
    setTimeout(poll, POLL_MS);
  }
}

function start() {
  takeFragmentToken();
  // A #token= link opened in a tab that shows the page already.
  window.addEventListener("hashchange", takeFragmentToken);
  document.getElementById("auth").addEventListener("submit", ev => {
    ev.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, document.getElementById("token").value.trim());
    document.getElementById("auth").hidden = true;
  });
  poll();
}

start();
