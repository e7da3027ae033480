// fedhpc dashboard, Federation page: the queue history of one site/partition over the daemon's
// recent probes, the wait fedhpc would predict now per partition, and the allocation (credit
// used and left, and what the live work will charge) per site and account. They draw what
// app.js already read (/api/history for the scatter, /api/federation for the table); the
// charges and the wait predicted now are one read every 15 s each (/api/charges, /api/outlook).
// Loaded after app.js (its helpers: $, el, api, when, clock, state, PAGES).
"use strict";

// -------------------------------------------------------------------------------- queue history
// Per partition, each probe's pending jobs and free GPUs (the daemon keeps the recent ones).
function queueSeries(hist) {
  const series = new Map();
  for (const [site, points] of Object.entries(hist.sites)) {
    const offered = (state.offered || {})[site];
    for (const pt of points) {
      for (const p of pt.partitions) {
        if (offered && !offered.has(p.name)) continue;  // blocked ones are not offered
        const key = `${site}/${p.name}`;
        if (!series.has(key)) series.set(key, { site, partition: p.name, gpus: p.total_gpus, points: [] });
        series.get(key).points.push({ at: pt.at, t: Date.parse(pt.at), pending: p.pending_jobs, free: p.free_gpus,
                                      running: p.running_jobs, health: pt.health });
      }
    }
  }
  return series;
}

function drawQueueHistory(hist) {
  const series = queueSeries(hist);
  const pick = $("#qh-pick");
  const keys = [...series.keys()].sort();
  if (pick.dataset.keys !== keys.join(",")) {  // the choices changed: list them again, keep the pick
    const was = pick.value;
    pick.replaceChildren(...keys.map((k) => el("option", { value: k }, k + (series.get(k).gpus ? "" : " (no GPUs)"))));
    pick.dataset.keys = keys.join(",");
    const gpu = keys.find((k) => series.get(k).gpus > 0);
    pick.value = keys.includes(was) ? was : (gpu || keys[0] || "");
  }
  const s = series.get(pick.value);
  const canvas = $("#queue-history");
  if (!s) {
    canvas.dataset.series = "";
    return;
  }
  const pending = s.points.map((p) => ({ x: p.t, y: p.pending }));
  const free = s.points.map((p) => ({ x: p.t, y: p.free }));
  const datasets = [
    { label: "pending jobs", data: pending, borderColor: "#b7791f", backgroundColor: "#b7791f", yAxisID: "y",
      stepped: true, pointRadius: 2 },
    { label: `free GPUs (of ${s.gpus})`, data: free, borderColor: "#2f6fde", backgroundColor: "#2f6fde", yAxisID: "y",
      stepped: true, pointRadius: 2, borderDash: [5, 3] },
  ];
  // The jobs fedhpc placed there whose wait the scheduler's accounting reported, inside the
  // probes' span: each at its start, the wait it had beside the wait placement predicted
  // (the scheduler's estimate where it gave one, else learned, else paper), on a seconds axis.
  const t0 = s.points[0].t;
  const t1 = s.points[s.points.length - 1].t;
  const jobs = (state.judged || []).filter((j) => `${j.site}/${j.partition}` === pick.value)
    .map((j) => ({ ...j, t: Date.parse(j.at) })).filter((j) => j.t >= t0 && j.t <= t1);
  const predicted = (j) => { const p = j.predicted_s; return p.scheduler ?? p.learned ?? p.paper ?? null; };
  if (jobs.length) {
    datasets.push(
      { label: "realised wait (s)", data: jobs.map((j) => ({ x: j.t, y: j.observed_s })), yAxisID: "wait",
        showLine: false, pointRadius: 5, pointStyle: "circle", borderColor: "#16a085", backgroundColor: "#16a085" },
      { label: "predicted wait (s)", data: jobs.map((j) => ({ x: j.t, y: predicted(j) })), yAxisID: "wait",
        showLine: false, pointRadius: 6, pointStyle: "crossRot", borderColor: "#8e44ad", backgroundColor: "#8e44ad", borderWidth: 2 });
  }
  if (state.queueChart) state.queueChart.options.scales.wait.display = jobs.length > 0;
  if (!state.queueChart) {
    state.queueChart = new Chart(canvas, {
      type: "line", data: { datasets },
      options: { animation: false, maintainAspectRatio: false, parsing: false,
        scales: {
          x: { type: "linear", title: { display: true, text: "time" },
               ticks: { maxTicksLimit: 6, callback: (v) => clock(new Date(v)) } },
          y: { beginAtZero: true, title: { display: true, text: "jobs / GPUs" }, ticks: { precision: 0 } },
          wait: { position: "right", beginAtZero: true, display: jobs.length > 0, grid: { drawOnChartArea: false },
                  title: { display: true, text: "queue wait (s)" } } },
        plugins: { legend: { position: "bottom" },
                   tooltip: { callbacks: { title: (items) => when(new Date(items[0].parsed.x).toISOString()) } } } },
    });
  } else {
    state.queueChart.data.datasets = datasets;
    state.queueChart.update("none");
  }
  const last = s.points[s.points.length - 1];
  // Drawn: which partition, how many probes, and the newest one's numbers (for a reader or a test).
  canvas.dataset.series = JSON.stringify({ key: pick.value, probes: s.points.length,
                                           newest: { at: last.at, pending: last.pending, free: last.free },
                                           judged: jobs.map((j) => ({ at: j.at, observed_s: j.observed_s, predicted_s: predicted(j) })) });
  $("#qh-span").textContent = `${s.points.length} probes, ${when(new Date(s.points[0].t).toISOString())} to ${when(new Date(last.t).toISOString())}`;
  renderOutlook();
}

