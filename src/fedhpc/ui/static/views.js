// fedhpc dashboard, Federation page: the queue history of one site/partition over the daemon's
// recent probes, and the allocation (credit used and left) per site and account. Both draw
// what app.js already read (/api/history for the scatter, /api/federation for the table): no
// read of their own. Loaded after app.js (its helpers: $, el, api, when, clock, state).
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
  const rows = [];
  for (const s of view.sites) {
    for (const c of s.credit) {
      const left = creditLeft(c);
      const of = c.budget ?? (c.balance !== null && c.used !== null ? c.balance + c.used : null);
      const share = of ? Math.max(0, Math.min(1, (c.used || 0) / of)) : null;
      const bar = share === null ? "" : el("span", { class: "meter", title: `${(share * 100).toFixed(0)}% used` },
        el("span", { class: "meter-used", style: `width: ${(share * 100).toFixed(1)}%` }));
      rows.push(el("tr", { class: "alloc-row", dataset: { site: s.site, account: c.account } },
        el("td", {}, s.site), el("td", {}, c.account),
        el("td", { class: "num used" }, amount(c.used, c.unit)),
        el("td", { class: "num budget" }, amount(c.budget, c.unit)),
        el("td", { class: "num left" }, amount(left, c.unit)),
        el("td", { class: "share" }, bar),
        el("td", { class: "wrap" }, c.unusable ? `not trusted: ${c.unusable}` : (left !== null && left <= 0 ? "spent: placement skips it" : ""))));
    }
  }
  const body = $("#alloc-table tbody");
  body.replaceChildren(...(rows.length ? rows : [el("tr", { class: "alloc-empty" }, el("td", { colspan: 7, class: "wrap" },
    "No site reports credit for your accounts (set accounts and a budget per site in config.toml)."))]));
}
