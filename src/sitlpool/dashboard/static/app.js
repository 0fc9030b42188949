// sitlpool dashboard: every value from the server is put on the page with textContent or
// as an SVG attribute number, never as HTML. The page only reads: no request changes anything.
"use strict";

const SVGNS = "http://www.w3.org/2000/svg";
const R = 6378137.0;
const TRACK_MAX = 900, ALT_MAX = 300;
const tracks = new Map(); // instance -> {points: [[lat, lon]], alts: [[t, alt]], last: time}
const liveLogs = new Map(); // instance -> {name, points: [[t, value per series]]} of its live DataFlash log
const LOG_POINTS = 300;
let plots = []; // [{name, unit, series: ["CTUN.Alt", ...]}] as the server draws them
let tiles = null; // a map tile URL with {z}/{x}/{y}, or null: the maps are drawn offline
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

// map tiles (Web Mercator, {z}/{x}/{y}) under a map of half-width ext metres around home
function tileImages(home, ext, px) {
  const lat0 = home[0] * Math.PI / 180, W = 200;
  const mpp = 2 * ext / W; // metres per pixel of the map
  const z = Math.max(0, Math.min(19, Math.floor(Math.log2(156543.034 * Math.cos(lat0) / mpp))));
  const n = 2 ** z;
  const tx = lon => (lon + 180) / 360 * n;
  const ty = lat => (1 - Math.log(Math.tan(lat * Math.PI / 180) + 1 / Math.cos(lat * Math.PI / 180)) / Math.PI) / 2 * n;
  const lon = x => x / n * 360 - 180;
  const lat = y => Math.atan(Math.sinh(Math.PI * (1 - 2 * y / n))) * 180 / Math.PI;
  const dLat = ext / (Math.PI / 180 * R), dLon = ext / (Math.PI / 180 * R * Math.cos(lat0));
  const x0 = Math.floor(tx(home[1] - dLon)), x1 = Math.floor(tx(home[1] + dLon));
  const y0 = Math.floor(ty(home[0] + dLat)), y1 = Math.floor(ty(home[0] - dLat));
  const out = [];
  if ((x1 - x0 + 1) * (y1 - y0 + 1) > 16) return out; // never more than a few tiles a map
  const kn = Math.PI / 180 * R, ke = kn * Math.cos(lat0);
  const ne = (la, lo) => [(la - home[0]) * kn, (lo - home[1]) * ke];
  for (let x = x0; x <= x1; x++) {
    for (let y = y0; y <= y1; y++) {
      if (y < 0 || y >= n) continue;
      const xx = ((x % n) + n) % n;
      const [ax, ay] = px(ne(lat(y), lon(x))), [bx, by] = px(ne(lat(y + 1), lon(x + 1)));
      const href = tiles.replace("{z}", z).replace("{x}", xx).replace("{y}", y);
      out.push(svg("image", {class: "tile", href, x: ax, y: ay, width: (bx - ax).toFixed(1), height: (by - ay).toFixed(1), preserveAspectRatio: "none"}));
    }
  }
  return out;
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
  if (tiles) m.append(...tileImages(home, ext, ([n, e]) => [W / 2 + e / ext * (W / 2), H / 2 - n / ext * (H / 2)]));
  const grid = Math.pow(10, Math.floor(Math.log10(ext)));
  for (let g = -Math.floor(ext / grid) * grid; g <= ext; g += grid) {
    const [x] = px([0, g]), [, y] = px([g, 0]);
    m.append(svg("line", {x1: x, y1: 0, x2: x, y2: H, stroke: "#e4e8f0"}), svg("line", {x1: 0, y1: y, x2: W, y2: y, stroke: "#e4e8f0"}));
  }
  const label = svg("text", {x: 4, y: H - 4, "font-size": 10, fill: "#666"});
  label.textContent = "grid " + grid + " m, N up" + (tiles ? ", tiles" : "");
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

// ---- the live log's small plots --------------------------------------------------------------

function liveLogOf(v) {
  const lg = v.log;
  let l = liveLogs.get(v.instance);
  if (!lg || !lg.name) { liveLogs.delete(v.instance); return lg ? {error: lg.error, points: []} : null; }
  if (!l || l.name !== lg.name) { l = {name: lg.name, points: []}; liveLogs.set(v.instance, l); }
  if (lg.series) l.points = lg.series.slice(-LOG_POINTS);
  else if (lg.last && (!l.points.length || lg.last[0] > l.points[l.points.length - 1][0])) {
    l.points.push(lg.last);
    if (l.points.length > LOG_POINTS) l.points.splice(0, l.points.length - LOG_POINTS);
  }
  l.size = lg.size; l.error = lg.error;
  return l;
}

const COLOURS = ["#1f77b4", "#d62728", "#2ca02c"];

function drawPlot(p, l, names) {
  const W = 200, H = 56, s = svg("svg", {class: "plot", width: W, height: H, viewBox: `0 0 ${W} ${H}`, "data-plot": p.name});
  const cols = p.series.map(x => names.indexOf(x) + 1);
  const pts = l.points;
  const label = svg("text", {x: 3, y: 10, "font-size": 9.5, fill: "#555"});
  s.append(label);
  let lo = Infinity, hi = -Infinity;
  for (const q of pts) for (const c of cols) { const y = q[c]; if (typeof y === "number") { lo = Math.min(lo, y); hi = Math.max(hi, y); } }
  const last = pts.length ? pts[pts.length - 1] : null;
  const now = p.series.map(x => x.startsWith("ATT.") ? x.slice(4).toLowerCase() : x).map((x, i) =>
    (last && typeof last[cols[i]] === "number") ? x + " " + last[cols[i]].toFixed(Math.abs(last[cols[i]]) < 100 ? 1 : 0) : x + " –");
  label.textContent = p.name + ": " + now.join(", ") + " " + p.unit;
  if (pts.length < 2 || lo === Infinity) return s;
  if (hi - lo < 1e-6) { hi += 0.5; lo -= 0.5; }
  const t0 = pts[0][0], t1 = pts[pts.length - 1][0];
  const X = t => ((t - t0) / Math.max(t1 - t0, 1e-3) * (W - 4) + 2).toFixed(1);
  const Y = y => (H - 3 - (y - lo) / (hi - lo) * (H - 16)).toFixed(1);
  cols.forEach((c, i) => {
    const line = pts.filter(q => typeof q[c] === "number").map(q => X(q[0]) + "," + Y(q[c]));
    if (line.length > 1) s.append(svg("polyline", {class: "series", "data-series": p.series[i], points: line.join(" "), fill: "none", stroke: COLOURS[i % 3]}));
  });
  const scale = svg("text", {class: "scale", x: W - 3, y: H - 3, "font-size": 8.5, fill: "#999", "text-anchor": "end"});
  scale.textContent = lo.toFixed(1) + "…" + hi.toFixed(1) + " " + p.unit + ", " + fmtAge(t1 - t0);
  s.append(scale);
  return s;
}

function drawLivePlots(v) {
  const l = liveLogOf(v);
  const box = el("div", {class: "liveplots"});
  if (!l) { box.append(el("div", {class: "muted nolog"}, "no live log yet (a SITL opens its log when it arms)")); return box; }
  if (l.error && !l.name) { box.append(el("div", {class: "muted nolog"}, "live log: " + l.error)); return box; }
  const names = plots.flatMap(p => p.series);
  const last = l.points.length ? l.points[l.points.length - 1][0] : null;
  box.append(el("div", {class: "logname"}, "live log " + l.name + ", " + ((l.size || 0) / 1e6).toFixed(2) + " MB" +
    (last !== null ? ", log time " + last.toFixed(1) + " s" : "")));
  const grid = el("div", {class: "plotgrid"});
  for (const p of plots) grid.append(drawPlot(p, l, names));
  box.append(grid);
  return box;
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
    card.append(drawLivePlots(v));
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
    el("ul", {}, ...mine.map(r => el("li", {}, logLink(r), " ", pictureLink(r), " ", r.label || "", " ",
      el("span", {class: "brief"}, r.brief || "")))));
}

