// sitlpool dashboard: every value from the server is put on the page with textContent or
// as an SVG attribute number, never as HTML. The page only reads: no request changes anything.
"use strict";

const SVGNS = "http://www.w3.org/2000/svg";
const R = 6378137.0;
const TRACK_MAX = 900, ALT_MAX = 300;
const tracks = new Map(); // instance -> {points: [[lat, lon]], alts: [[t, alt]], last: time}
let logs = [];
let lastDoc = null;
let lastMessage = 0;

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else e.setAttribute(k, String(v));
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function svg(tag, attrs) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  return e;
}

function fmtAge(s) {
  if (s === null || s === undefined) return "";
  s = Number(s);
  if (s < 90) return s.toFixed(0) + " s";
  if (s < 5400) return (s / 60).toFixed(0) + " min";
  return (s / 3600).toFixed(1) + " h";
}

function num(v, digits, unit) {
  return (typeof v === "number" && isFinite(v)) ? v.toFixed(digits) + (unit || "") : "–";
}

function vehicleLine(v) {
  if (!v) return "";
  const parts = [];
  if (v.link && v.link !== "connected") parts.push("link " + v.link);
  else {
    parts.push(v.mode || "?", v.armed ? "armed" : "disarmed");
    if (typeof v.relative_alt_m === "number") parts.push(v.relative_alt_m.toFixed(1) + " m");
  }
  if (v.stale) parts.unshift("STALE");
  return parts.join(", ");
}

// ---- the pool -------------------------------------------------------------------------------

function poolRows(doc) {
  const p = doc.pool, rows = [];
  const byInstance = new Map(doc.vehicles.map(v => [v.instance, v]));
  for (const h of p.held || []) {
    const owner = h.owner || ("? (lock file names " + (h.record_owner || "?") + " pid " + h.record_pid + ")");
    const s = h.sitl;
    const sitl = s ? ("managed: pid " + s.pid + (s.alive ? " running" : " gone")) : "no pid file";
    let pid = String(h.pid);
    if (h.kept_by && h.kept_by.length) pid += " exited; kept by " + h.kept_by.join(", ");
    rows.push({cls: h.in_pool ? "held" : "held outside", n: h.instance,
      state: h.in_pool ? "held" : "held (outside the pool)", holder: owner, pid, age: fmtAge(h.age_s), sitl,
      vehicle: vehicleLine(byInstance.get(h.instance))});
  }
  for (const h of p.broken || []) {
    rows.push({cls: "broken", n: h.instance, state: "BROKEN lease", holder: h.record_owner || "?", pid: String(h.pid),
      age: fmtAge(h.age_s), sitl: "its lock file was removed or replaced: may be leased twice", vehicle: ""});
  }
  for (const d of p.running_without_lease || []) {
    rows.push({cls: "unmanaged", n: d.instance,
      state: "running without a lease" + (d.in_pool === false ? " (outside the pool)" : ""), holder: "",
      pid: String(d.pid), age: "", sitl: "unmanaged: " + (d.executable || d.program || "?"),
      vehicle: vehicleLine(byInstance.get(d.instance))});
  }
  for (const t of p.ports_taken || []) {
    rows.push({cls: "outside", n: t.instance, state: "ports taken", holder: "", pid: "", age: "",
      sitl: (t.busy_ports || []).join("; "), vehicle: ""});
  }
  for (const n of p.free || []) {
    rows.push({cls: "free", n, state: "free", holder: "", pid: "", age: "", sitl: "", vehicle: ""});
  }
  rows.sort((a, b) => (Number(a.n) || 0) - (Number(b.n) || 0));
  for (const u of doc.unreadable || []) {
    rows.push({cls: "unreadable", n: "?", state: "UNREADABLE", holder: "", pid: "", age: "", sitl: u, vehicle: ""});
  }
  return rows;
}

function renderPool(doc) {
  const body = document.querySelector("#pool tbody");
  const rows = poolRows(doc).map(r => {
    const tr = el("tr", {class: r.cls, "data-instance": r.n},
      el("td", {class: "instance"}, r.n), el("td", {class: "state"}, r.state), el("td", {class: "holder"}, r.holder),
      el("td", {class: "pid"}, r.pid), el("td", {class: "age"}, r.age), el("td", {class: "sitl"}, r.sitl),
      el("td", {class: "vehicle-line"}, r.vehicle));
    return tr;
  });
  body.replaceChildren(...rows);
  const p = doc.pool;
  document.getElementById("pool-summary").textContent =
    "pool " + (p.pool || "?") + ": " + (p.held || []).length + " held, " + (p.free_count ?? "?") + " free";
  document.getElementById("where").textContent = "lock dir " + (p.lock_dir || "?");
}

