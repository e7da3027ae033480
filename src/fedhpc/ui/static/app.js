// fedhpc dashboard: three read-only pages over /api/ (this process reads the daemon's REST API).
// Libraries (vendored, pinned): Chart.js for the scatter, vis-timeline for the Gantt chart.
"use strict";

const POLL_MS = 3000;
const HISTORY_MS = 15000;
const MAX_CHILDREN_SHOWN = 64;  // a group's page of children (ui/data.py MAX_CHILDREN)

// No red among the sites' colours: red means failure on this page (failed bars, offline sites).
const SITE_COLORS = ["#2f6fde", "#b7791f", "#8e44ad", "#16a085", "#7f8c8d", "#1d4ed8", "#2a9d4b"];

const state = { page: null, timers: [], chart: null, timeline: null, bars: null, lanes: null, selected: null,
                eventSeq: null, events: [], siteColor: {}, failures: new Map(),
                tz: localStorage.getItem("fedhpc_tz") === "local" ? "local" : "utc" };

function $(sel) { return document.querySelector(sel); }

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null) continue;
    if (k === "class") node.className = v;
    else if (k === "dataset") Object.assign(node.dataset, v);
    else if (k === "onclick") node.addEventListener("click", v);
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c ?? "")));
  return node;
}

// The token: taken once from the printed URL's ?token= into sessionStorage (per origin, port
// included; it survives a reload), then removed from the address bar. Sent as a header on each
// read: no cookie, since cookies ignore ports and would go to any server on 127.0.0.1.
const TOKEN_KEY = "fedhpc_token";
(function takeToken() {
  const params = new URLSearchParams(location.search);
  const given = params.get("token");
  if (given === null) return;
  sessionStorage.setItem(TOKEN_KEY, given);
  params.delete("token");
  const rest = params.toString();
  history.replaceState(history.state, "", location.pathname + (rest ? `?${rest}` : "") + location.hash);
})();

async function api(path) {
  const token = sessionStorage.getItem(TOKEN_KEY) || "";
  let resp;
  try {
    resp = await fetch(path, { cache: "no-store", headers: { "X-Fedhpc-Token": token } });
  } catch (e) {  // no answer at all: this page's own server (`fedhpc ui`) has stopped
    const err = new Error("the dashboard's server (`fedhpc ui`) does not answer");
    err.hint = "start `fedhpc ui` again and open the URL it prints (each run has a new token)";
    err.code = "ui_stopped";
    throw err;
  }
  let body = null;
  try { body = await resp.json(); } catch (e) { body = { message: `HTTP ${resp.status}` }; }
  if (resp.status === 403) {  // the gate's own answer: no token, or another run's
    const err = new Error(body.message || "this dashboard needs its token");
    err.hint = body.hint || "open the URL `fedhpc ui` printed";
    err.code = body.code || "no_token";
    throw err;
  }
  if (!resp.ok) {  // the typed error {code, message, hint}, as the daemon answered it
    const err = new Error(body.message || `HTTP ${resp.status}`);
    err.hint = body.hint || "";
    err.code = body.code || "error";
    err.status = resp.status;
    throw err;
  }
  return body;
}

// What a failed read says, on the banner and in the status corner: the daemon down, the
// token missing, this page's server gone, or the daemon's own typed answer.
function daemonDown(err) { return (err.code || "").startsWith("daemon_"); }

function banner(err) {
  const b = $("#banner");
  if (!err) { b.hidden = true; b.textContent = ""; return; }
  b.hidden = false;
  b.dataset.code = err.code || "error";
  const what = daemonDown(err) ? `The daemon could not be read: ${err.message}` : err.message;
  b.textContent = what + (err.hint ? ` (${err.hint})` : "");
}

function statusOf(err) {
  if (err.code === "no_token") return "token missing";
  if (err.code === "wrong_token") return "wrong token";
  if (err.code === "ui_stopped") return "dashboard stopped";
  if (daemonDown(err)) return "daemon unreachable";
  return `error: ${err.code}`;
}

function setStatus(text) { $("#status").textContent = text; }

// One time zone everywhere, named with every time: UTC by default, the browser's own when
// the person picks "local" (kept in localStorage: a preference, not data).
function pad(n) { return String(n).padStart(2, "0"); }

function offsetName(d) {  // the browser's zone at d, as "UTC-05:00"
  const m = -d.getTimezoneOffset();
  return `UTC${m < 0 ? "-" : "+"}${pad(Math.floor(Math.abs(m) / 60))}:${pad(Math.abs(m) % 60)}`;
}

function fields(d) {
  return state.tz === "utc"
    ? [d.getUTCFullYear(), d.getUTCMonth() + 1, d.getUTCDate(), d.getUTCHours(), d.getUTCMinutes(), d.getUTCSeconds()]
    : [d.getFullYear(), d.getMonth() + 1, d.getDate(), d.getHours(), d.getMinutes(), d.getSeconds()];
}

function zoneOf(d) { return state.tz === "utc" ? "UTC" : offsetName(d); }

function when(iso) {  // "2026-12-01 12:03:04 UTC"
  if (!iso) return "-";
  const d = new Date(iso);
  const [y, mo, da, h, mi, se] = fields(d);
  return `${y}-${pad(mo)}-${pad(da)} ${pad(h)}:${pad(mi)}:${pad(se)} ${zoneOf(d)}`;
}

