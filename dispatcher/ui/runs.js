// The Runs page: a dashboard from /metrics over the last hour, and the live run table.
"use strict";
(function () {
  const { h, s } = RQ;
  const HOUR = 3600 * 1000;
  const SAMPLES_KEY = "reactq.metrics";
  const POLL_MS = 500; // the table: a new run shows within a second
  const SCRAPE_MS = 5000; // the dashboard

  // -- /metrics: Prometheus text → {name: [{labels, value}]} ------------------------------
  function parseProm(text) {
    const out = {};
    for (const line of text.split("\n")) {
      if (!line || line[0] === "#") continue;
      const m = line.match(/^([a-zA-Z_:][\w:]*)(\{(.*)\})?\s+(\S+)/);
      if (!m) continue;
      const labels = {};
      for (const lm of (m[3] || "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[lm[1]] = lm[2];
      (out[m[1]] ||= []).push({ labels, value: parseFloat(m[4]) });
    }
    return out;
  }
  const sum = (rows, pred = () => true) => (rows || []).filter((r) => pred(r.labels)).reduce((a, r) => a + r.value, 0);

  // One sample = the cumulative figures the charts need at one instant.
  function sample(prom) {
    const ended = {};
    for (const st of ["succeeded", "failed", "cancelled"]) {
      ended[st] = sum(prom.reactq_runs_ended_total, (l) => l.status === st);
    }
    const buckets = {};
    for (const r of prom.reactq_turn_seconds_bucket || []) {
      buckets[r.labels.le] = (buckets[r.labels.le] || 0) + r.value;
    }
    return {
      t: Date.now(), ended, tokens: sum(prom.reactq_llm_tokens_total),
      queue: sum(prom.reactq_queue_depth), inflight: sum(prom.reactq_runs_in_flight), buckets,
    };
  }

  // The quantile q of the turns observed between two samples (histogram bucket deltas).
  function quantile(a, b, q) {
    const bound = (le) => (le === "+Inf" ? Infinity : parseFloat(le));
    const les = Object.keys(b.buckets).sort((x, y) => bound(x) - bound(y));
    const total = (b.buckets["+Inf"] || 0) - (a.buckets["+Inf"] || 0);
    if (total <= 0) return null;
    let prevLe = 0;
    let prevCount = 0;
    for (const le of les) {
      const c = (b.buckets[le] || 0) - (a.buckets[le] || 0);
      if (c >= q * total) {
        if (le === "+Inf") return prevLe;
        const hi = bound(le);
        const inBucket = c - prevCount;
        return inBucket > 0 ? prevLe + (hi - prevLe) * ((q * total - prevCount) / inBucket) : hi;
      }
      prevLe = bound(le);
      prevCount = c;
    }
    return prevLe;
  }

  function loadSamples() {
    try { return JSON.parse(sessionStorage.getItem(SAMPLES_KEY) || "[]"); } catch (_) { return []; }
  }

  // Per-minute series from consecutive samples (a counter reset counts as zero).
  function series(samples) {
    const pts = { succeeded: [], failed: [], cancelled: [], tokens: [], queue: [], p50: [], p95: [] };
    for (let i = 1; i < samples.length; i++) {
      const a = samples[i - 1];
      const b = samples[i];
      const mins = (b.t - a.t) / 60000;
      if (mins <= 0) continue;
      const rate = (x, y) => Math.max(0, y - x) / mins;
      for (const st of ["succeeded", "failed", "cancelled"]) pts[st].push([b.t, rate(a.ended[st], b.ended[st])]);
      pts.tokens.push([b.t, rate(a.tokens, b.tokens)]);
      pts.queue.push([b.t, b.queue]);
      const p50 = quantile(a, b, 0.5);
      const p95 = quantile(a, b, 0.95);
      if (p50 !== null) pts.p50.push([b.t, p50]);
      if (p95 !== null) pts.p95.push([b.t, p95]);
    }
    return pts;
  }

  function chart(title, lines, fmt) {
    const W = 300;
    const H = 70;
    const now = Date.now();
    const all = lines.flatMap((l) => l.pts.map((p) => p[1]));
    const max = Math.max(1e-9, ...all);
    const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img", "aria-label": title });
    lines.forEach((l, i) => {
      const pts = l.pts.map(([t, v]) => `${(((t - now + HOUR) / HOUR) * W).toFixed(1)},${(H - 4 - (v / max) * (H - 8)).toFixed(1)}`);
      if (pts.length > 1) svg.append(s("polyline", { class: `c${l.c ?? i}`, points: pts.join(" ") }));
      else if (pts.length === 1) {
        const [cx, cy] = pts[0].split(",");
        svg.append(s("circle", { class: `c${l.c ?? i} dot`, cx, cy, r: 2.5 }));
      }
    });
    const latest = lines.map((l) => (l.pts.length ? l.pts[l.pts.length - 1][1] : null));
    return h("div", { class: "chart" },
      h("h3", {}, title),
      h("div", { class: "now" }, latest.map((v) => (v === null ? "–" : fmt(v))).join(" / ")),
      svg,
      h("div", { class: "legend" }, lines.map((l, i) => h("span", { class: `c${l.c ?? i}` }, "■ " + l.name))));
  }

  function renderDash(box, samples) {
    const p = series(samples);
    const n = (v) => (v >= 100 ? v.toFixed(0) : v.toFixed(1));
    box.replaceChildren(
      chart("Runs per minute (last hour)", [
        { name: "succeeded", pts: p.succeeded, c: 0 }, { name: "failed", pts: p.failed, c: 1 },
        { name: "cancelled", pts: p.cancelled, c: 2 }], n),
      chart("Tokens per minute", [{ name: "tokens", pts: p.tokens, c: 3 }], n),
      chart("Queue depth", [{ name: "waiting", pts: p.queue, c: 2 }], (v) => v.toFixed(0)),
      chart("Turn time p50 / p95", [{ name: "p50", pts: p.p50, c: 0 }, { name: "p95", pts: p.p95, c: 2 }],
        (v) => RQ.fmtSecs(v)));
  }

  function runRow(run, fresh) {
    return h("tr", { class: fresh ? "fresh" : null, dataset: { runId: run.run_id } },
      h("td", {}, h("a", { href: `#/run/${encodeURIComponent(run.run_id)}`, class: "mono" }, run.run_id.slice(0, 12))),
      h("td", {}, RQ.badge(run.status)),
      h("td", { class: "q", title: run.query }, run.query),
      h("td", {}, run.model || ""),
      h("td", {}, String(run.iterations ?? 0)),
      h("td", {}, String(RQ.tokens(run.usage))),
      h("td", {}, RQ.fmtTime(run.created_at)),
      h("td", {}, run.batch_id ? h("a", { href: `#/batch/${encodeURIComponent(run.batch_id)}` }, "batch")
        : run.schedule_id ? h("span", { class: "mono", title: run.scheduled_for ? `tick ${run.scheduled_for}` : "triggered" },
          `schedule ${run.schedule_id}`) : ""));
  }

  RQ.pages.runs = function (view) {
    const ctrl = new AbortController();
    const filters = { status: "", batch_id: "", thread_id: "", schedule_id: "" };
    const pages = [null]; // cursors of the pages seen (null = the newest)
    let page = 0;
    let known = new Set();
    let firstLoad = true;

    const dash = h("div", { class: "dash", "aria-label": "dashboard" });
    const body = h("tbody");
    const status = h("p", { class: "muted conn", role: "status" });
    const older = h("button", { type: "button", class: "ghost", onclick: () => { page++; refresh(); } }, "Older →");
    const newer = h("button", { type: "button", class: "ghost", onclick: () => { page = Math.max(0, page - 1); refresh(); } }, "← Newer");
    const field = (name, label, el) => {
      el.id = `f-${name}`;
      el.addEventListener("change", () => { filters[name] = el.value.trim(); page = 0; pages.length = 1; refresh(); });
      return h("label", { for: el.id }, label, el);
    };
    const statusSel = h("select", {}, ["", "queued", "running", "waiting", "succeeded", "failed", "cancelled"].map(
      (v) => h("option", { value: v }, v || "any")));
    view.append(
      h("h1", {}, "Runs"), dash,
      h("div", { class: "filters" },
        field("status", "status", statusSel),
        field("batch_id", "batch id", h("input", { placeholder: "any", spellcheck: "false" })),
        field("thread_id", "thread id", h("input", { placeholder: "any", spellcheck: "false" })),
        field("schedule_id", "schedule id", h("input", { placeholder: "any", spellcheck: "false" })),
        h("span", { class: "row" }, newer, older)),
      h("div", { class: "tablewrap" }, h("table", { id: "runs-table" },
        h("thead", {}, h("tr", {}, ["run", "status", "query", "model", "iter.", "tokens", "created", ""].map((t) => h("th", { scope: "col" }, t)))),
        body)),
      status);

    async function refresh() {
      const q = new URLSearchParams({ limit: "25" });
      for (const [k, v] of Object.entries(filters)) if (v) q.set(k, v);
      if (pages[page]) q.set("cursor", pages[page]);
      try {
        const res = await RQ.api(`/v1/runs?${q}`, { signal: ctrl.signal });
        pages[page + 1] = res.next_cursor;
        body.replaceChildren(...res.runs.map((r) => runRow(r, !firstLoad && !known.has(r.run_id))));
        known = new Set(res.runs.map((r) => r.run_id));
        firstLoad = false;
        if (!res.runs.length) body.append(h("tr", {}, h("td", { colspan: 8, class: "muted" }, "No runs.")));
        older.disabled = !res.next_cursor;
        newer.disabled = page === 0;
        status.textContent = `Updated ${new Date().toLocaleTimeString()}`;
      } catch (err) {
        if (!ctrl.signal.aborted) status.textContent = `Could not list runs: ${err.message}`;
      }
    }

    async function scrape() {
      try {
        const text = await RQ.api("/metrics", { raw: true, signal: ctrl.signal });
        const samples = loadSamples().filter((x) => x.t > Date.now() - HOUR);
        samples.push(sample(parseProm(text)));
        sessionStorage.setItem(SAMPLES_KEY, JSON.stringify(samples));
        renderDash(dash, samples);
      } catch (err) {
        if (!ctrl.signal.aborted) dash.replaceChildren(RQ.notice(`metrics unavailable: ${err.message}`));
      }
    }

    (async () => {
      scrape();
      let lastScrape = Date.now();
      while (!ctrl.signal.aborted) {
        if (!document.hidden) {
          if (page === 0) await refresh();
          if (Date.now() - lastScrape > SCRAPE_MS) { lastScrape = Date.now(); scrape(); }
        }
        await RQ.sleep(POLL_MS, ctrl.signal);
      }
    })();
    return () => ctrl.abort();
  };
  RQ.parseProm = parseProm;
  RQ.quantile = quantile;
})();