// ------------------------------------------------------------------------ wait predicted now
// Per partition, the wait the daemon's placement predicts now for three reference requests
// (its own decision on its latest probes: no scheduler is asked), with the estimator it came
// from; "cannot run" and the rules' reasons where the partition cannot run the request.
async function refreshOutlook() {
  state.outlook = await api("/api/outlook");
  renderOutlook();
}
PAGES.federation.push([refreshOutlook, HISTORY_MS]);

function outlookCell(r) {
  if (!r) return { text: "-", title: null, kind: "none" };
  if (r.wait_s === null) return { text: "cannot run", title: r.why, kind: "cannot" };
  const p90 = r.p90_s === null ? "" : `, p90 ${duration(r.p90_s)}`;
  return { text: `${duration(r.wait_s)} (${r.method})`, title: `${r.source}${p90}; shape ${r.shape}`, kind: r.method };
}

function pickQueue(key) {  // a row of the outlook picks its partition's queue history
  const pick = $("#qh-pick");
  if (![...pick.options].some((o) => o.value === key)) return;
  pick.value = key;
  if (state.history) drawQueueHistory(state.history);
}

function renderOutlook() {
  const o = state.outlook;
  if (!o) return;
  const cells = new Map();
  for (const r of o.rows) {
    const key = `${r.site}/${r.partition}`;
    const offered = (state.offered || {})[r.site];
    if (offered && !offered.has(r.partition)) continue;  // as the queue history: blocked ones are not offered
    if (!cells.has(key)) cells.set(key, { site: r.site, partition: r.partition, by: {} });
    cells.get(key).by[r.request] = r;
  }
  const picked = $("#qh-pick").value;
  $("#outlook-at").textContent = `as of ${when(o.at)}`;
  $("#outlook-table").title = o.scheduler;
  $("#outlook-table tbody").replaceChildren(...[...cells.entries()].sort().map(([key, c]) =>
    el("tr", { class: "outlook-row clickable" + (key === picked ? " selected" : ""), dataset: { key },
               title: "click to draw this partition's queue history", onclick: () => pickQueue(key) },
      el("td", {}, c.site), el("td", {}, c.partition),
      ...o.requests.map((q) => {
        const cell = outlookCell(c.by[q]);
        return el("td", { class: `outlook ${cell.kind}`, title: cell.title, dataset: { request: q } }, cell.text);
      }))));
  const c = cells.get(picked);
  $("#qh-now").textContent = !c ? "" : `Now, for ${picked}: ` + o.requests.map((q) => {
    const r = c.by[q];
    const cell = outlookCell(r);
    return `${q} ${cell.text}${r && r.wait_s === null ? ` (${r.why})` : ""}`;
  }).join(" · ") + ` (as of ${clock(new Date(o.at))})`;
}