function renderProblems(doc) {
  const items = [...(doc.pool.warnings || []).map(w => "warning: " + w),
    ...(doc.unreadable || []).map(u => "unreadable: " + u), ...(doc.errors || [])];
  document.getElementById("problems").replaceChildren(...items.map(t => el("li", {}, t)));
  document.getElementById("problems-section").hidden = items.length === 0;
}

function renderFleet(doc) {
  const f = doc.fleet, sec = document.getElementById("fleet-section");
  sec.hidden = !f;
  if (!f) return;
  document.getElementById("fleet-address").textContent = f.address || "";
  const held = new Map();
  for (const h of f.held || []) held.set(h.node_id, (held.get(h.node_id) || 0) + 1);
  document.querySelector("#fleet tbody").replaceChildren(...(f.nodes || []).map(x => el("tr", {},
    el("td", {}, String(x.node_id || "").slice(0, 8)), el("td", {}, x.host || ""), el("td", {}, x.sitl ?? ""),
    el("td", {}, x.error ? "?" : (x.pool ?? "")), el("td", {}, x.error ? "?" : (x.free_count ?? "")),
    el("td", {}, held.get(x.node_id) || 0), el("td", {}, x.error ? "no answer: " + x.error : (x.lock_dir || "")))));
}

// ---- vehicles -------------------------------------------------------------------------------

function trackOf(v) {
  let t = tracks.get(v.instance);
  if (!t) { t = {points: [], alts: [], last: null}; tracks.set(v.instance, t); }
  if (v.track) {
    t.points = v.track.points.slice(-TRACK_MAX); t.alts = v.track.alts.slice(-ALT_MAX); t.last = v.time;
  } else if (v.time !== t.last) {
    t.last = v.time;
    if (v.point) t.points.push(v.point);
    if (typeof v.relative_alt_m === "number") t.alts.push([v.time, v.relative_alt_m]);
    if (t.points.length > TRACK_MAX) t.points.splice(0, t.points.length - TRACK_MAX);
    if (t.alts.length > ALT_MAX) t.alts.splice(0, t.alts.length - ALT_MAX);
  }
  return t;
}

function drawMap(v, t) {
  const W = 200, H = 200, m = svg("svg", {class: "map", width: W, height: H, viewBox: `0 0 ${W} ${H}`});
  const home = v.home || t.points[0] || v.point;
  if (!home) {
    const tx = svg("text", {x: 8, y: H / 2, "font-size": 11, fill: "#888"});
    tx.textContent = "no position in the state file";
    m.append(tx);
    return m;
  }
  const kn = Math.PI / 180 * R, ke = kn * Math.cos(home[0] * Math.PI / 180);
  const ne = p => [(p[0] - home[0]) * kn, (p[1] - home[1]) * ke];
  const track = t.points.map(ne), wps = (v.waypoints || []).map(ne), fence = (v.fence || []).map(ne);
  const all = [[0, 0], ...track, ...wps, ...fence];
  let ext = 10;
  for (const [n, e] of all) ext = Math.max(ext, Math.abs(n), Math.abs(e));
  ext *= 1.15;
  const px = ([n, e]) => [(W / 2 + e / ext * (W / 2)).toFixed(1), (H / 2 - n / ext * (H / 2)).toFixed(1)];
  const grid = Math.pow(10, Math.floor(Math.log10(ext)));
  for (let g = -Math.floor(ext / grid) * grid; g <= ext; g += grid) {
    const [x] = px([0, g]), [, y] = px([g, 0]);
    m.append(svg("line", {x1: x, y1: 0, x2: x, y2: H, stroke: "#e4e8f0"}), svg("line", {x1: 0, y1: y, x2: W, y2: y, stroke: "#e4e8f0"}));
  }
  const label = svg("text", {x: 4, y: H - 4, "font-size": 10, fill: "#666"});
  label.textContent = "grid " + grid + " m, N up";
  m.append(label);
  if (fence.length > 1) m.append(svg("polygon", {points: fence.map(px).map(p => p.join(",")).join(" "), fill: "none", stroke: "#c33", "stroke-dasharray": "4 3"}));
  if (wps.length) {
    m.append(svg("polyline", {points: wps.map(px).map(p => p.join(",")).join(" "), fill: "none", stroke: "#e78a1e", "stroke-dasharray": "2 2"}));
    for (const w of wps) { const [x, y] = px(w); m.append(svg("circle", {cx: x, cy: y, r: 3, fill: "#e78a1e", class: "waypoint"})); }
  }
  if (track.length > 1) m.append(svg("polyline", {class: "track", points: track.map(px).map(p => p.join(",")).join(" "), fill: "none", stroke: "#1f77b4", "stroke-width": 1.5}));
  const [hx, hy] = px([0, 0]);
  m.append(svg("rect", {class: "home", x: hx - 4, y: hy - 4, width: 8, height: 8, fill: "none", stroke: "#000"}));
  if (v.point) { const [x, y] = px(ne(v.point)); m.append(svg("circle", {class: "position", cx: x, cy: y, r: 4, fill: v.armed ? "#d62728" : "#2ca02c"})); }
  return m;
}