function clock(d) {  // "12:03:04 UTC"
  const [, , , h, mi, se] = fields(d);
  return `${pad(h)}:${pad(mi)}:${pad(se)} ${zoneOf(d)}`;
}

function duration(seconds) {
  const s = Math.max(0, Math.round(seconds));
  if (s < 120) return `${s} s`;
  if (s < 7200) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

// The Gantt's axis in the same zone, the zone named in its date labels.
function axisOptions() {
  const zone = state.tz === "utc" ? "[UTC]" : "[UTC]Z";
  const moment = state.tz === "utc" ? (d) => vis.moment(d).utc() : (d) => vis.moment(d);
  return { moment, format: { majorLabels: {
    millisecond: `HH:mm:ss ${zone}`, second: `D MMMM HH:mm ${zone}`, minute: `ddd D MMMM ${zone}`,
    hour: `ddd D MMMM ${zone}`, weekday: "MMMM YYYY", day: "MMMM YYYY", week: "MMMM YYYY",
    month: "YYYY", year: "" } } };
}

function setZone(tz) {
  state.tz = tz === "local" ? "local" : "utc";
  localStorage.setItem("fedhpc_tz", state.tz);
  document.body.dataset.tz = state.tz;
  $("#tz").value = state.tz;
  for (const z of document.querySelectorAll(".zone")) z.textContent = zoneOf(new Date());
  if (state.timeline) state.timeline.setOptions(axisOptions());
  for (const [fn] of PAGES[state.page] || []) tick(fn, state.page);  // redrawn at once
}

function age(seconds) {
  if (seconds === null || seconds === undefined) return "never";
  return seconds < 120 ? `${Math.round(seconds)}s ago` : `${Math.round(seconds / 60)}m ago`;
}

function colorOf(site) {
  if (!(site in state.siteColor)) {
    state.siteColor[site] = SITE_COLORS[Object.keys(state.siteColor).length % SITE_COLORS.length];
  }
  return state.siteColor[site];
}

// ---------------------------------------------------------------------------------- federation
async function refreshFederation() {
  const view = await api("/api/federation");
  // Each site's scheduler commands in the last minute against its cap (`max_commands_per_min`).
  const calls = await api("/api/health").then((h) => h.remote_calls || {}, () => ({}));
  const pace = (site) => {
    const c = calls[site];
    if (!c || c.cap_per_min === undefined) return el("td", { class: "num pace" }, "-");
    return el("td", { class: "num pace", title: `most in any minute: ${c.peak_per_min}; ` +
      `commands waited ${c.waited_s} s under the cap` }, `${c.per_min}/${c.cap_per_min}`);
  };
  // The partitions a job may use (a profile's blocked ones, e.g. interactive, are not in the
  // view): the scatter counts the same ones as this table.
  state.offered = Object.fromEntries(view.sites.map((s) => [s.site, new Set(s.partitions.map((p) => p.name))]));
  const body = $("#fed-table tbody");
  body.replaceChildren();
  for (const s of view.sites) {
    const gpuParts = s.partitions.filter((p) => p.total_gpus > 0);
    const free = s.partitions.reduce((n, p) => n + p.free_gpus, 0);
    const total = s.partitions.reduce((n, p) => n + p.total_gpus, 0);
    const health = el("span", { class: `health-${s.health}` }, s.health);
    const fresh = el("span", { class: s.stale ? "stale" : "" }, age(s.age_s) + (s.stale ? " (stale)" : ""));
    body.append(el("tr", { class: "site-row", dataset: { site: s.site } },
      el("td", {}, s.site), el("td", {}, `${s.partitions.length} partition${s.partitions.length === 1 ? "" : "s"}`),
      el("td", {}, [...new Set(gpuParts.map((p) => p.accelerator))].join(", ") || "-"),
      el("td", { class: "num gpus" }, `${free}/${total}`),
      el("td", { class: "num cpus" }, `${s.partitions.reduce((n, p) => n + p.free_cpus, 0)}/` +
                                       `${s.partitions.reduce((n, p) => n + p.total_cpus, 0)}`),
      el("td", { class: "num pending" }, s.partitions.reduce((n, p) => n + p.pending_jobs, 0)),
      el("td", { class: "num running" }, s.partitions.reduce((n, p) => n + p.running_jobs, 0)),
      el("td", { class: "fresh" }, fresh), pace(s.site), el("td", { class: "health" }, health)));
    for (const p of s.partitions) {
      body.append(el("tr", { class: "partition-row", dataset: { site: s.site, partition: p.name } },
        el("td", {}, ""), el("td", {}, p.name), el("td", {}, p.accelerator || "-"),
        el("td", { class: "num gpus" }, `${p.free_gpus}/${p.total_gpus}`),
        el("td", { class: "num cpus" }, `${p.free_cpus}/${p.total_cpus}`),
        el("td", { class: "num pending" }, p.pending_jobs),
        el("td", { class: "num running" }, p.running_jobs),
        el("td", {}, p.available ? "" : "down"), el("td", {}), el("td", {}, p.blocked ? "blocked" : "")));
    }
    if (s.error) body.append(el("tr", {}, el("td", { colspan: 10, class: "wrap" }, `${s.site}: ${s.error}`)));
  }
  $("#fed-taken").textContent = `taken ${when(view.taken_at)}`;
  drawAllocation(view);  // views.js: the same read, another picture
}

function median(values) {
  const v = [...values].sort((a, b) => a - b);
  if (!v.length) return 0;
  const mid = Math.floor(v.length / 2);
  return v.length % 2 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
}

async function refreshScatter() {
  const hist = await api("/api/history?limit=120");
  const datasets = [];
  const newest = {};
  const merged = [];  // per site: its probes and the points they make
  for (const [site, points] of Object.entries(hist.sites)) {
    const offered = (state.offered || {})[site];
    const xy = points.map((pt) => {
      const gpu = pt.partitions.filter((p) => p.total_gpus > 0 && (!offered || offered.has(p.name)));
      return { x: gpu.reduce((n, p) => n + p.free_gpus, 0), y: gpu.reduce((n, p) => n + p.pending_jobs, 0) };
    });
    if (xy.length) newest[site] = xy[xy.length - 1];
    // Probes that saw the same numbers are one point, its area growing with their count.
    const seen = new Map();
    for (const p of xy) {
      const key = `${p.x},${p.y}`;
      seen.set(key, { ...p, probes: ((seen.get(key) || {}).probes || 0) + 1 });
    }
    const color = colorOf(site);
    const radius = (c) => 3 + 2 * Math.sqrt(((c.raw || {}).probes || 1) - 1);
    // Hovered, a point keeps its size (Chart.js's hover radius is 4 px whatever the point's:
    // a merged point shrank under the pointer, and away from its centre lost the hover).
    datasets.push({ label: site, data: [...seen.values()], backgroundColor: color + "55", borderColor: color,
                    pointRadius: radius, pointHoverRadius: (c) => radius(c) + 2 });
    if (xy.length) {
      datasets.push({ label: `${site} median`, data: [{ x: median(xy.map((p) => p.x)), y: median(xy.map((p) => p.y)) }],
                      backgroundColor: color, borderColor: "#000", pointRadius: 9, pointHoverRadius: 11, pointStyle: "rectRot" });
    }
    merged.push(`${site} ${xy.length} probe${xy.length === 1 ? "" : "s"} as ${seen.size} point${seen.size === 1 ? "" : "s"}`);
  }
  // In words: every probe is drawn, however few points they make.
  $("#scatter-note").textContent = merged.length ? `Drawn: ${merged.join(" · ")}.` : "No probes yet.";
  if (!state.chart) {
    state.chart = new Chart($("#scatter"), {
      type: "scatter", data: { datasets },
      options: { animation: false, maintainAspectRatio: false,
        scales: { x: { title: { display: true, text: "free GPUs" }, beginAtZero: true },
                  y: { title: { display: true, text: "pending jobs" }, beginAtZero: true } },
        plugins: { legend: { position: "bottom", labels: { filter: (i) => !i.text.endsWith(" median") } },
                   tooltip: { callbacks: { label: (c) => `${c.dataset.label}: ${c.raw.x} free GPUs, ${c.raw.y} pending` +
                     (c.raw.probes ? ` (${c.raw.probes} probe${c.raw.probes === 1 ? "" : "s"})` : " (median)") } } } },
    });
  } else {
    state.chart.data.datasets = datasets;
    state.chart.update("none");
  }
  // Drawn: each site's newest point {x: free GPUs, y: pending}, for a reader (or a test).
  $("#scatter").dataset.newest = JSON.stringify(newest);
  state.history = hist;
  drawQueueHistory(hist);  // views.js: the same probes, one partition over time
}

// Each wait estimator's recent error per site and partition (bias > 0: it predicts longer waits
// than happen), and where `auto` uses it; the rule is the daemon's (ui/estimators.py).
async function refreshEstimators() {
  const { estimators, min_samples: floor, judged } = await api("/api/estimators");
  state.judged = judged || [];  // each judged job's predicted and realised wait (queue history)
  if (state.history) drawQueueHistory(state.history);
  const body = $("#est-table tbody");
  if (!estimators.length) {
    body.replaceChildren(el("tr", { class: "est-empty" }, el("td", { colspan: 7, class: "wrap" },
      "No finished jobs judged yet: an estimator's error shows once a job fedhpc placed has " +
      "started and its site's accounting reported how long it waited.")));
    return;
  }
  const secs = (s) => `${s.toFixed(1)} s`;  // as the daemon rounds it (0.1 s)
  body.replaceChildren(...estimators.map((e) => el("tr", { class: "est-row",
      dataset: { site: e.site, partition: e.partition, method: e.method } },
    el("td", {}, e.site), el("td", {}, e.partition), el("td", {}, e.method),
    el("td", { class: "num n", title: e.n < floor ? `fewer than ${floor}: not used to choose` : null }, e.n),
    el("td", { class: "num err" }, secs(e.median_abs_error_s)),
    el("td", { class: "num bias" }, (e.median_bias_s < 0 ? "-" : "+") + secs(Math.abs(e.median_bias_s))),
    el("td", { class: "auto wrap" }, e.auto))));
}

// ---------------------------------------------------------------------------- tasks and groups
const GROUP_PAGE = 20;  // groups a page (ui/data.py MAX_GROUPS)
const TASK_PAGE = 200;  // tasks a page (ui/data.py TASK_PAGE)

// Where a page of a listing is, in words: "21–25 of 25"; all of it: "3"; none: "0".
function pageText(offset, shown, total) {
  if (!shown) return offset ? `none past ${offset} of ${total}` : "0";
  return offset === 0 && shown >= total ? `${total}` : `${offset + 1}–${offset + shown} of ${total}`;
}

// A listing's ‹ newer / older › buttons: a page at a time over the whole listing (the daemon's
// total), the newest first.
function drawListPager(name, offset, shown, total, size) {
  $(`#${name}-pager`).hidden = offset === 0 && shown >= total;
  $(`#${name}-newer`).disabled = offset === 0;
  $(`#${name}-older`).disabled = offset + shown >= total;
  $(`#${name}-newer`).onclick = () => { state[`${name}Offset`] = Math.max(0, offset - size); tick(refreshTaskLists, "tasks"); };
  $(`#${name}-older`).onclick = () => { state[`${name}Offset`] = offset + size; tick(refreshTaskLists, "tasks"); };
}

async function refreshTaskLists() {
  // A page of the groups with their counts as the daemon keeps them (every child, however
  // many), and a page of the tasks, filtered by the daemon over every task (by state, and by
  // text in the id, name, group or a site); each with the daemon's total.
  const only = $("#task-state").value;
  const find = $("#task-find").value.trim();
  const q = new URLSearchParams({ offset: String(state.tasksOffset || 0), limit: String(TASK_PAGE) });
  if (only) q.set("state", only);
  if (find) q.set("find", find);
  const [gpage, tpage] = await Promise.all([api(`/api/groups?offset=${state.groupsOffset || 0}`), api(`/api/tasks?${q}`)]);
  // A page past the end (the listing shrank: another store, fewer matches): its last page.
  const last = (total, size) => Math.max(0, Math.floor((total - 1) / size) * size);
  if (gpage.offset > 0 && gpage.offset >= gpage.total) { state.groupsOffset = last(gpage.total, GROUP_PAGE); return refreshTaskLists(); }
  if (tpage.offset > 0 && tpage.offset >= tpage.total) { state.tasksOffset = last(tpage.total, TASK_PAGE); return refreshTaskLists(); }
  const { groups } = gpage;
  const { tasks } = tpage;
  const gbody = $("#group-list tbody");
  gbody.replaceChildren();
  for (const g of groups) {
    const gid = g.group_id;
    const sel = state.selected && state.selected.kind === "group" && state.selected.id === gid;
    gbody.append(el("tr", { class: "clickable" + (sel ? " selected" : ""), dataset: { group: gid }, title: g.objective,
                            onclick: () => { location.hash = `#/tasks/group/${gid}`; } },
      el("td", {}, gid), el("td", { class: "num size" }, g.size),
      el("td", { class: "wrap counts" }, Object.entries(g.counts).map(([k, v]) => `${k} ${v}`).join(", "))));
  }
  $("#group-count").textContent = pageText(gpage.offset, groups.length, gpage.total);
  drawListPager("groups", gpage.offset, groups.length, gpage.total, GROUP_PAGE);
  $("#task-count").textContent = pageText(tpage.offset, tasks.length, tpage.total) +
    (only ? ` ${only}` : "") + (find ? ` matching “${find}”` : "");
  drawListPager("tasks", tpage.offset, tasks.length, tpage.total, TASK_PAGE);
  const tbody = $("#task-list tbody");
  tbody.replaceChildren();
  for (const t of tasks) {
    const sel = state.selected && state.selected.kind === "task" && state.selected.id === t.task_id;
    tbody.append(el("tr", { class: "clickable" + (sel ? " selected" : ""), dataset: { task: t.task_id },
                            onclick: () => { location.hash = `#/tasks/task/${t.task_id}`; } },
      el("td", {}, t.name ? `${t.task_id} (${t.name})` : t.task_id), el("td", {}, t.state),
      el("td", {}, t.site || "-"), el("td", { class: "num" }, t.attempts)));
  }
  // A selection this page made by itself (not a link or a click) follows the daemon: once its
  // group or task is not among the newest any more (the daemon restarted on another store),
  // the newest is shown instead. A person's own choice stays, and says when it is not known.
  // Judged on the first, unfiltered pages only: paging or filtering changes no selection.
  if (state.groupsOffset || state.tasksOffset || only || find) return;
  const sel = state.selected;
  const known = (s) => (s.kind === "group" ? groups.some((g) => g.group_id === s.id) : tasks.some((t) => t.task_id === s.id));
  if (sel && !sel.chosen && !known(sel)) state.selected = null;
  if (!state.selected) {  // show the newest group (or task) by default
    if (groups.length) state.selected = { kind: "group", id: groups[0].group_id, chosen: false };
    else if (tasks.length) state.selected = { kind: "task", id: tasks[0].task_id, chosen: false };
  }
}

// An attempt's time in the queue and its run, in seconds (null: not started / not ended).
function phases(b, now) {
  const t0 = Date.parse(b.submitted || b.started);
  const t1 = b.ended ? Date.parse(b.ended) : now.getTime();
  const ts = b.started ? Date.parse(b.started) : null;
  return { waited: ((ts ?? t1) - t0) / 1000, ran: ts === null ? null : (t1 - ts) / 1000, t0, t1, ts };
}

function phaseText(b, now) {
  const { waited, ran } = phases(b, now);
  const queue = `waited ${duration(waited)} in the queue`;
  if (ran === null) return b.ended ? `${queue}, never started` : `${queue} so far`;
  return `${queue}, ran ${duration(ran)}` + (b.ended ? "" : " so far");
}

function barItem(b, now) {
  // One bar per attempt: its queue wait drawn pale and dotted (the terminal's ·), then its
  // run in its state's colour (█); --wait is the waiting share of the bar's length.
  const { t0, t1, ts } = phases(b, now);
  const wait = t1 > t0 ? Math.min(1, Math.max(0, ((ts ?? t1) - t0) / (t1 - t0))) : (ts === null ? 1 : 0);
  const marks = { "re-placed": "↪ re-placed ", replanned: "↪ replanned ", retry: "⟳ retry ", extension: "⧗ longer wall ", hedged: "⇉ hedged ", placed: "" };
  // A hedged copy another outran was cancelled, not moved: its bar ends at the cancel.
  const gone = b.outrun_by !== null && b.outrun_by !== undefined ? "✕ cancelled · " : "✕ moved · ";
  const content = el("span", {}, (b.superseded ? gone : "") + marks[b.cause] + b.label + ` · ${b.state}`);
  const cls = ["attempt", `state-${b.state}`, `cause-${b.cause}`];
  if (b.superseded) cls.push("superseded");
  if (ts === null) cls.push("never-started");
  return { id: `${b.task_id}#${b.n}`, group: b.site, start: new Date(t0), end: new Date(Math.max(t1, t0 + 1)), content,
           className: cls.join(" "),
           style: `--wait: ${(wait * 100).toFixed(2)}%`, task: b.task_id, n: b.n, wait: wait.toFixed(4), bar: b };
}

// An attempt's tooltip: the page's own element (#tip; vis-timeline's put it over the rows below
// the pointer, capped inside the Gantt's box), in the page's font, as text. It stands beside
// the pointer (on its left near the screen's right edge) and above the hovered bar, so the bar
// and the rows below it stay in sight; only with no room above on the screen does it go below
// the bar. It never takes the pointer (pointer-events: none) and stays inside the screen.
const TIP_GAP = 12;  // px between the pointer and the tooltip's side
const TIP_EDGE = 6;  // px kept free at the screen's edges and above the hovered bar

function tipText(b, now) {
  return [`${b.label} on ${b.site}/${b.partition} (job ${b.job_id || "-"}): ${b.state}`,
          phaseText(b, now),
          `submitted ${when(b.submitted)}, started ${when(b.started)}, ended ${when(b.ended)}`,
          b.why].join("\n");
}

function hideTip() {
  const tip = $("#tip");
  tip.hidden = true;
  delete tip.dataset.item;
}

function placeTip(tip, x, y, bar) {  // x, y: the pointer; bar: the hovered bar's box (viewport)
  const width = document.documentElement.clientWidth;
  const height = document.documentElement.clientHeight;
  const w = tip.offsetWidth;
  const h = tip.offsetHeight;
  let left = x + TIP_GAP;
  if (left + w > width - TIP_EDGE) left = x - TIP_GAP - w;  // no room on the right: on the left
  left = Math.max(TIP_EDGE, Math.min(left, width - TIP_EDGE - w));
  let top = Math.min(bar.top, y) - TIP_EDGE - h;  // above the bar: the rows below stay in sight
  if (top < TIP_EDGE) top = Math.max(TIP_EDGE, Math.min(bar.bottom + TIP_EDGE, height - TIP_EDGE - h));
  tip.style.left = `${Math.round(left)}px`;
  tip.style.top = `${Math.round(top)}px`;
  tip.dataset.side = top < bar.top ? "above" : "below";
}

function followTip(ev) {  // the pointer moved over the Gantt
  const item = ev.target instanceof Element ? ev.target.closest(".vis-item.attempt") : null;
  const id = item ? `${item.dataset.task}#${item.dataset.n}` : null;
  const b = id && (state.byId || {})[id];
  if (!b) { hideTip(); return; }
  const tip = $("#tip");
  if (tip.dataset.item !== id || tip.hidden) {
    tip.textContent = tipText(b, new Date());
    tip.dataset.item = id;
    tip.hidden = false;
  }
  placeTip(tip, ev.clientX, ev.clientY, item.getBoundingClientRect());
}

// A task's page: what `fedhpc task ID` prints (each attempt's wait, run and exit, the
// placement's why, reasons, outputs by reference, what to do next); the output's tail is read
// from the site only when asked.
function taskDetail(t, start) {
  $("#task-detail").hidden = !t;
  if (!t) return;
  const secs = (v) => (v === null || v === undefined ? "-" : duration(v));
  $("#attempts tbody").replaceChildren(...t.attempts.map((a) => el("tr", { dataset: { n: a.n } },
    el("td", { class: "num" }, a.n + (a.superseded ? " ✕" : "")), el("td", {}, a.site), el("td", {}, a.partition),
    el("td", {}, a.job_id || "-"), el("td", {}, a.state), el("td", { class: "num waited" }, secs(a.wait_s)),
    el("td", { class: "num ran" }, secs(a.runtime_s)), el("td", { class: "num" }, a.exit_code ?? "-"),
    el("td", { class: "wrap" }, a.reason || ""))));
  const facts = [];
  if (t.created_at) facts.push(`submitted to fedhpc ${when(t.created_at)}`);
  if (t.provenance) facts.push(`placement: ${t.provenance.decision} (${t.provenance.feasible} of ${t.provenance.candidates} feasible; envelope from ${t.provenance.envelope_source})`);
  for (const r of t.reasons || []) facts.push(`reason: ${r}`);
  if (t.unreadable) facts.push(`output unreadable now: ${t.unreadable}`);
  if (t.next) facts.push(`next: ${t.next}`);
  $("#task-facts").replaceChildren(...facts.map((f) => el("span", { class: "fact" }, f)));
  $("#outputs tbody").replaceChildren(...(t.outputs || []).map((o) => el("tr", {},
    el("td", {}, o.kind), el("td", {}, o.site || "-"), el("td", { class: "wrap" }, o.path), el("td", { class: "num" }, o.bytes ?? "-"))));
  if ($("#output-tail").dataset.task !== t.task_id) {  // another task: its own tail, once asked
    $("#output-tail").hidden = true;
    $("#output-tail").textContent = "";
  }
  $("#read-output").onclick = () => readOutput(t.task_id);
  const why = whyPending(t, start);
  $("#why-pending").hidden = !why;
  $("#why-pending").textContent = why || "";
}

// Why it is not running yet, and when it may start: fedhpc's own hold, or at a scheduler its
// pending reason and the start fedhpc predicted, as the daemon words it for every face
// (`waiting`: `fedhpc task` and get_result read the same sentence). The sentence names that
// start in UTC, one per hedged copy that waits; `start.copies` ({at, shown} each: the instant
// and the text the sentence printed for it) lets the page write them in its own zone, as every
// other time.
function whyPending(t, start) {
  if (t.state === "queued") return `Not at a scheduler yet: ${t.waiting || "fedhpc is placing it"}.`;
  if (!["submitted", "pending"].includes(t.state) || !t.waiting) return null;
  let said = t.waiting;
  for (const s of start ? start.copies || [start] : []) said = said.replace(s.shown, when(s.at));
  return said.charAt(0).toUpperCase() + said.slice(1) + ".";
}

async function readOutput(taskId) {
  const out = $("#output-tail");
  out.hidden = false;
  out.dataset.task = taskId;
  out.textContent = "reading…";
  try {
    const m = await api(`/api/tasks/${encodeURIComponent(taskId)}/output`);
    const parts = [];
    if (m.preview !== null) parts.push((m.truncated ? "[...]\n" : "") + m.preview);
    if (m.stderr) parts.push(`stderr (tail):\n${m.stderr}`);
    out.textContent = parts.join("\n\n") || (m.unreadable ? `unreadable now: ${m.unreadable}` : "(no output yet)");
  } catch (err) {
    out.textContent = `${err.message}` + (err.hint ? ` (${err.hint})` : "");
  }
}

// A refresh changes the Gantt's rows in place: a bar that is still there keeps its element, so a
// hover, its tooltip or a pointer on its way to it survives the page's live refresh (new data
// sets redrew every bar: the element under the pointer went away every few seconds).
function syncGantt(lanes, bars) {
  const stale = (rows, fresh) => { const keep = new Set(fresh.map((r) => r.id)); return rows.getIds().filter((id) => !keep.has(id)); };
  state.lanes.update(lanes);
  state.bars.remove(stale(state.bars, bars));
  state.bars.update(bars);
  state.lanes.remove(stale(state.lanes, lanes));
}

function clearTimeline(title, summary) {
  $("#tl-title").textContent = title;
  $("#tl-summary").textContent = summary;
  $("#attempt-detail").textContent = "";
  taskDetail(null);
  if (state.timeline) syncGantt([], []);
  state.itemCount = 0;
  $("#timeline").dataset.attempts = "0";
}

async function refreshTimeline() {
  const sel = state.selected;
  if (!sel) {  // nothing to show: none yet, or the one shown has gone with its daemon's store
    clearTimeline("Select a group or a task", "");
    delete $("#timeline").dataset.missing;
    return;
  }
  let body;
  try {
    const page = sel.kind === "group" ? groupPage(sel.id) : null;
    body = sel.kind === "group"
      ? await api(`/api/groups/${encodeURIComponent(sel.id)}/timeline` +
                  (page.after ? `?after=${encodeURIComponent(page.after)}` : ""))
      : await api(`/api/tasks/${encodeURIComponent(sel.id)}/timeline`);
  } catch (err) {
    if (err.status !== 404 || state.selected !== sel) throw err;
    if (!sel.chosen) {  // the page's own pick, gone with its store: the lists' next read picks anew
      state.selected = null;
      return refreshTimeline();
    }
    // A link to a task or group the daemon does not know (a typo, or another daemon's id):
    // said where its timeline would be; the lists on the left still show what exists.
    clearTimeline(`No ${sel.kind} ${sel.id}`, `${err.message}` + (err.hint ? ` (${err.hint})` : ""));
    $("#timeline").dataset.missing = sel.id;
    return;
  }
  if (state.selected !== sel) return;
  delete $("#timeline").dataset.missing;
  const now = new Date();
  const items = body.bars.filter((b) => b.submitted || b.started).map((b) => barItem(b, now));
  const sites = [...new Set(body.bars.map((b) => b.site))].sort();
  const groups = sites.map((s) => ({ id: s, content: s, style: `border-left: 4px solid ${colorOf(s)}` }));
  if (sel.kind === "group") {
    const g = body.group;
    $("#tl-title").textContent = `Group ${g.group_id}: ${g.objective}`;
    $("#tl-summary").textContent = `round ${g.round}, ${g.state}; children ${g.size}: ` +
      Object.entries(g.counts).map(([k, v]) => `${k} ${v}`).join(", ") +
      `; ${body.bars.length} attempts` + (body.omitted ? ` (${body.omitted} children not shown)` : "");
    drawPager(g, body);
  } else {
    const t = body.task;
    $("#tl-title").textContent = `Task ${t.task_id}` + (t.name ? ` (${t.name})` : "");
    $("#tl-summary").textContent = `${t.state}; ${body.bars.length} attempts` +
      (t.group_id ? `; group ${t.group_id}` : "");
  }
  if (sel.kind !== "group") $("#tl-pager").hidden = true;
  taskDetail(sel.kind === "task" ? body.task : null, body.predicted_start);
  state.itemCount = items.length;
  const itemsWithoutBar = items.map(({ bar, ...rest }) => rest);
  const byId = Object.fromEntries(items.map((i) => [i.id, i.bar]));
  const key = `${sel.kind}:${sel.id}`;
  const fit = items.length && state.fitted !== key ? span(items) : null;
  const created = !state.timeline;
  if (created) {
    state.bars = new vis.DataSet(itemsWithoutBar);
    state.lanes = new vis.DataSet(groups);
    state.timeline = new vis.Timeline($("#timeline"), state.bars, state.lanes, {
      stack: true, orientation: "top", zoomKey: "ctrlKey", showTooltips: false,  // #tip instead
      margin: { item: 6 }, showCurrentTime: true, dataAttributes: ["task", "n", "wait"], ...axisOptions(),
    });
    // Drawn: the count a reader (or a test) can rely on appears once the items are on screen.
    // No start/end in the options: with them vis-timeline keeps its root hidden (and an empty
    // loading screen over it) until the range first changes, and a window set to the same
    // range never changes it: the Gantt stayed blank. Its own first draw fits the items; the
    // span with room for the last label is set once that draw is done.
    state.timeline.on("changed", () => {
      $("#timeline").dataset.attempts = String(state.itemCount);
      const w = state.firstWindow;
      state.firstWindow = null;
      if (w) state.timeline.setWindow(w.start, w.end, { animation: false });
    });
    state.timeline.on("select", (props) => {
      state.picked = props.items[0];
      const b = state.byId[state.picked];
      $("#attempt-detail").textContent = b ? detail(b, new Date()) : "";
    });
  } else {
    syncGantt(groups, itemsWithoutBar);
  }
  state.byId = byId;
  if (state.picked in byId) {  // the person's pick stays selected over the refresh, its detail fresh
    state.timeline.setSelection([state.picked]);
    $("#attempt-detail").textContent = detail(byId[state.picked], now);
  }
  if (fit) {  // the whole span once per selection; then the person's zoom is kept
    if (created) state.firstWindow = fit;  // after the first draw (above)
    else state.timeline.setWindow(fit.start, fit.end, { animation: false });
    state.fitted = key;
  }
  state.timelineReads = (state.timelineReads || 0) + 1;  // a reader (or a test) sees each refresh
  $("#timeline").dataset.reads = String(state.timelineReads);
}

// A big group's children, a page at a time (the daemon's pages: each names the child after
// which the next begins). The pages seen are kept to go back; another group starts at its first.
function groupPage(id) {
  if (!state.groupPage || state.groupPage.id !== id) state.groupPage = { id, after: null, back: [] };
  return state.groupPage;
}

function drawPager(g, body) {
  const page = groupPage(g.group_id);
  const first = page.back.length * MAX_CHILDREN_SHOWN + 1;
  const last = first + body.shown.length - 1;
  $("#tl-pager").hidden = g.size <= body.shown.length && !page.after;
  $("#pg-where").textContent = body.shown.length ? `children ${first}–${last} of ${g.size}` : `no children after ${page.after}`;
  $("#pg-where").dataset.first = body.shown[0] || "";
  $("#pg-prev").disabled = !page.after;
  $("#pg-next").disabled = !g.next_after;
  $("#pg-prev").onclick = () => { page.after = page.back.pop() ?? null; state.fitted = null; tick(refreshTimeline, "tasks"); };
  $("#pg-next").onclick = () => {
    if (!g.next_after) return;
    page.back.push(page.after);
    page.after = g.next_after;
    state.fitted = null;
    tick(refreshTimeline, "tasks");
  };
}

function span(items) {
  // Every attempt, with room on the right for the last bar's label.
  const t0 = Math.min(...items.map((i) => i.start.getTime()));
  const t1 = Math.max(...items.map((i) => i.end.getTime()));
  const pad = Math.max(5000, (t1 - t0) * 0.08);
  return { start: new Date(t0 - pad), end: new Date(t1 + 3 * pad) };
}

function detail(b, now) {
  return [`${b.label}  (task ${b.task_id}, attempt ${b.n})`,
          `site ${b.site}, partition ${b.partition}, job ${b.job_id || "-"}, state ${b.state}` +
            (b.wall_s ? `, wall ${b.wall_s}s` : ""),
          phaseText(b, now),
          `submitted ${when(b.submitted)}  started ${when(b.started)}  ended ${when(b.ended)}`,
          `why: ${b.why}`].join("\n");
}

// ------------------------------------------------------------------------ events and deliveries
function eventDetail(e) {
  const p = e.payload || {};
  const bits = [];
  // A task fedhpc moved (task.moved): where from, where to, and why, first.
  if (p.moved_from && p.moved_to) bits.push(`moved ${p.moved_from} → ${p.moved_to}`);
  for (const k of ["reason", "site", "attempt", "job_id", "round", "counts", "hint"]) {
    if (p[k] !== undefined) bits.push(`${k}: ${typeof p[k] === "object" ? JSON.stringify(p[k]) : p[k]}`);
  }
  return bits.join("; ");
}

// An event's subject is a task or a group: a link to its timeline (other subjects, e.g. a
// site or a transfer, are plain text).
function subjectLink(kind, subject) {
  if (!subject) return "-";
  const what = kind.startsWith("task.") ? "task" : kind.startsWith("group.") ? "group" : null;
  if (!what) return subject;
  return el("a", { href: `#/tasks/${what}/${encodeURIComponent(subject)}` }, subject);
}

async function readEvents() {
  const q = state.eventSeq === null ? "/api/events?limit=200" : `/api/events?after=${state.eventSeq}&limit=500`;
  try {
    return (await api(q)).events;
  } catch (err) {
    if (err.code !== "cursor_ahead" || state.eventSeq === null) throw err;
    // The cursor is past the daemon's newest event: the daemon restarted on another store,
    // whose seqs start again lower. What the table shows is another store's log: read this
    // one's from its newest events, as on a fresh page.
    state.eventSeq = null;
    state.events = [];
    return (await api("/api/events?limit=200")).events;
  }
}

async function refreshEvents() {
  const events = await readEvents();
  for (const e of events) state.eventSeq = Math.max(state.eventSeq || 0, e.seq);
  if (state.eventSeq === null) state.eventSeq = 0;
  state.events = [...events.reverse(), ...state.events].slice(0, 500);
  const body = $("#events tbody");
  body.replaceChildren(...state.events.map((e) => el("tr", { dataset: { kind: e.kind } },
    el("td", { class: "num" }, e.seq), el("td", {}, when(e.created_at)), el("td", {}, e.kind),
    el("td", { class: "subject" }, subjectLink(e.kind, e.subject)), el("td", {}, (e.payload || {}).state || ""),
    el("td", { class: "wrap" }, eventDetail(e)))));
  const { deliveries } = await api("/api/deliveries");
  $("#deliveries tbody").replaceChildren(...deliveries.map((d) => el("tr", { dataset: { status: d.status, event: d.event || "" } },
    el("td", {}, when(d.updated_at)), el("td", {}, d.event || "-"), el("td", { class: "subject" }, subjectLink(d.event || "", d.subject)),
    el("td", {}, d.runtime), el("td", {}, d.session || "-"),
    el("td", {}, el("span", { class: `badge ${d.status}` }, d.status)), el("td", { class: "num" }, d.attempts),
    el("td", { class: "wrap" }, d.last_error || (d.status === "delivered" ? `resumed${d.resume ? " (" + d.resume + ")" : ""}` : "")))));
}

// ------------------------------------------------------------------------------------- routing
const PAGES = {
  federation: [[refreshFederation, POLL_MS], [refreshScatter, HISTORY_MS], [refreshEstimators, HISTORY_MS]],
  tasks: [[refreshTaskLists, POLL_MS], [refreshTimeline, POLL_MS]],
  events: [[refreshEvents, POLL_MS]],
};

// Each poll's last failure, kept until that same poll succeeds: a poll that read nothing
// (the timeline with nothing selected) never clears another's banner.
async function tick(fn, page) {
  let failed = null;
  try {
    await fn();
  } catch (err) {
    failed = err;
  }
  if (page !== state.page) return;  // a read of the page left meanwhile
  if (failed) state.failures.set(fn, failed);
  else state.failures.delete(fn);
  const [first] = state.failures.values();
  banner(first || null);
  setStatus(first ? statusOf(first) : `live · updated ${clock(new Date())}`);
}

async function route() {
  const parts = (location.hash || "#/federation").slice(2).split("/");
  const page = PAGES[parts[0]] ? parts[0] : "federation";
  if (page === "tasks" && parts.length >= 3) {
    state.selected = { kind: parts[1] === "task" ? "task" : "group", id: decodeURIComponent(parts[2]), chosen: true };
  }
  for (const t of state.timers) clearInterval(t);
  state.timers = [];
  state.page = page;
  state.failures.clear();
  const gen = state.routeGen = (state.routeGen || 0) + 1;
  for (const s of document.querySelectorAll(".page")) s.hidden = s.id !== `page-${page}`;
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.page === page);
  for (const [fn, ms] of PAGES[page]) {
    await tick(fn, page);
    if (state.routeGen !== gen) return;  // routed again while reading: that route polls
    state.timers.push(setInterval(() => tick(fn, page), ms));
  }
  document.body.dataset.ready = page;
}

window.addEventListener("hashchange", route);
window.addEventListener("DOMContentLoaded", () => {
  $("#tz").addEventListener("change", (e) => setZone(e.target.value));
  $("#timeline").addEventListener("mousemove", followTip);
  $("#timeline").addEventListener("mouseleave", hideTip);
  window.addEventListener("scroll", hideTip, { passive: true });  // the page moved: the bar it stood by too
  $("#qh-pick").addEventListener("change", () => { if (state.history) drawQueueHistory(state.history); });
  for (const f of ["#task-state", "#task-find"]) {  // the task list follows its filters at once, from its first page
    $(f).addEventListener(f === "#task-find" ? "input" : "change", () => {
      state.tasksOffset = 0;
      if (state.page === "tasks") tick(refreshTaskLists, "tasks");
    });
  }
  document.body.dataset.tz = state.tz;
  $("#tz").value = state.tz;
  for (const z of document.querySelectorAll(".zone")) z.textContent = zoneOf(new Date());
  route();
});
