// A run, live: a card per thinking step and per tool call, the answer streaming token by
// token, the done footer; interrupt box, cancel button, Flower link. Reconnects by itself
// (Last-Event-ID) and shows each event once (by seq).
"use strict";
(function () {
  const { h } = RQ;
  const TERMINAL = ["succeeded", "failed", "cancelled"];

  function toolCard(d) {
    const card = h("article", { class: "card tool pending", dataset: { callId: d.tool_call_id || "" } });
    card.head = h("div", { class: "head" },
      h("span", { class: "name" }, d.tool_name || "tool"), h("span", { class: "tags" }, RQ.badge("running")),
      h("span", { class: "t" }, `iteration ${d.iteration ?? ""}`));
    card.args = h("pre", { class: "args" }, RQ.json(d.tool_args ?? {}));
    card.obs = h("div", { class: "obs" });
    card.append(card.head, h("details", { open: true }, h("summary", {}, "arguments"), card.args), card.obs);
    return card;
  }

  function finishTool(card, d) {
    const tags = card.querySelector(".tags");
    const kinds = [];
    if (d.blocked) kinds.push("blocked");
    else if (d.error) kinds.push("error");
    if (d.uncertain) kinds.push("uncertain");
    if (d.reused) kinds.push("reused");
    card.classList.remove("pending");
    if (kinds.includes("error")) card.classList.add("err");
    for (const k of ["blocked", "uncertain"]) if (kinds.includes(k)) card.classList.add(k);
    tags.replaceChildren(...(kinds.length ? kinds : ["done"]).map((k) => RQ.badge(k)));
    card.querySelector(".t").textContent = `iteration ${d.iteration ?? ""} · ${RQ.fmtSecs(d.iter_elapsed)}`;
    const obs = d.observation ?? "";
    card.obs.replaceChildren(
      ...(d.error ? [h("p", { class: "error" }, d.error)] : []),
      h("details", { open: obs.length < 2000 }, h("summary", {}, `observation (${obs.length} chars)`),
        h("pre", { class: "observation" }, obs)));
  }

  RQ.pages.run = function (view, runId) {
    const ctrl = new AbortController();
    let maxSeq = 0;
    let ended = false;
    const cards = h("div", { class: "cards", "aria-label": "steps" });
    const answer = h("div", { class: "answer", id: "answer", "aria-live": "polite" });
    const footer = h("div", { class: "footer", id: "footer" });
    const conn = h("span", { class: "conn muted", id: "conn", role: "status" }, "connecting…");
    const statusBox = h("span", { id: "run-status" });
    const log = h("ol", { class: "mono", id: "event-log" });
    const thinking = new Map();
    const tools = new Map();
    const note = h("p", { class: "muted", role: "status", id: "run-note" });
    const ta = h("textarea", { id: "interrupt-text", placeholder: "A message for the run: it reaches the run's next LLM request" });
    const send = h("button", { type: "submit", id: "interrupt-send" }, "Send");
    const cancel = h("button", { type: "button", class: "danger", id: "cancel-run" }, "Cancel run");
    // Flower's task page takes only state/worker/name from its URL: the run's tasks are
    // found by typing the search shown here (Flower's own syntax) into its search box.
    const flower = RQ.config.flower_url
      ? h("span", { id: "flower" }, h("a", { href: `${RQ.config.flower_url.replace(/\/$/, "")}/tasks`, target: "_blank", rel: "noopener" }, "Tasks in Flower ↗"),
        " ", h("code", { title: "paste into Flower's search box" }, `args:${runId}`))
      : h("span", { class: "muted" }, "Flower: set REACTQ_FLOWER_URL to link it");
    const approvals = RQ.approvalsPanel(runId);
    let current = "";
    const fork = RQ.forkPanel(runId, () => current);
    const head = h("div", { class: "runhead" }, h("h1", {}, "Run ", h("span", { class: "mono" }, runId)), statusBox, conn, flower);
    view.append(head,
      h("div", { class: "cols" },
        h("section", { "aria-label": "steps" }, h("h2", {}, "Steps"), cards),
        h("section", { "aria-label": "answer" }, approvals.el, h("h2", {}, "Answer"), answer, footer,
          h("form", { class: "box", id: "interrupt-form", onsubmit: onInterrupt },
            h("label", { for: "interrupt-text" }, "Talk to the run"), ta, h("div", { class: "row" }, send, cancel)),
          note, fork.el,
          h("details", {}, h("summary", {}, "raw events"), log))));

    const setStatus = (st) => {
      current = st;
      fork.setFrom(st === "failed" ? "last_failure" : "last_turn");
      fork.refresh();
      statusBox.replaceChildren(RQ.badge(st));
      if (TERMINAL.includes(st)) { ended = true; send.disabled = true; cancel.disabled = true; }
    };

    async function onInterrupt(e) {
      e.preventDefault();
      const content = ta.value.trim();
      if (!content) return;
      try {
        await RQ.api(`/v1/runs/${encodeURIComponent(runId)}/interrupts`, { method: "POST", json: { content } });
        ta.value = "";
        note.textContent = "Sent: the run takes it at its next step.";
      } catch (err) { note.textContent = `Not sent: ${err.message}`; }
    }
    cancel.addEventListener("click", async () => {
      try {
        const res = await RQ.api(`/v1/runs/${encodeURIComponent(runId)}/cancel`, { method: "POST" });
        note.textContent = `Cancel requested (status now ${res.status}).`;
      } catch (err) { note.textContent = `Cancel failed: ${err.message}`; }
    });

    function onEvent(channel, d, id) {
      if (typeof d.seq === "number") {
        if (d.seq <= maxSeq) return; // a repeat after a reconnect: shown once only
        maxSeq = d.seq;
      }
      log.append(h("li", { dataset: { seq: d.seq ?? "", channel } }, `${id || ""} ${channel} ${JSON.stringify(d).slice(0, 300)}`));
      if (channel === "step" && d.type === "thinking") {
        let c = thinking.get(d.iteration);
        if (!c) {
          c = h("article", { class: "card thinking" }, h("div", { class: "head" }, h("span", { class: "name" }, "Thinking"),
            h("span", { class: "t" }, `iteration ${d.iteration}`)));
          c.body = h("div", { class: "muted" }, "…");
          c.append(c.body);
          thinking.set(d.iteration, c);
          cards.append(c);
        }
        if (d.status === "done") c.body.replaceChildren(d.reasoning ? h("pre", {}, d.reasoning) : h("span", { class: "muted" }, "(no reasoning text)"));
      } else if (channel === "step" && d.type === "iteration") {
        let c = tools.get(d.tool_call_id);
        if (!c) { c = toolCard(d); tools.set(d.tool_call_id, c); cards.append(c); }
        if (d.status === "done") finishTool(c, d);
      } else if (channel === "step" && d.type === "answer") {
        cards.append(h("article", { class: "card" }, h("div", { class: "head" }, h("span", { class: "name" }, "Answering"))));
      } else if (channel === "answer" && d.status === "delta") {
        answer.append(h("span", { class: "delta", dataset: { seq: d.seq } }, d.content));
      } else if (channel === "approval") {
        const c = tools.get(d.tool_call_id);
        if (c) c.querySelector(".tags").replaceChildren(RQ.badge(d.status === "requested" ? "waiting" : d.status));
        setStatus(d.status === "requested" ? "waiting" : "running");
        approvals.refresh();
      } else if (channel === "fork") {
        const p = d.forked_from || {};
        cards.append(h("p", { class: "muted", id: "forked-from" }, "Forked from run ",
          h("a", { class: "mono", href: `#/run/${encodeURIComponent(p.run_id || "")}` }, (p.run_id || "").slice(0, 12)),
          ` at turn ${p.turn} (reuse ${d.reuse}): its history before that turn is not shown here.`));
      } else if (channel === "inject") {
        cards.append(h("article", { class: "card inject" }, h("div", { class: "head" }, h("span", { class: "name" }, "Your message"), RQ.badge("injected")), h("pre", {}, d.content)));
      } else if (channel === "error") {
        cards.append(h("article", { class: "card errorcard" }, h("div", { class: "head" }, h("span", { class: "name" }, "Error"), RQ.badge(d.kind || "error")), h("p", { class: "error" }, d.message)));
      } else if (channel === "guardrail") {
        cards.append(h("p", { class: d.decision === "blocked" ? "error" : "muted" },
          `guardrail ${d.guardrail} ${d.decision} the ${d.point === "run_start" ? "query" : "answer"}${d.message ? `: ${d.message}` : ""}`));
      } else if (channel === "phase" || channel === "compact") {
        cards.append(h("p", { class: "muted" }, channel === "compact"
          ? `context compacted: ${d.original_messages} → ${d.kept_messages} messages`
          : `phase: ${d.phase}${d.wait_s ? ` (${d.wait_s} s)` : ""}`));
      } else if (channel === "done") {
        if (!answer.querySelector(".delta") && d.answer) answer.append(h("span", { class: "delta" }, d.answer));
        footer.replaceChildren(RQ.badge(d.status), h("span", {}, `${d.iterations} iterations`),
          h("span", {}, `${RQ.tokens(d.usage)} tokens`), ...(RQ.cost(d.usage) ? [h("span", {}, RQ.cost(d.usage))] : []),
          h("span", {}, RQ.fmtSecs(d.elapsed)));
        setStatus(d.status);
      }
    }

    (async () => {
      try {
        const st = await RQ.api(`/v1/runs/${encodeURIComponent(runId)}/summary`, { signal: ctrl.signal });
        setStatus(st.status);
        if (st.status === "waiting") approvals.refresh();
        head.append(h("div", { class: "query", id: "run-query" }, st.query),
          h("span", { class: "muted" }, `model ${st.model || "default"} · created ${RQ.fmtTime(st.created_at)}`),
          st.batch_id ? h("a", { href: `#/batch/${encodeURIComponent(st.batch_id)}` }, "its batch") : "",
          st.thread_id ? h("span", { class: "muted" }, `thread ${st.thread_id}`) : "",
          st.forked_from ? h("a", { href: `#/run/${encodeURIComponent(st.forked_from.run_id)}` }, `forked from turn ${st.forked_from.turn} of its parent`) : "");
      } catch (err) {
        if (!ctrl.signal.aborted) { conn.textContent = err.status === 404 ? "no such run (it may have expired)" : err.message; }
        return;
      }
      await RQ.follow(`/v1/runs/${encodeURIComponent(runId)}/events`, {
        signal: ctrl.signal, onEvent,
        onState: (s) => { conn.textContent = s; conn.dataset.state = s; },
        isOver: async () => {
          if (ended) return true;
          try {
            const st = await RQ.api(`/v1/runs/${encodeURIComponent(runId)}`, { signal: ctrl.signal });
            return TERMINAL.includes(st.status) && st.events <= maxSeq;
          } catch (_) { return false; }
        },
      });
    })();
    return () => ctrl.abort();
  };
})();
