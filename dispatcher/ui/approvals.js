// A run's pending approvals on its page: the call's arguments, why it waits, when it
// expires, and Approve / Reject / Edit. A decision names the digest of the arguments shown
// (a request that changed meanwhile is refused: 409), and is taken once.
"use strict";
(function () {
  const { h } = RQ;

  RQ.approvalsPanel = function (runId) {
    const list = h("div", { class: "approvals", id: "approvals", "aria-label": "approvals" });
    const note = h("p", { class: "muted", role: "status", id: "approval-note" });
    const el = h("section", { "aria-label": "approvals", id: "approvals-section", hidden: true },
      h("h2", {}, "Waiting for you"), list, note);
    const base = `/v1/runs/${encodeURIComponent(runId)}/approvals`;

    async function decide(a, body) {
      try {
        const res = await RQ.api(`${base}/${encodeURIComponent(a.approval_id)}`,
          { method: "POST", json: { args_digest: a.args_digest, by: "viewer", ...body } });
        note.textContent = `${a.tool_name}: ${res.status}`;
      } catch (err) { note.textContent = `Not decided: ${err.message}`; }
      await refresh();
    }

    function card(a) {
      const args = h("textarea", { class: "mono", rows: 4, "aria-label": "arguments", readonly: true },
        JSON.stringify(a.tool_args, null, 2));
      const message = h("input", { type: "text", placeholder: "a message for the model (optional)", "aria-label": "message" });
      const approve = h("button", { type: "button", class: "approve" }, "Approve");
      const reject = h("button", { type: "button", class: "danger reject" }, "Reject");
      const edit = h("button", { type: "button", class: "edit" }, "Edit");
      approve.addEventListener("click", () => {
        if (args.readOnly) return decide(a, { decision: "approve" });
        let parsed;
        try { parsed = JSON.parse(args.value); } catch (err) { note.textContent = `Arguments are not JSON: ${err.message}`; return; }
        return decide(a, { decision: "edit", args: parsed });
      });
      reject.addEventListener("click", () => decide(a, { decision: "reject", message: message.value || null }));
      edit.addEventListener("click", () => { args.readOnly = false; args.focus(); approve.textContent = "Approve edited"; });
      return h("article", { class: "card approval", dataset: { approvalId: a.approval_id } },
        h("div", { class: "head" }, h("span", { class: "name" }, a.tool_name), RQ.badge(a.status),
          h("span", { class: "t" }, `expires ${RQ.fmtTime(a.expires_at)}`)),
        h("p", { class: "muted" }, a.reason || ""), args, message, h("div", { class: "row" }, approve, edit, reject));
    }

    async function refresh() {
      try {
        const got = await RQ.api(base);
        const pending = got.approvals.filter((a) => a.status === "pending");
        list.replaceChildren(...pending.map(card));
        el.hidden = pending.length === 0;
      } catch (err) { note.textContent = `Could not list approvals: ${err.message}`; }
    }
    return { el, refresh };
  };
})();
