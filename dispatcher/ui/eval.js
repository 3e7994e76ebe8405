// Evals: the list (#/evals) and one eval case by case (#/eval/{id}): per evaluator its pass
// rate and mean, the counts, the runs' cost and the judge's apart, latency; then every case
// with its status, each evaluator's verdict (the reason on hover) and its run.
"use strict";
(function () {
  const { h } = RQ;
  const pct = (v) => (v === null || v === undefined ? "–" : `${(100 * v).toFixed(1)}%`);
  const usd = (v) => `$${Number(v || 0).toFixed(4)}`;

  RQ.pages.evals = function (view) {
    const ctrl = new AbortController();
    const rows = h("tbody");
    view.append(h("h1", {}, "Evals"), h("div", { class: "tablewrap" }, h("table", {},
      h("thead", {}, h("tr", {}, ["eval", "name", "status", "cases", "pass rate", "created"].map((t) => h("th", { scope: "col" }, t)))),
      rows)));
    RQ.api("/v1/evals?limit=100", { signal: ctrl.signal }).then((page) => {
      rows.replaceChildren(...page.evals.map((e) => h("tr", {},
        h("td", {}, h("a", { class: "mono", href: `#/eval/${encodeURIComponent(e.eval_id)}` }, e.eval_id.slice(0, 12))),
        h("td", {}, e.name || ""), h("td", {}, RQ.badge(e.status)), h("td", {}, String(e.total)),
        h("td", {}, pct(e.pass_rate)), h("td", {}, RQ.fmtTime(e.created_at)))));
    }).catch((err) => { if (!ctrl.signal.aborted) view.append(RQ.notice(`Could not list evals: ${err.message}`, "error")); });
    return () => ctrl.abort();
  };

  RQ.pages.eval = function (view, evalId) {
    const ctrl = new AbortController();
    const badge = h("span", { id: "eval-status" });
    const scores = h("tbody");
    const counts = h("div", { class: "counts", id: "eval-counts" });
    const cases = h("tbody");
    const note = h("p", { class: "muted", role: "status" });
    view.append(
      h("div", { class: "runhead" }, h("h1", {}, "Eval ", h("span", { class: "mono" }, evalId)), badge),
      counts, note,
      h("h2", {}, "Evaluators"),
      h("div", { class: "tablewrap" }, h("table", { id: "eval-scores" },
        h("thead", {}, h("tr", {}, ["evaluator", "pass rate", "mean", "scored"].map((t) => h("th", { scope: "col" }, t)))),
        scores)),
      h("h2", {}, "Cases"),
      h("div", { class: "tablewrap" }, h("table", { id: "eval-cases" },
        h("thead", {}, h("tr", {}, ["case", "status", "scores", "answer", "turns", "cost", "run"].map((t) => h("th", { scope: "col" }, t)))),
        cases)));

    function render(e) {
      badge.replaceChildren(RQ.badge(e.status));
      const c = e.counts || {};
      const cell = (label, v) => h("div", { dataset: { count: label } }, h("b", {}, String(v ?? 0)), label);
      counts.replaceChildren(cell("cases", c.total), cell("passed", c.passed), h("div", {}, h("b", {}, pct(e.pass_rate)), "pass rate"),
        cell("failed", c.failed), cell("invalid", c.invalid), h("div", {}, h("b", {}, usd(e.cost_usd)), "cost"),
        h("div", {}, h("b", {}, usd(e.judge_cost_usd)), "judge"),
        h("div", {}, h("b", {}, RQ.fmtSecs((e.latency_ms?.p50 ?? NaN) / 1000)), "p50"),
        h("div", {}, h("b", {}, RQ.fmtSecs((e.latency_ms?.p95 ?? NaN) / 1000)), "p95"));
      scores.replaceChildren(...Object.entries(e.scores || {}).map(([name, s]) => h("tr", {},
        h("td", {}, name), h("td", {}, pct(s.pass_rate)), h("td", {}, s.mean === null ? "–" : s.mean.toFixed(3)),
        h("td", {}, String(s.scored)))));
    }

    function verdicts(rec) {
      return h("span", {}, ...Object.entries(rec.scores || {}).map(([name, s]) =>
        h("span", { class: `badge st-${s.passed ? "succeeded" : "failed"}`, title: s.reason || "" }, `${name} ${s.value}`)));
    }

    async function refresh() {
      const e = await RQ.api(`/v1/evals/${encodeURIComponent(evalId)}`, { signal: ctrl.signal });
      render(e);
      const page = await RQ.api(`/v1/evals/${encodeURIComponent(evalId)}/cases?limit=500`, { signal: ctrl.signal });
      cases.replaceChildren(...page.cases.map((r) => h("tr", { dataset: { case: r.case_id ?? "" } },
        h("td", { class: "mono" }, r.case_id ?? `line ${r.line}`), h("td", {}, RQ.badge(r.passed ? "passed" : r.status)),
        h("td", {}, verdicts(r)), h("td", { class: "q", title: r.answer || r.error || "" }, r.answer || r.error || ""),
        h("td", {}, String(r.turns ?? 0)), h("td", {}, usd(r.cost_usd)),
        h("td", {}, r.run_id ? h("a", { class: "mono", href: `#/run/${encodeURIComponent(r.run_id)}` }, r.run_id.slice(0, 12)) : ""))));
      note.textContent = page.next_cursor ? "The first 500 cases are shown." : "";
      return e.status;
    }

    (async () => {
      while (!ctrl.signal.aborted) {
        try {
          if ((await refresh()) !== "running") break;
        } catch (err) {
          if (ctrl.signal.aborted) return;
          note.textContent = err.status === 404 ? "No such eval (it may have expired)." : `Could not read the eval: ${err.message}`;
          if (err.status === 404) return;
        }
        await RQ.sleep(1000, ctrl.signal);
      }
    })();
    return () => ctrl.abort();
  };
})();
