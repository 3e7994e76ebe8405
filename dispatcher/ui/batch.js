// A batch: progress bar, counts, tokens, ETA, its runs (GET /v1/runs?batch_id=), cancel,
// "Rerun failed" (a bulk fork, fork.js).
"use strict";
(function () {
  const { h } = RQ;

  RQ.pages.batch = function (view, batchId) {
    const ctrl = new AbortController();
    const bar = h("div", { id: "batch-bar" });
    const counts = h("div", { class: "counts", id: "batch-counts" });
    const runs = h("tbody");
    const note = h("p", { class: "muted", role: "status", id: "batch-note" });
    const badge = h("span", { id: "batch-status" });
    const cancel = h("button", { type: "button", class: "danger", id: "cancel-batch" }, "Cancel batch");
    const rerun = RQ.rerunFailed(batchId);
    view.append(
      h("div", { class: "runhead" }, h("h1", {}, "Batch ", h("span", { class: "mono" }, batchId)), badge, cancel, rerun.el),
      h("div", { class: "progress", role: "progressbar", "aria-label": "batch progress" }, bar),
      counts, note,
      h("h2", {}, "Its runs"),
      h("div", { class: "tablewrap" }, h("table", {},
        h("thead", {}, h("tr", {}, ["run", "status", "query", "iter.", "tokens", "updated"].map((t) => h("th", { scope: "col" }, t)))),
        runs)));

    cancel.addEventListener("click", async () => {
      try {
        await RQ.api(`/v1/batches/${encodeURIComponent(batchId)}/cancel`, { method: "POST" });
        note.textContent = "Cancel requested: running runs stop at their next step; lines not started are skipped.";
      } catch (err) {
        note.textContent = `Cancel failed (${err.status}): ${err.message}`;
        note.className = "error";
      }
    });

    function render(b) {
      const done = b.done ?? 0;
      const pct = b.total ? (100 * done) / b.total : 0;
      bar.style.width = `${pct.toFixed(1)}%`;
      bar.parentElement.setAttribute("aria-valuenow", pct.toFixed(0));
      badge.replaceChildren(RQ.badge(b.status));
      const ended = b.status !== "running";  // done, or cancelled (POST /v1/batches/{id}/cancel)
      const elapsed = ((ended ? b.updated_at : Date.now() / 1000) - b.created_at);
      const rate = done / Math.max(elapsed, 1e-3);
      const eta = ended ? b.status : done ? RQ.fmtSecs((b.total - done) / rate) : "–";
      const cell = (label, v) => h("div", { dataset: { count: label } }, h("b", {}, String(v ?? 0)), label);
      counts.replaceChildren(cell("total", b.total), cell("succeeded", b.succeeded), cell("failed", b.failed),
        cell("invalid", b.invalid), cell("skipped", b.skipped ?? 0), cell("running", b.running),
        cell("queued", b.queued), cell("tokens", b.tokens), h("div", {}, h("b", {}, eta), "ETA"));
      cancel.disabled = b.status !== "running";
      rerun.update(b);
    }

    async function refresh() {
      const b = await RQ.api(`/v1/batches/${encodeURIComponent(batchId)}`, { signal: ctrl.signal });
      render(b);
      const list = await RQ.api(`/v1/runs?batch_id=${encodeURIComponent(batchId)}&limit=200`, { signal: ctrl.signal });
      runs.replaceChildren(...list.runs.map((r) => h("tr", {},
        h("td", {}, h("a", { class: "mono", href: `#/run/${encodeURIComponent(r.run_id)}` }, r.run_id.slice(0, 12))),
        h("td", {}, RQ.badge(r.status)), h("td", { class: "q", title: r.query }, r.query),
        h("td", {}, String(r.iterations ?? 0)), h("td", {}, String(RQ.tokens(r.usage))), h("td", {}, RQ.fmtTime(r.updated_at)))));
      return b.status;
    }

    (async () => {
      while (!ctrl.signal.aborted) {
        try {
          if ((await refresh()) !== "running") break;
        } catch (err) {
          if (ctrl.signal.aborted) return;
          note.textContent = err.status === 404 ? "No such batch (it may have expired)." : `Could not read the batch: ${err.message}`;
          if (err.status === 404) return;
        }
        await RQ.sleep(1000, ctrl.signal);
      }
    })();
    return () => ctrl.abort();
  };
})();