function drawAlt(t) {
  const W = 200, H = 70, s = svg("svg", {class: "alt", width: W, height: H, viewBox: `0 0 ${W} ${H}`});
  const a = t.alts;
  const label = svg("text", {x: 4, y: 11, "font-size": 10, fill: "#666"});
  s.append(label);
  if (a.length < 2) { label.textContent = "altitude (m)"; return s; }
  const t0 = a[0][0], t1 = a[a.length - 1][0] || t0 + 1;
  let lo = 0, hi = 5;
  for (const [, y] of a) { lo = Math.min(lo, y); hi = Math.max(hi, y); }
  const pts = a.map(([x, y]) => [((x - t0) / Math.max(t1 - t0, 1) * (W - 4) + 2).toFixed(1), (H - 3 - (y - lo) / (hi - lo) * (H - 16)).toFixed(1)]);
  s.append(svg("polyline", {points: pts.map(p => p.join(",")).join(" "), fill: "none", stroke: "#1f77b4"}));
  label.textContent = "altitude, " + lo.toFixed(0) + "–" + hi.toFixed(0) + " m, last " + fmtAge(t1 - t0);
  return s;
}

function fact(dl, name, value, cls) {
  dl.append(el("dt", {}, name), el("dd", {class: name.replace(/\W+/g, "-") + (cls ? " " + cls : "")}, value));
}

function holderOf(doc, n) {
  const h = (doc.pool.held || []).find(x => x.instance === n);
  return h ? (h.owner || h.record_owner || "?") : null;
}

function renderVehicles(doc) {
  const box = document.getElementById("vehicles");
  const cards = doc.vehicles.map(v => {
    const t = trackOf(v);
    const holder = holderOf(doc, v.instance) || v.holder || "(no lease)";
    const card = el("div", {class: "vehicle" + (v.stale ? " stale" : ""), "data-instance": v.instance});
    card.append(el("h3", {}, "instance " + v.instance + " — ", el("span", {class: "holder"}, holder)));
    const dl = el("dl");
    fact(dl, "mode", v.mode || "?");
    fact(dl, "armed", v.armed ? "ARMED" : "disarmed", v.armed ? "on" : "off");
    fact(dl, "altitude", num(v.relative_alt_m, 1, " m"));
    fact(dl, "speed", num(v.groundspeed_m_s, 1, " m/s") + ", climb " + num(v.climb_m_s, 1, " m/s"));
    if (typeof v.heading_deg === "number") fact(dl, "heading", num(v.heading_deg, 0, "°"));
    fact(dl, "battery", (v.battery_pct ?? "–") + " %, " + num(v.battery_v, 2, " V"));
    fact(dl, "GPS", v.gps_fix_type === undefined ? "–" : "fix " + v.gps_fix_type + ", " + (v.gps_satellites ?? "?") + " sats");
    if (v.ready_to_arm !== undefined)
      fact(dl, "ready to arm", v.ready_to_arm ? "yes" : "no: " + (v.not_ready_because || "no reason given"), v.ready_to_arm ? "ready" : "notready");
    fact(dl, "link", (v.link || "?") + ", heartbeat " + num(v.heartbeat_age_s, 1, " s ago"));
    fact(dl, "state file", v.stale ? "STALE: " + (v.stale_reason || "") : fmtAge(v.age_s) + " old");
    const left = el("div", {}, dl, el("ul", {class: "texts", title: "the vehicle's last texts, newest first"},
      ...(v.texts || []).slice().reverse().map(x => el("li", {}, x))));
    const right = el("div", {}, drawMap(v, t), drawAlt(t));
    card.append(el("div", {class: "cols"}, left, right));
    card.append(detailsOf(v.instance));
    return card;
  });
  box.replaceChildren(...cards);
  document.getElementById("vehicle-count").textContent = doc.vehicles.length + " with a state file";
}