// ---- logs -----------------------------------------------------------------------------------

function logLink(r) {
  const a = el("a", {href: "#log-summary", class: "log-id"}, r.id);
  a.addEventListener("click", ev => { ev.preventDefault(); showSummary(r.id); });
  return a;
}

function pictureLink(r) {
  if (r.kind && r.kind !== "bin") return "";
  return el("a", {href: "/api/logs/" + encodeURIComponent(r.id) + "/picture.png", target: "_blank", rel: "noopener", class: "log-picture"}, "picture");
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

function fmtTime(unix) {
  if (typeof unix !== "number") return "";
  const d = new Date(unix * 1000), p = x => String(x).padStart(2, "0");
  return d.getFullYear() + "-" + p(d.getMonth() + 1) + "-" + p(d.getDate()) + " " + p(d.getHours()) + ":" + p(d.getMinutes()) + ":" + p(d.getSeconds());
}

function renderLogs() {
  // newest first, as the store lists them
  document.querySelector("#logs tbody").replaceChildren(...logs.map(r => el("tr", {"data-log": r.id, "data-instance": r.instance ?? ""},
    el("td", {}, logLink(r)), el("td", {}, r.instance ?? ""), el("td", {}, r.holder || ""), el("td", {}, r.label || ""),
    el("td", {}, fmtTime(r.start ?? r.end)), el("td", {}, ((r.size || 0) / 1e6).toFixed(1) + " MB"), el("td", {}, r.pinned ? "pinned" : ""),
    el("td", {class: "brief"}, r.brief || (r.kind === "bin" ? "summarising…" : r.kind || "")), el("td", {}, pictureLink(r)))));
  document.getElementById("log-count").textContent = logs.length + " kept";
  if (lastDoc) for (const n of details.keys()) if (details.get(n).el.open) fillDetails(n, false);
}

// ---- the stream -----------------------------------------------------------------------------

function render(doc) {
  lastDoc = doc;
  plots = doc.plots || plots;
  tiles = (typeof doc.tiles === "string" && doc.tiles) ? doc.tiles : null;
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
