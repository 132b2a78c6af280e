// dethpc's read-only dashboard: renders the JSON endpoints into the page, polls every 2 s.
// Every value from the store goes in through textContent or an attribute (never innerHTML);
// learning curves are an inline <svg> drawn here (nothing loaded from elsewhere).
"use strict";

const POLL_MS = 2000;
const SVG = "http://www.w3.org/2000/svg";
let busy = false;

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== null && v !== undefined) el.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function s(tag, attrs) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, v);
  return el;
}

function fmt(v) {
  if (v === null || v === undefined) return "";
  if (typeof v === "number") return Number.isInteger(v) ? String(v) : v.toPrecision(6).replace(/\.?0+$/, "");
  if (typeof v === "object") return Object.entries(v).map(([k, x]) => `${k}=${fmt(x)}`).join(" ");
  return String(v);
}

function when(t) { return t ? new Date(t * 1000).toISOString().replace("T", " ").slice(0, 19) : ""; }

function table(headers, rows, numeric) {
  const num = new Set(numeric || []);
  return h("table", {},
    h("thead", {}, h("tr", {}, headers.map((x) => h("th", {}, x)))),
    h("tbody", {}, rows.map((r) => h("tr", {}, r.map((c, i) =>
      h("td", { class: num.has(i) ? "num" : null }, c))))));
}

function state(v) { return h("span", { class: `state ${v}` }, v); }

// ---------------------------------------------------------------- curves
function curves(series, metric, bestId) {
  const W = 720, H = 300, L = 60, R = 12, T = 12, B = 34;
  const svg = s("svg", { class: "curves", id: "curves", width: W, height: H,
                         viewBox: `0 0 ${W} ${H}`, role: "img",
                         "aria-label": `${metric} against steps` });
  const pts = series.flatMap((x) => x.points);
  if (pts.length === 0) {
    const t = s("text", { x: L, y: H / 2 }); t.textContent = `no ${metric} reported yet`;
    svg.append(t); return svg;
  }
  // loops, not Math.min(...pts): a spread of 100,000 points overflows the call stack
  let [x0, x1, y0, y1] = [Infinity, -Infinity, Infinity, -Infinity];
  for (const [x, y] of pts) {
    x0 = Math.min(x0, x); x1 = Math.max(x1, x); y0 = Math.min(y0, y); y1 = Math.max(y1, y);
  }
  if (x1 === x0) { x0 -= 1; x1 += 1; }
  if (y1 === y0) { y0 -= Math.abs(y0) * 0.05 + 1e-9; y1 += Math.abs(y1) * 0.05 + 1e-9; }
  const X = (v) => L + (v - x0) / (x1 - x0) * (W - L - R);
  const Y = (v) => H - B - (v - y0) / (y1 - y0) * (H - T - B);
  svg.append(s("line", { class: "axis", x1: L, y1: H - B, x2: W - R, y2: H - B }));
  svg.append(s("line", { class: "axis", x1: L, y1: T, x2: L, y2: H - B }));
  const label = (x, y, text, anchor) => {
    const t = s("text", { x, y, "text-anchor": anchor || "start" }); t.textContent = text; svg.append(t);
  };
  label(L - 4, T + 10, fmt(y1), "end"); label(L - 4, H - B, fmt(y0), "end");
  label(L, H - B + 14, fmt(x0)); label(W - R, H - B + 14, fmt(x1), "end");
  label((L + W) / 2, H - 4, `steps — ${metric}`, "middle");
  // the best trial last, so it is drawn on top
  const ordered = series.filter((x) => x.id !== bestId).concat(series.filter((x) => x.id === bestId));
  for (const x of ordered) {
    if (x.points.length === 0) continue;
    const d = x.points.map((p, i) => `${i ? "L" : "M"}${X(p[0]).toFixed(1)},${Y(p[1]).toFixed(1)}`).join("");
    const path = s("path", { class: x.id === bestId ? "curve best" : "curve", d, "data-trial": x.id });
    const title = s("title"); title.textContent = `trial ${x.id}`; path.append(title);
    if (x.points.length === 1) path.setAttribute("d", d + "h0.1");
    svg.append(path);
  }
  return svg;
}

// ---------------------------------------------------------------- views
async function getJSON(url) {
  const r = await fetch(url, { credentials: "same-origin", cache: "no-store" });
  const body = await r.json().catch(() => ({ error: `HTTP ${r.status}` }));
  if (!r.ok) throw new Error(body.error || `HTTP ${r.status}`);
  return body;
}