// ----------------------------------------------------------------------------------- allocation
// Each site's accounts as its last probe saw them: used, the budget the user set, what is left
// (the smaller of the site's balance and the budget minus use), in the site's own unit.
function creditLeft(c) {
  if (c.unusable) return null;
  if (c.balance !== null && c.budget !== null) return Math.min(c.balance, c.budget - (c.used || 0));
  if (c.balance !== null) return c.balance;
  if (c.budget !== null) return c.budget - (c.used || 0);
  return null;
}

function amount(v, unit) { return v === null || v === undefined ? "-" : `${Number(v).toFixed(2)} ${unit}`; }

function drawAllocation(view) {
  state.fedView = view;
  renderAllocation();
}

// What the live work will charge at most (its whole granted wall time), per site and account:
// the daemon's ledger (its live billing weights), read every 15 s.
async function refreshCharges() {
  state.charges = await api("/api/charges");
  renderAllocation();
}
PAGES.federation.push([refreshCharges, HISTORY_MS]);

function renderAllocation() {
  const view = state.fedView;
  if (!view) return;
  const charges = new Map(((state.charges || {}).charges || []).map((c) => [`${c.site} ${c.account}`, c]));
  const rows = [];
  const seen = new Set();
  const row = (site, c, ch) => {
    const left = c ? creditLeft(c) : null;
    const unit = (c || ch).unit;
    const of = c ? (c.budget ?? (c.balance !== null && c.used !== null ? c.balance + c.used : null)) : null;
    const share = of ? Math.max(0, Math.min(1, (c.used || 0) / of)) : null;
    const bar = share === null ? "" : el("span", { class: "meter", title: `${(share * 100).toFixed(0)}% used` },
      el("span", { class: "meter-used", style: `width: ${(share * 100).toFixed(1)}%` }));
    const live = ch ? ch.running + ch.queued : 0;
    let note = "";
    if (c && c.unusable) note = `not trusted: ${c.unusable}`;
    else if (left !== null && left <= 0) note = "spent: placement skips it";
    else if (left !== null && live > 0) note = `after the live work at most: ${amount(left - live, unit)}`;
    return el("tr", { class: "alloc-row", dataset: { site, account: (c || ch).account } },
      el("td", {}, site), el("td", {}, (c || ch).account),
      el("td", { class: "num used" }, c ? amount(c.used, unit) : "-"),
      el("td", { class: "num budget" }, c ? amount(c.budget, unit) : "-"),
      el("td", { class: "num left" }, amount(left, unit)),
      el("td", { class: "num running" }, ch ? amount(ch.running, unit) : "-"),
      el("td", { class: "num queued" }, ch ? amount(ch.queued, unit) : "-"),
      el("td", { class: "share" }, bar), el("td", { class: "wrap" }, note));
  };
  for (const s of view.sites) {
    for (const c of s.credit) {
      const key = `${s.site} ${c.account}`;
      seen.add(key);
      rows.push(row(s.site, c, charges.get(key)));
    }
  }
  for (const [key, ch] of charges) if (!seen.has(key)) rows.push(row(ch.site, null, ch));
  const body = $("#alloc-table tbody");
  body.replaceChildren(...(rows.length ? rows : [el("tr", { class: "alloc-empty" }, el("td", { colspan: 9, class: "wrap" },
    "No site reports credit for your accounts (set accounts and a budget per site in config.toml)."))]));
  const c = state.charges;
  $("#alloc-live").textContent = !c ? "" : c.more ? `at the daemon's live charges, of its newest ${c.read} attempts` : "at the daemon's live charges";
}

// ------------------------------------------------------------------------------ credit over time
// Each site's accounts at each recent probe the daemon kept: credit used (solid) and left
// (dashed; as the allocation table counts it), in the site's unit. Read once a minute: the
// daemon parses each probe whole for it.
const CREDIT_MS = 60000;

