// The page's inline stylesheet and script (report.html has no external resources).  The
// script reads the JSON blob in <script id="report-data"> and renders every section; it
// draws at most one page of table rows and the pre-merged timeline rectangles, so a 24k-node
// plan stays responsive.
#include "report/report_assets.h"

namespace autoshard {

const char* const kReportCss = R"CSS(
:root { --fg:#1d1d1f; --muted:#666; --line:#ddd; --accent:#1f5fa8; --bad:#c0392b; --bg:#fafafa; }
* { box-sizing: border-box; }
body { font: 13px/1.4 -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: var(--fg);
       background: var(--bg); margin: 0; padding: 16px 24px 48px; }
h1 { font-size: 20px; margin: 0 0 4px; }
h2 { font-size: 15px; margin: 28px 0 8px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
.sub { color: var(--muted); margin-bottom: 12px; }
.cards { display: flex; flex-wrap: wrap; gap: 8px; }
.card { background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: 8px 12px; min-width: 150px; }
.card .k { color: var(--muted); font-size: 11px; text-transform: uppercase; letter-spacing: .04em; }
.card .v { font-size: 16px; font-weight: 600; }
.card .v.bad { color: var(--bad); }
.warn { color: var(--bad); margin: 6px 0; }
.island { color: var(--muted); margin: 6px 0; }
table { border-collapse: collapse; background: #fff; font-size: 12px; }
th, td { border: 1px solid var(--line); padding: 3px 6px; text-align: left; white-space: nowrap; }
th { background: #f0f0f2; cursor: pointer; user-select: none; position: sticky; top: 0; }
th.sorted-asc::after { content: " \25B2"; } th.sorted-desc::after { content: " \25BC"; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.chosen td { background: #e6f4e6; font-weight: 600; }
.tablewrap { max-height: 480px; overflow: auto; border: 1px solid var(--line); display: inline-block; max-width: 100%; }
.row { display: flex; gap: 24px; flex-wrap: wrap; align-items: flex-start; }
.panel { background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: 8px; overflow: auto; }
#overview svg { max-width: 100%; height: auto; }
#overview g.node, #block-svg g.node { cursor: pointer; }
#overview g.node.active polygon, #overview g.node.active path { stroke: var(--accent); stroke-width: 3; }
#block-svg g.node.active polygon, #block-svg g.node.active path, #block-svg g.node.active ellipse { stroke: #000; stroke-width: 3; }
#block-svg { max-height: 720px; overflow: auto; flex: 1 1 600px; }
#strategy-panel { flex: 1 1 420px; max-height: 720px; }
.pager { margin: 6px 0; display: flex; gap: 8px; align-items: center; }
input[type=search] { padding: 4px 8px; width: 320px; border: 1px solid #bbb; border-radius: 4px; }
button { padding: 2px 10px; }
.muted { color: var(--muted); }
svg.chart text { font-size: 10px; fill: #555; }
.legend span { display: inline-block; margin-right: 10px; }
.legend i { display: inline-block; width: 12px; height: 12px; border: 1px solid #999; vertical-align: middle; margin-right: 3px; }
)CSS";

const char* const kReportJs = R"JS(
"use strict";
const D = JSON.parse(document.getElementById("report-data").textContent);
const $ = (id) => document.getElementById(id);
function el(tag, attrs, text) {
  const e = document.createElement(tag);
  if (attrs) for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (text !== undefined && text !== null) e.textContent = text;
  return e;
}
function fmtUs(us) {
  if (us === null || us === undefined) return "-";
  const a = Math.abs(us);
  if (a >= 1e6) return (us / 1e6).toFixed(3) + " s";
  if (a >= 1e3) return (us / 1e3).toFixed(3) + " ms";
  return us.toFixed(2) + " us";
}
// Costs are null where a choice is impossible (an infinite redistribution).
function fixed2(v) { return v === null || v === undefined ? "inf" : v.toFixed(2); }
function fmtBytes(b) {
  if (b === null || b === undefined) return "-";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0, v = b;
  while (Math.abs(v) >= 1024 && i < u.length - 1) { v /= 1024; i++; }
  return (i ? v.toFixed(2) : String(v)) + " " + u[i];
}
function fmtCount(n) {
  if (n >= 1e9) return (n / 1e9).toFixed(2) + " B";
  if (n >= 1e6) return (n / 1e6).toFixed(2) + " M";
  return String(n);
}

// A sortable, optionally searchable and paginated table.  cols: [{name, num, fmt}].
function makeTable(host, cols, rows, opt) {
  opt = opt || {};
  const state = { rows: rows, view: rows, sort: -1, desc: false, page: 0, q: "" };
  const pageSize = opt.pageSize || 0;
  host.textContent = "";
  let search = null, count = null, pager = null;
  if (opt.search) {
    search = el("input", { type: "search", placeholder: opt.search, id: opt.id + "-search" });
    count = el("span", { class: "muted", id: opt.id + "-count" });
    const bar = el("div", { class: "pager" });
    bar.append(search, count);
    host.append(bar);
  }
  const wrap = el("div", { class: "tablewrap" });
  const table = el("table", { id: opt.id });
  const thead = el("thead"), tbody = el("tbody");
  const hr = el("tr");
  cols.forEach((c, i) => {
    const th = el("th", null, c.name);
    th.addEventListener("click", () => {
      if (state.sort === i) state.desc = !state.desc; else { state.sort = i; state.desc = !!c.num; }
      apply(false);
    });
    hr.append(th);
  });
  thead.append(hr);
  table.append(thead, tbody);
  wrap.append(table);
  host.append(wrap);
  if (pageSize) {
    pager = el("div", { class: "pager", id: opt.id + "-pager" });
    host.append(pager);
  }
  function apply(resetPage) {
    const q = state.q.toLowerCase();
    state.view = q ? state.rows.filter((r) => r.some((v) => v !== null && String(v).toLowerCase().includes(q)))
                   : state.rows.slice();
    if (state.sort >= 0) {
      const i = state.sort, s = state.desc ? -1 : 1, isNum = !!cols[i].num;
      state.view.sort((a, b) => {
        const x = a[cols[i].key !== undefined ? cols[i].key : i], y = b[cols[i].key !== undefined ? cols[i].key : i];
        if (isNum) return s * ((x === null ? -Infinity : x) - (y === null ? -Infinity : y));
        return s * String(x).localeCompare(String(y));
      });
    }
    Array.from(hr.children).forEach((th, k) => {
      th.className = k === state.sort ? (state.desc ? "sorted-desc" : "sorted-asc") : "";
    });
    if (resetPage) state.page = 0;
    render();
  }
  function render() {
    tbody.textContent = "";
    const n = state.view.length;
    const pages = pageSize ? Math.max(1, Math.ceil(n / pageSize)) : 1;
    state.page = Math.min(state.page, pages - 1);
    const lo = pageSize ? state.page * pageSize : 0, hi = pageSize ? Math.min(n, lo + pageSize) : n;
    const frag = document.createDocumentFragment();
    for (let r = lo; r < hi; r++) {
      const row = state.view[r], tr = el("tr");
      if (opt.rowClass) { const c = opt.rowClass(row); if (c) tr.className = c; }
      cols.forEach((c, i) => {
        const v = row[c.key !== undefined ? c.key : i];
        const td = el("td", c.num ? { class: "num" } : null, c.fmt ? c.fmt(v, row) : (v === null ? "-" : String(v)));
        tr.append(td);
      });
      if (opt.onRow) tr.addEventListener("click", () => opt.onRow(row));
      frag.append(tr);
    }
    tbody.append(frag);
    if (count) count.textContent = n + " of " + state.rows.length + " rows";
    if (pager) {
      pager.textContent = "";
      const prev = el("button", { id: opt.id + "-prev" }, "prev"), next = el("button", { id: opt.id + "-next" }, "next");
      prev.disabled = state.page === 0; next.disabled = state.page >= pages - 1;
      prev.onclick = () => { state.page--; render(); };
      next.onclick = () => { state.page++; render(); };
      pager.append(prev, el("span", { class: "muted" }, "page " + (state.page + 1) + " / " + pages), next);
    }
  }
  if (search) search.addEventListener("input", () => { state.q = search.value; apply(true); });
  apply(true);
  return state;
}

function card(host, key, value, id, data, bad) {
  const c = el("div", { class: "card" });
  c.append(el("div", { class: "k" }, key));
  const v = el("div", { class: "v" + (bad ? " bad" : ""), id: id }, value);
  if (data) for (const k in data) v.dataset[k] = data[k];
  c.append(v);
  host.append(c);
}

function renderHeader() {
  const h = D.header, s = D.simulation;
  $("title").textContent = "autoshard plan: " + h.model;
  $("subtitle").textContent = "mesh " + h.mesh + " of " + h.hardware + " (" + h.devices + " devices), comm model " +
    h.comm_model + ", " + h.graph_nodes + " graph nodes";
  const c = $("cards");
  card(c, "simulated step", fmtUs(s.step_us), "sim-step", { us: s.step_us });
  if (h.objective === "overlap")
    card(c, "overlap-aware objective", fmtUs(h.objective_us), "objective", { us: h.objective_us });
  card(c, "additive objective", fmtUs(h.additive_us), "additive", { us: h.additive_us });
  card(c, "compute", fmtUs(s.compute_us), "compute", { us: s.compute_us });
  card(c, "communication", fmtUs(s.comm_us), "comm", { us: s.comm_us });
  card(c, "exposed comm", fmtUs(s.exposed_comm_us), "exposed", { us: s.exposed_comm_us });
  card(c, "MFU", (100 * s.mfu).toFixed(1) + " %", "mfu", { value: s.mfu });
  const lim = h.memory_limit_bytes;
  card(c, "peak memory / device", fmtBytes(h.peak_memory_bytes) + (lim > 0 ? " of " + fmtBytes(lim) : ""), "peak-mem",
       { bytes: h.peak_memory_bytes }, lim > 0 && h.peak_memory_bytes > lim);
  card(c, "simulated peak (with buffers)", fmtBytes(s.peak_memory_bytes), "sim-peak-mem", { bytes: s.peak_memory_bytes },
       lim > 0 && s.peak_memory_bytes > lim);
  card(c, "solver status", h.status + (h.checked ? " (verified)" : ""), "status");
  card(c, "lower bound", fmtUs(h.lower_bound_us), "lower-bound", { us: h.lower_bound_us });
  card(c, "gap", h.gap === null ? "-" : (100 * h.gap).toFixed(4) + " %", "gap");
  card(c, "parameters", h.parameter_tensors + " tensors, " + fmtCount(h.parameter_elements) + " elements", "param-count",
       { count: h.parameter_tensors, elements: h.parameter_elements });
  for (const w of h.warnings) $("warnings").append(el("div", { class: "warn" }, "warning: " + w));
  for (const isl of D.islands) {
    const where = isl.sources.length ? " (data-dependent code at " + isl.sources.join(", ") + ")" : "";
    $("islands").append(el("div", { class: "island" }, "eager island: " + (isl.module || "the whole model") + " — " + isl.nodes +
      " planned nodes, " + fmtUs(isl.compute_us) + " of compute, run eagerly on their planned placements" + where));
  }
}

let activeGroup = null;
function showGroup(k) {
  const grp = D.graph.groups[k];
  if (!grp) return;
  document.querySelectorAll("#overview g.node").forEach((g) => g.classList.toggle("active", g.id === "g" + k));
  activeGroup = k;
  $("block-title").textContent = grp.title + " — " + grp.nodes_per_block + " nodes per block" +
    (grp.count > 1 ? ", " + grp.count + " identical blocks collapsed (same strategies): " + grp.keys.join(", ") : "") +
    (grp.note ? " — " + grp.note : "");
  const legend = $("legend");
  legend.textContent = "";
  for (const [pl, colour] of grp.legend || []) {
    const item = el("span"), swatch = el("i");
    swatch.style.background = colour;
    item.append(swatch, document.createTextNode(pl));
    legend.append(item);
  }
  const host = $("block-svg");
  host.innerHTML = grp.svg || "<p class='muted'>" + (grp.note || "not drawn") + "</p>";
  host.querySelectorAll("g.node").forEach((g) => {
    if (!/^n\d+$/.test(g.id)) return;
    g.addEventListener("click", () => showStrategies(Number(g.id.slice(1))));
  });
}

function showStrategies(i) {
  const panel = $("strategy-panel");
  panel.textContent = "";
  document.querySelectorAll("#block-svg g.node").forEach((g) => g.classList.toggle("active", g.id === "n" + i));
  const row = NODE_BY_INDEX.get(i);
  const t = D.strategies[String(i)];
  panel.append(el("h3", { id: "strategy-title" }, row ? row[1] + " (" + row[2] + ")" : "node " + i));
  if (row) panel.append(el("div", { class: "muted" }, "module " + (row[3] || "-") + ", " + row[4] + "; chosen " + row[5] +
                            (row[6] ? " from [" + row[6] + "]" : "")));
  if (!t) { panel.append(el("p", { class: "muted" }, "no strategy table: this node is not in a drawn block")); return; }
  panel.append(el("div", { class: "muted" }, t.total + " strategies" + (t.rows.length < t.total ? ", cheapest " + t.rows.length + " shown" : "") +
                   "; costs in us given the neighbours' chosen strategies"));
  const host = el("div");
  panel.append(host);
  makeTable(host, [
    { name: "#", num: true }, { name: "output" }, { name: "inputs" },
    { name: "compute", num: true, fmt: fixed2 }, { name: "in comm", num: true, fmt: fixed2 },
    { name: "out comm", num: true, fmt: fixed2 }, { name: "total", num: true, fmt: fixed2 },
    { name: "chosen", fmt: (v) => (v ? "yes" : "") },
  ], t.rows, { id: "strategy-table", rowClass: (r) => (r[7] ? "chosen" : "") });
}

function renderGraph() {
  $("overview").innerHTML = D.graph.overview_svg;
  document.querySelectorAll("#overview g.node").forEach((g) => {
    if (/^g\d+$/.test(g.id)) g.addEventListener("click", () => showGroup(Number(g.id.slice(1))));
  });
  // Start on the largest repeated group (the representative layer).
  let best = 0;
  D.graph.groups.forEach((g, k) => {
    const b = D.graph.groups[best];
    if (g.svg && (!b.svg || g.count * g.nodes_per_block > b.count * b.nodes_per_block)) best = k;
  });
  showGroup(best);
}

const usCol = (name) => ({ name: name, num: true, fmt: (v) => fmtUs(v) });
function renderBreakdowns() {
  const cols = [{ name: "key" }, { name: "nodes", num: true }, usCol("compute"), usCol("comm"), usCol("total")];
  makeTable($("by-op"), cols, D.breakdown.op, { id: "by-op-table" });
  makeTable($("by-module"), cols, D.breakdown.module, { id: "by-module-table", search: "filter modules" });
  makeTable($("by-phase"), cols, D.breakdown.phase, { id: "by-phase-table" });
  makeTable($("hotspots"), [
    { name: "example consumer" }, { name: "module" }, { name: "consumer<-producer" }, { name: "input" },
    { name: "from" }, { name: "to" }, { name: "collectives" }, { name: "count", num: true },
    usCol("each"), usCol("total"), { name: "bytes each", num: true, fmt: (v) => fmtBytes(v) },
  ], D.hotspots, { id: "hotspot-table" });
}

const SVGNS = "http://www.w3.org/2000/svg";
function sv(tag, attrs) {
  const e = document.createElementNS(SVGNS, tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  return e;
}
function axisX(svg, x0, w, y, span) {
  for (let k = 0; k <= 5; k++) {
    const x = x0 + (w * k) / 5;
    svg.append(sv("line", { x1: x, x2: x, y1: y, y2: y + 4, stroke: "#999" }));
    const t = sv("text", { x: x, y: y + 14, "text-anchor": "middle" });
    t.textContent = fmtUs((span * k) / 5);
    svg.append(t);
  }
}

function renderMemory() {
  const m = D.memory, pts = m.points, W = 1000, H = 220, L = 70, T = 10, PW = W - L - 10, PH = H - 40;
  const span = Math.max(D.timeline.step_us || 1, 1e-9);
  let top = Math.max(m.sim_peak_bytes, m.plan_peak_bytes, 1);
  if (m.limit_bytes > 0) top = Math.max(top, m.limit_bytes);
  top *= 1.05;
  const svg = sv("svg", { viewBox: "0 0 " + W + " " + H, width: W, height: H, class: "chart", id: "memory-svg" });
  const X = (t) => L + (PW * t) / span, Y = (b) => T + PH - (PH * b) / top;
  let d = "";
  pts.forEach((p, k) => {
    d += (k ? " H" + X(p[0]).toFixed(1) + " V" : "M" + X(p[0]).toFixed(1) + " ") + Y(p[1]).toFixed(1);
  });
  if (pts.length) d += " H" + X(span).toFixed(1);
  svg.append(sv("path", { d: d, fill: "none", stroke: "#1f5fa8", "stroke-width": 1.5 }));
  if (m.limit_bytes > 0) {
    svg.append(sv("line", { x1: L, x2: L + PW, y1: Y(m.limit_bytes), y2: Y(m.limit_bytes), stroke: "#c0392b", "stroke-dasharray": "6 4", id: "memory-limit" }));
    const t = sv("text", { x: L + PW - 4, y: Y(m.limit_bytes) - 4, "text-anchor": "end" });
    t.textContent = "limit " + fmtBytes(m.limit_bytes);
    svg.append(t);
  }
  for (let k = 0; k <= 4; k++) {
    const b = (top * k) / 4, t = sv("text", { x: L - 4, y: Y(b) + 3, "text-anchor": "end" });
    t.textContent = fmtBytes(Math.round(b));
    svg.append(t, sv("line", { x1: L, x2: L + PW, y1: Y(b), y2: Y(b), stroke: "#eee" }));
  }
  axisX(svg, L, PW, T + PH, span);
  $("memory").append(svg);
}

/// Draws lanes of [start, end, label, ...] rectangles over [0, span] into $(host):
/// lanes = [{name, rects}], colour(lane index, rect) and label(rect) per rectangle.
function drawLanes(host, id, lanes, span, colour, label) {
  const W = 1000, L = 90, PW = W - L - 10, RH = 22;
  const H = 20 + lanes.length * (RH + 8) + 20;
  const svg = sv("svg", { viewBox: "0 0 " + W + " " + H, width: W, height: H, class: "chart", id: id });
  lanes.forEach((s, k) => {
    const y = 10 + k * (RH + 8);
    const t = sv("text", { x: L - 6, y: y + RH / 2 + 3, "text-anchor": "end" });
    t.textContent = s.name;
    svg.append(t, sv("rect", { x: L, y: y, width: PW, height: RH, fill: "#f3f3f3" }));
    for (const r of s.rects) {
      const x = L + (PW * r[0]) / span, w = Math.max(0.5, (PW * (r[1] - r[0])) / span);
      const rect = sv("rect", { x: x.toFixed(2), y: y, width: w.toFixed(2), height: RH, fill: colour(k, r),
                                stroke: "#fff", "stroke-width": 0.3 });
      const title = sv("title", {});
      title.textContent = label(r) + ": " + fmtUs(r[0]) + " - " + fmtUs(r[1]);
      rect.append(title);
      svg.append(rect);
    }
  });
  axisX(svg, L, PW, 10 + lanes.length * (RH + 8), span);
  host.append(svg);
}

function renderTimeline() {
  const tl = D.timeline;
  drawLanes($("timeline"), "timeline-svg", tl.streams, Math.max(tl.step_us || 1, 1e-9),
            (k) => (k === 0 ? "#4e79a7" : "#e15759"),
            (r) => r[2] + (r[3] > 1 ? " (+" + (r[3] - 1) + " more)" : ""));
}

const NODE_BY_INDEX = new Map(D.nodes.map((r) => [r[0], r]));
function renderTables() {
  makeTable($("params"), [
    { name: "parameter" }, { name: "shape" }, { name: "placement" }, { name: "parallelism" },
    { name: "local bytes", num: true, fmt: (v) => fmtBytes(v) }, { name: "global bytes", num: true, fmt: (v) => fmtBytes(v) },
  ], D.parameters, { id: "param-table", search: "filter parameters" });
  makeTable($("nodes"), [
    { name: "#", num: true }, { name: "node" }, { name: "op" }, { name: "module" }, { name: "phase" },
    { name: "output" }, { name: "inputs" }, usCol("compute"), usCol("input comm"), usCol("sim start"),
  ], D.nodes, { id: "node-table", search: "search nodes (name, op, module, placement)", pageSize: 100,
                onRow: (r) => { showStrategies(r[0]); $("strategy-panel").scrollIntoView(); } });
}

function renderPipeline() {
  const p = D.pipeline;
  if (!p) return;
  $("pipeline-sub").textContent = p.schedule + ", " + p.P + " pp ranks x " + p.v + " stage(s) each, " + p.M +
    " microbatches: pipelined step " + fmtUs(p.step_us) + " (bubble " + fmtUs(p.bubble_us) + ", lower bound " +
    fmtUs(p.lower_bound_us) + ", gap " + (100 * p.gap).toFixed(2) + " %); the schedule below, run op by op, ends at " +
    fmtUs(p.timeline_us) + ".  The rest of the page shows stage " + p.shown_stage + " (the busiest rank's).";
  makeTable($("pipeline-stages"), [
    { name: "stage", num: true }, { name: "pp rank", num: true }, { name: "layers" },
    usCol("per microbatch"), usCol("p2p"), usCol("once per step"), { name: "in flight", num: true },
    { name: "rank memory", num: true, fmt: (v) => fmtBytes(v) },
  ], p.stages, { id: "pipeline-table" });
  drawLanes($("pipeline-timeline"), "pipeline-svg", p.ranks, Math.max(p.timeline_us || 1, 1e-9),
            (k, r) => (r[3] ? "#e15759" : "#4e79a7"), (r) => r[2]);
}

renderHeader();
renderPipeline();
renderGraph();
renderBreakdowns();
renderMemory();
renderTimeline();
renderTables();
document.body.dataset.ready = "1";
)JS";

}  // namespace autoshard