// one <details> per vehicle, kept across updates: its open state and picture stay; the
// picture is drawn again every 5 s while it is open
const details = new Map();
function detailsOf(n) {
  let d = details.get(n);
  if (!d) {
    d = {el: el("details", {}, el("summary", {}, "flight picture and kept logs")), stamp: 0};
    d.el.addEventListener("toggle", () => { if (d.el.open) fillDetails(n, true); });
    details.set(n, d);
  }
  if (d.el.open) fillDetails(n, false);
  return d.el;
}

function fillDetails(n, force) {
  const d = details.get(n), now = Date.now();
  let img = d.el.querySelector("img");
  if (!img) {
    img = el("img", {alt: "flight picture of instance " + n});
    d.el.append(img, el("div", {class: "kept"}));
  }
  if (force || now - d.stamp > 5000) {
    d.stamp = now;
    img.src = "/api/picture/" + Number(n) + ".png?t=" + now;
  }
  const mine = logs.filter(r => r.instance === n);
  d.el.querySelector("div.kept").replaceChildren(mine.length ? "kept logs:" : "no kept log of this instance",
    el("ul", {}, ...mine.map(r => el("li", {}, logLink(r), " ", r.label || "", " ", r.start_iso || ""))));
}

// ---- logs -----------------------------------------------------------------------------------

function logLink(r) {
  const a = el("a", {href: "#log-summary", class: "log-id"}, r.id);
  a.addEventListener("click", ev => { ev.preventDefault(); showSummary(r.id); });
  return a;
}

async function showSummary(id) {
  const pre = document.getElementById("log-summary");
  pre.hidden = false;
  pre.textContent = "reading " + id + "…";
  try {
    const r = await fetch("/api/logs/" + encodeURIComponent(id));
    const d = await r.json();
    pre.textContent = d.error ? id + ": " + d.error : id + "\n" + JSON.stringify(d.summary, null, 1);
  } catch (e) {
    pre.textContent = id + ": " + e;
  }
}

function renderLogs() {
  document.querySelector("#logs tbody").replaceChildren(...logs.slice().reverse().map(r => el("tr", {},
    el("td", {}, logLink(r)), el("td", {}, r.instance ?? ""), el("td", {}, r.holder || ""), el("td", {}, r.label || ""),
    el("td", {}, r.start_iso || ""), el("td", {}, ((r.size || 0) / 1e6).toFixed(1) + " MB"), el("td", {}, r.pinned ? "pinned" : ""),
    el("td", {}, r.kind || ""))));
  document.getElementById("log-count").textContent = logs.length + " kept";
}

// ---- the stream -----------------------------------------------------------------------------

function render(doc) {
  lastDoc = doc;
  renderProblems(doc); renderPool(doc); renderFleet(doc); renderVehicles(doc);
}

function connect() {
  const conn = document.getElementById("conn");
  const es = new EventSource("/events");
  es.addEventListener("state", ev => {
    lastMessage = Date.now();
    conn.textContent = "live"; conn.className = "conn ok";
    render(JSON.parse(ev.data));
  });
  es.addEventListener("logs", ev => { logs = JSON.parse(ev.data) || []; renderLogs(); });
  es.onerror = () => { conn.textContent = "reconnecting…"; conn.className = "conn bad"; };
}

setInterval(() => {
  if (lastMessage && Date.now() - lastMessage > 5000) {
    const conn = document.getElementById("conn");
    conn.textContent = "no update for " + fmtAge((Date.now() - lastMessage) / 1000); conn.className = "conn bad";
  }
}, 1000);

connect();