async function refreshCreditHistory() {
  drawCreditHistory(await api("/api/credit?limit=120"));
}
PAGES.federation.push([refreshCreditHistory, CREDIT_MS]);

function drawCreditHistory(hist) {
  const series = new Map();
  for (const [site, points] of Object.entries(hist.sites)) {
    for (const pt of points) {
      for (const c of pt.credit) {
        const key = `${site} ${c.account}`;
        if (!series.has(key)) series.set(key, { site, account: c.account, unit: c.unit, points: [] });
        series.get(key).points.push({ at: pt.at, t: Date.parse(pt.at), used: c.used, left: c.remaining });
      }
    }
  }
  const datasets = [];
  const drawn = {};
  const burns = hist.burn || {};
  for (const [key, s] of [...series.entries()].sort()) {
    const color = colorOf(s.site);
    const used = s.points.filter((p) => p.used !== null).map((p) => ({ x: p.t, y: p.used }));
    const left = s.points.filter((p) => p.left !== null).map((p) => ({ x: p.t, y: p.left }));
    if (used.length) datasets.push({ label: `${key} used (${s.unit})`, data: used, borderColor: color, backgroundColor: color, stepped: true, pointRadius: 1 });
    if (left.length) datasets.push({ label: `${key} left (${s.unit})`, data: left, borderColor: color, backgroundColor: color, stepped: true, pointRadius: 1, borderDash: [5, 3] });
    const last = s.points[s.points.length - 1];
    drawn[key] = { probes: s.points.length, newest: { at: last.at, used: last.used, left: last.left } };
    const burn = (burns[s.site] || {})[s.account];
    const pace = burn ? evenPace(left, burn) : null;
    if (pace) {
      datasets.push({ label: `${key} even pace to ${burn.expires} (${s.unit})`, data: pace, borderColor: color, backgroundColor: color, pointRadius: 0, borderDash: [1, 3] });
      drawn[key].even = pace;
    }
    if (burn) drawn[key].burn = burn.verdict;
  }
  drawBurn(burns);
  const canvas = $("#credit-history");
  if (!state.creditChart) {
    state.creditChart = new Chart(canvas, {
      type: "line", data: { datasets },
      options: { animation: false, maintainAspectRatio: false, parsing: false,
        scales: {
          x: { type: "linear", title: { display: true, text: "time" },
               ticks: { maxTicksLimit: 6, callback: (v) => clock(new Date(v)) } },
          y: { title: { display: true, text: "credit (each site's unit)" } } },
        plugins: { legend: { position: "bottom" },
                   tooltip: { callbacks: { title: (items) => when(new Date(items[0].parsed.x).toISOString()) } } } },
    });
  } else {
    state.creditChart.data.datasets = datasets;
    state.creditChart.update("none");
  }
  // Drawn: each site and account's probes and newest numbers (for a reader or a test).
  canvas.dataset.series = JSON.stringify(drawn);
  $("#ch-empty").hidden = series.size > 0;
}

// ------------------------------------------------------------------------------------ burn-down
// The even pace that spends what is left (above the reserve) by the allocation's last day,
// drawn over the probes shown and ending at the newest: a "left" line falling faster than it
// runs out early; one flatter leaves credit unspent. One line per account says which.
function evenPace(left, burn) {
  if (burn.even_per_day === null || left.length < 2) return null;
  const newest = left[left.length - 1];
  const first = left[0];
  const perMs = burn.even_per_day / 86400000;
  return [{ x: first.x, y: newest.y + perMs * (newest.x - first.x) }, { x: newest.x, y: newest.y }];
}

function drawBurn(burns) {
  const items = [];
  for (const [site, accounts] of Object.entries(burns).sort()) {
    for (const [account, b] of Object.entries(accounts).sort()) {
      const days = `${Math.floor(b.days_left)} day${Math.floor(b.days_left) === 1 ? "" : "s"} left`;
      items.push(el("li", { class: "burn-row", dataset: { site, account } },
        el("strong", {}, `${site} ${account}`), ` expires ${b.expires} (${days}): ${b.verdict}`));
    }
  }
  $("#ch-burn").replaceChildren(...items);
}
