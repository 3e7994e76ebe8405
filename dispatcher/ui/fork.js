// Forks from the viewer: the run page's Fork (the dry-run plan first, then "Create fork"),
// the batch page's "Rerun failed" (the counts first, then the new batch).
"use strict";
(function () {
  const { h } = RQ;

  function planTable(plan) {
    if (!plan.calls.length) return h("p", { class: "muted" }, "The parent made no tool call from that turn on.");
    return h("div", { class: "tablewrap" }, h("table", { id: "fork-plan" },
      h("thead", {}, h("tr", {}, ["turn", "call", "tool", "ledger", "idempotent", "if made again"].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, ...plan.calls.map((c) => h("tr", {},
        h("td", {}, String(c.turn)), h("td", { class: "mono" }, c.tool_call_id), h("td", {}, c.tool_name),
        h("td", {}, RQ.badge(c.ledger)), h("td", {}, c.idempotent ? "yes" : "no"), h("td", {}, RQ.badge(c.if_repeated)))))));
  }

  // The run page's fork panel: `status()` is the run's status now (a fork needs a run that ended).
  RQ.forkPanel = function (runId, status) {
    const note = h("p", { class: "muted", role: "status", id: "fork-note" });
    const plan = h("div", { id: "fork-plan-box" });
    const from = h("select", { id: "fork-from" }, h("option", { value: "last_failure" }, "its last failure"),
      h("option", { value: "last_turn" }, "its last turn"));
    const reuse = h("select", { id: "fork-reuse" }, h("option", { value: "effects" }, "effects (non-idempotent calls)"),
      h("option", { value: "all" }, "all recorded calls"), h("option", { value: "none" }, "none"));
    const message = h("input", { id: "fork-message", placeholder: "a message before the fork's first turn (optional)" });
    const show = h("button", { type: "button", id: "fork-run" }, "Fork…");
    const create = h("button", { type: "button", id: "fork-confirm", hidden: true }, "Create fork");
    const body = () => {
      const b = { from: from.value, reuse: reuse.value };
      if (message.value.trim()) b.edit = { message: message.value.trim() };
      return b;
    };
    const post = (extra) => RQ.api(`/v1/runs/${encodeURIComponent(runId)}/fork`, { method: "POST", json: { ...body(), ...extra } });
    show.addEventListener("click", async () => {
      try {
        const got = await post({ dry_run: true });
        plan.replaceChildren(h("p", {}, `A fork starts at turn ${got.plan.turn} with ${got.plan.history_messages} messages of this run's history.`),
          planTable(got.plan));
        create.hidden = false;
        note.textContent = "";
      } catch (err) { note.textContent = `No fork: ${err.message}`; create.hidden = true; }
    });
    create.addEventListener("click", async () => {
      try {
        const got = await post({});
        location.hash = `#/run/${encodeURIComponent(got.run_id)}`;
      } catch (err) { note.textContent = `No fork: ${err.message}`; }
    });
    const el = h("details", { class: "box", id: "fork-box" }, h("summary", {}, "Fork this run"),
      h("div", { class: "row" }, h("label", { for: "fork-from" }, "from"), from, h("label", { for: "fork-reuse" }, "reuse"), reuse),
      message, h("div", { class: "row" }, show, create), plan, note);
    const refresh = () => { show.disabled = !["succeeded", "failed", "cancelled"].includes(status()); };
    if (status() !== "failed") from.value = "last_turn";
    refresh();
    return { el, refresh, setFrom: (v) => { from.value = v; } };
  };

  // The batch page's "Rerun failed": the counts first (a dry run), then the new batch.
  RQ.rerunFailed = function (batchId) {
    const note = h("p", { class: "muted", role: "status", id: "rerun-note" });
    const ask = h("button", { type: "button", id: "rerun-failed" }, "Rerun failed");
    const confirm = h("button", { type: "button", id: "rerun-confirm", hidden: true }, "Fork them");
    const post = (dry) => RQ.api(`/v1/batches/${encodeURIComponent(batchId)}/fork`, { method: "POST", json: { dry_run: dry } });
    ask.addEventListener("click", async () => {
      try {
        const got = await post(true);
        note.textContent = `${got.forked} failed line(s) would be forked from their last failure; ${got.kept} kept as they are.`;
        confirm.hidden = got.forked === 0;
      } catch (err) { note.textContent = `Cannot rerun: ${err.message}`; }
    });
    confirm.addEventListener("click", async () => {
      try {
        const got = await post(false);
        location.hash = `#/batch/${encodeURIComponent(got.batch_id)}`;
      } catch (err) { note.textContent = `Cannot rerun: ${err.message}`; }
    });
    return { el: h("span", { class: "row" }, ask, confirm, note),
      update: (b) => { ask.disabled = b.status === "running" || !b.failed; } };
  };
})();
