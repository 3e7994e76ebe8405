// The Runs page: the last hour's dashboard (computed by the server), and the live run table.
"use strict";
(function () {
  const { h, s } = RQ;
  const POLL_MS = 500; // the table: a new run shows within a second
  const DASH_MS = 5000; // the dashboard
  const ENDED = ["succeeded", "failed", "cancelled"];

  // A small chart: one polyline per series over the hour's minutes, the headline above it.
  function chart(key, title, headline, lines, minutes) {
    const W = 300;
    const H = 70;
    const max = Math.max(1e-9, ...lines.flatMap((l) => l.values));
    const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img", "aria-label": title });
    const n = Math.max(1, minutes - 1);
    lines.forEach((l, i) => {
      const pts = l.values.map((v, j) => `${((j / n) * W).toFixed(1)},${(H - 4 - (v / max) * (H - 8)).toFixed(1)}`);
      if (pts.length > 1) svg.append(s("polyline", { class: `c${l.c ?? i}`, points: pts.join(" ") }));
    });
    return h("div", { class: "chart", dataset: { fig: key } },
      h("h3", {}, title),
      h("div", { class: "now" }, headline),
      svg,
      h("div", { class: "legend" }, lines.map((l, i) => h("span", { class: `c${l.c ?? i}` }, "■ " + l.name))));
  }

  // A figure without a chart (what is true now, not a series).
  function figure(key, title, headline, detail) {
    return h("div", { class: "chart", dataset: { fig: key } },
      h("h3", {}, title), h("div", { class: "now" }, headline), h("div", { class: "legend muted" }, detail));
  }

  const num = (v) => (v === null || v === undefined ? "–" : Number(v).toLocaleString());
  const rate = (v) => (v >= 100 ? v.toFixed(0) : v.toFixed(2));

  // The dashboard from GET /v1/ui/dashboard: computed on the server from what the workers
  // record, so a page opened after the work happened shows the same hour.
  function renderDash(box, d) {
    const mins = d.minutes;
    const per = (st) => mins.map((m) => m.counts[st] || 0);
    const other = mins.map((m) => Object.entries(m.counts).filter(([st]) => !ENDED.includes(st))
      .reduce((a, [, v]) => a + v, 0));
    const statuses = Object.entries(d.by_status).sort((a, b) => b[1] - a[1]);
    const q = d.queue_depth;
    const waiting = q ? Object.values(q).reduce((a, v) => a + v, 0) : null;
    const t = d.turn_seconds;
    const inflight = d.in_flight === null || d.in_flight === undefined ? "" : ` · ${d.in_flight} in flight`;
    box.replaceChildren(
      chart("runs", "Runs per minute (last hour)", `${rate(d.runs_per_minute)} / min · ${num(d.runs)} runs`, [
        { name: "succeeded", values: per("succeeded"), c: 0 }, { name: "failed", values: per("failed"), c: 1 },
        { name: "cancelled", values: per("cancelled"), c: 2 }, { name: "not ended", values: other, c: 3 }],
      mins.length),
      figure("status", "Runs by status (last hour)",
        statuses.length ? statuses.map(([st, n]) => `${n} ${st}`).join(" · ") : "none",
        d.truncated ? "the newest runs of a busy hour" : ""),
      chart("tokens", "Tokens (last hour)", `${num(d.tokens.total)} tokens`,
        [{ name: "tokens per minute", values: mins.map((m) => m.tokens), c: 3 }], mins.length),
      figure("queue", "Queue depth", q ? `${num(waiting)} waiting` : "–",
        Object.entries(q || {}).map(([k, v]) => `${k}: ${v}`).join(" · ") + inflight),
      figure("turns", "Turn time p50 / p95", t && t.count ? `${RQ.fmtSecs(t.p50)} / ${RQ.fmtSecs(t.p95)}` : "–",
        t ? `${num(t.count)} turns recorded` : ""));
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
        renderDash(dash, await RQ.api("/v1/ui/dashboard", { signal: ctrl.signal }));
      } catch (err) {
        if (!ctrl.signal.aborted) dash.replaceChildren(RQ.notice(`dashboard unavailable: ${err.message}`));
      }
    }

    (async () => {
      scrape();
      let lastScrape = Date.now();
      while (!ctrl.signal.aborted) {
        if (!document.hidden) {
          if (page === 0) await refresh();
          if (Date.now() - lastScrape > DASH_MS) { lastScrape = Date.now(); scrape(); }
        }
        await RQ.sleep(POLL_MS, ctrl.signal);
      }
    })();
    return () => ctrl.abort();
  };
})();
