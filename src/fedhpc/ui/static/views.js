// fedhpc dashboard, Federation page: the queue history of one site/partition over the daemon's
// recent probes, and the allocation (credit used and left, and what the live work will charge)
// per site and account. They draw what app.js already read (/api/history for the scatter,
// /api/federation for the table); the charges are one read every 15 s (/api/charges).
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
  if (!state.queueChart) {
    state.queueChart = new Chart(canvas, {
      type: "line", data: { datasets },
      options: { animation: false, maintainAspectRatio: false, parsing: false,
        scales: {
          x: { type: "linear", title: { display: true, text: "time" },
               ticks: { maxTicksLimit: 6, callback: (v) => clock(new Date(v)) } },
          y: { beginAtZero: true, title: { display: true, text: "jobs / GPUs" }, ticks: { precision: 0 } } },
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
                                           newest: { at: last.at, pending: last.pending, free: last.free } });
  $("#qh-span").textContent = `${s.points.length} probes, ${when(new Date(s.points[0].t).toISOString())} to ${when(new Date(last.t).toISOString())}`;
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
// the daemon's newest live tasks, read every 15 s (one read per task: not every 3 s).
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
  $("#alloc-live").textContent = !c ? "" : c.more ? `running and queued: the newest ${c.read} live tasks` : `running and queued: all ${c.read} live tasks`;
}