function counts(c) { return Object.entries(c || {}).map(([k, n]) => `${k} ${n}`).join(", "); }

async function listView() {
  const d = await getJSON("/api/experiments");
  return [
    h("h1", {}, d.all_users ? "Experiments (every user's: you are a dethpc admin)"
                            : `Experiments of ${d.user}`),
    d.untracked ? h("p", { class: "warn", id: "untracked" },
      `No dethpc daemon is running: the ${d.untracked} open experiment(s) below are not ` +
      "being updated. `dethpc daemon start` on the login node tracks them again.") : null,
    d.experiments.length === 0 ? h("p", { class: "muted" }, "no experiments yet") :
    table(["id", "name", "state", "progress", "trials", "owner", "created", "ended"],
      d.experiments.map((e) => [h("a", { href: `#/e/${e.id}` }, String(e.id)), e.name,
        state(e.state), `${Math.round(e.progress * 100)}%`, counts(e.trials), e.owner,
        when(e.created_at), when(e.ended_at)]), [0, 3]),
  ];
}

async function experimentView(id, page) {
  const d = await getJSON(`/api/experiments/${id}?page=${page}`);
  document.getElementById("crumbs").textContent = `› experiment ${d.id}`;
  const m = d.searcher.metric;
  const best = d.best_trial;
  const pager = h("div", { class: "pager" }, `page ${d.page.number} of ${d.page.pages} `,
    d.page.number > 1 ? h("a", { href: `#/e/${id}/${d.page.number - 1}` }, "‹ previous") : null,
    d.page.number < d.page.pages ? h("a", { href: `#/e/${id}/${d.page.number + 1}` }, "next ›") : null,
    h("span", { class: "muted" }, `(${d.page.size} trials a page, ${d.page.total_trials} in all)`));
  const out = [
    h("h1", {}, `Experiment ${d.id}: ${d.name} `, state(d.state)),
    h("div", { class: "summary" },
      h("span", {}, `progress ${Math.round(d.progress * 100)}%`),
      h("span", {}, `searcher ${d.searcher.name}, ${m} (${d.searcher.smaller_is_better ? "smaller" : "larger"} is better)`),
      h("span", {}, `trials: ${counts(d.counts) || "none yet"}`),
      h("span", {}, `owner ${d.owner}`)),
    d.message ? h("p", { class: "muted" }, d.message) : null,
    h("p", {}, best ? ["best trial ", h("a", { href: `#/t/${best.id}` }, String(best.id)),
                       `: ${m} ${fmt(best.best_validation)}`] : "no validation yet"),
    h("h2", {}, `Learning curves (${m}, trials of this page; the best trial in orange)`),
    curves(d.trials.map((t) => ({ id: t.id, points: t.curve })), m, best ? best.id : null),
    h("h2", {}, "Trials"), pager,
    table(["trial", "state", "steps", `best ${m}`, `latest ${m}`, "waiting for", "rung",
           "best checkpoint", "restarts", "slowest rank", "hyperparameters"],
      d.trials.map((t) => [h("a", { href: `#/t/${t.id}` }, String(t.id)), state(t.state),
        `${t.steps_completed}/${t.target_length}`, fmt(t.best_validation),
        fmt(t.latest_validation), t.pending_reason || "", fmt(t.rung), t.best_checkpoint || "",
        t.restarts, straggler(t.straggler), fmt(t.hparams)]), [0, 2, 3, 4, 8]),
  ];
  if (d.rungs.length) {
    out.push(h("h2", {}, "ASHA rungs"));
    for (const b of d.rungs) {
      out.push(h("p", {}, `bracket ${b.bracket}: ${b.num_rungs} rungs, up to ${b.max_trials} trials`));
      out.push(table(["rung", "length", "trials reached", "kept", "cut-off"],
        b.rungs.map((r, i) => [i, r.length, r.reached, r.keep, fmt(r.cutoff)]), [0, 1, 2, 3, 4]));
    }
  }
  out.push(h("h2", {}, `Checkpoints (${d.checkpoints.total}; the latest ${d.checkpoints.recent.length})`),
    table(["uuid", "trial", "steps", m, "created"], d.checkpoints.recent.map((c) =>
      [c.uuid, h("a", { href: `#/t/${c.trial_id}` }, String(c.trial_id)), c.steps_completed,
       fmt(c.validation_metric), when(c.created_at)]), [2, 3]),
    h("h2", {}, `Events (the latest ${d.events.length})`),
    table(["time", "trial", "kind", "message"], d.events.map((e) =>
      [when(e.time), e.trial_id === null ? "" : String(e.trial_id), e.kind, e.message])));
  return out;
}

// a multi-rank trial's straggler (slurm.stragglers): the rank, its node, how far behind
function straggler(s) {
  if (!s) return "";
  return `rank ${s.rank} on ${s.node}: ${Math.round(s.behind_pct)}% over the median ` +
    `(${Math.round(s.busy_s * 1000)} vs ${Math.round(s.median_busy_s * 1000)} ms a step)`;
}

async function trialView(id) {
  const d = await getJSON(`/api/trials/${id}`);
  const m = d.searcher.metric;
  document.getElementById("crumbs").textContent = "";
  document.getElementById("crumbs").append(
    "› ", h("a", { href: `#/e/${d.experiment_id}` }, `experiment ${d.experiment_id}`),
    ` › trial ${d.id}`);
  const points = d.validations.filter((v) => typeof v.metrics[m] === "number")
    .map((v) => [v.steps, v.metrics[m]]);
  return [
    h("h1", {}, `Trial ${d.id} `, state(d.state)),
    h("div", { class: "summary" },
      h("span", {}, `steps ${d.steps_completed}/${d.target_length}`),
      h("span", {}, `best ${m} ${fmt(d.best_validation)}`),
      h("span", {}, `restarts ${d.restarts}, runs ${d.runs}`),
      d.pending_reason ? h("span", { id: "pending" }, `waiting for: ${d.pending_reason}`) : null,
      d.exit_reason ? h("span", {}, `exit ${d.exit_reason}`) : null,
      d.straggler ? h("span", { id: "straggler" }, `slowest rank: ${straggler(d.straggler)}`) : null),
    h("p", {}, `hyperparameters: ${fmt(d.hparams)}`),
    h("h2", {}, `Learning curve (${m})`),
    curves([{ id: d.id, points }], m, d.id),
    h("h2", {}, "Jobs"),
    table(["ref", "state", "Slurm reason", "restarts", "exit", "code", "nodes"], d.jobs.map((j) =>
      [j.ref || "", j.state, j.reason || "", j.restart_count, j.exit_reason || "",
       fmt(j.exit_code), j.nodes])),
    h("h2", {}, `Checkpoints (${d.checkpoints.length})`),
    table(["uuid", "state", "steps", m, "created"], d.checkpoints.map((c) =>
      [c.uuid, c.state, c.steps_completed, fmt(c.validation_metric), when(c.created_at)]), [2, 3]),
    h("h2", {}, "Events"),
    table(["time", "kind", "message"], d.events.map((e) => [when(e.time), e.kind, e.message])),
    h("h2", {}, "Log (the tail)"),
    h("pre", { class: "log", id: "log" }, d.log_tail || "(no output yet)"),
  ];
}

async function render() {
  if (busy) return;
  busy = true;
  const status = document.getElementById("status");
  const route = location.hash.replace(/^#\/?/, "").split("/");
  try {
    let nodes;
    if (route[0] === "e" && /^\d+$/.test(route[1])) {
      nodes = await experimentView(route[1], /^\d+$/.test(route[2] || "") ? route[2] : 1);
    } else if (route[0] === "t" && /^\d+$/.test(route[1])) {
      nodes = await trialView(route[1]);
    } else {
      document.getElementById("crumbs").textContent = "";
      nodes = await listView();
    }
    const view = document.getElementById("view");
    const log = document.getElementById("log");
    const atEnd = log && log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
    view.replaceChildren(...nodes.filter((n) => n !== null));
    const fresh = document.getElementById("log");
    if (fresh && (atEnd || !log)) fresh.scrollTop = fresh.scrollHeight;
    status.textContent = `updated ${new Date().toLocaleTimeString()}`;
    document.body.dataset.loaded = "1";
  } catch (err) {
    status.textContent = "";
    status.append(h("span", { class: "error" }, `error: ${err.message}`));
  } finally {
    busy = false;
  }
}

window.addEventListener("hashchange", render);
window.addEventListener("DOMContentLoaded", () => { render(); setInterval(render, POLL_MS); });
