// A DAG: the plan as a graph (inline SVG: steps as nodes in columns by depth, dependencies
// as edges, colour by status), updated live from the DAG's event stream; rounds and answer.
"use strict";
(function () {
  const { h, s } = RQ;
  const NW = 190;
  const NH = 54;
  const GX = 60;
  const GY = 22;

  // Column of each step = the length of its longest dependency chain.
  function depths(steps) {
    const byId = new Map(steps.map((st) => [st.id, st]));
    const memo = new Map();
    const depth = (id, seen = new Set()) => {
      if (memo.has(id)) return memo.get(id);
      if (seen.has(id)) return 0; // a cycle cannot be stored, but never loop on bad data
      seen.add(id);
      const deps = (byId.get(id)?.dependencies || []).filter((d) => byId.has(d));
      const d = deps.length ? 1 + Math.max(...deps.map((x) => depth(x, seen))) : 0;
      memo.set(id, d);
      return d;
    };
    steps.forEach((st) => depth(st.id));
    return memo;
  }

  function graph(steps) {
    const dep = depths(steps);
    const cols = [];
    for (const st of steps) (cols[dep.get(st.id)] ||= []).push(st);
    const pos = new Map();
    const rows = Math.max(1, ...cols.map((c) => (c ? c.length : 0)));
    const height = rows * (NH + GY) + GY;
    cols.forEach((col, x) => (col || []).forEach((st, y) => {
      const offset = (height - col.length * (NH + GY) + GY) / 2;
      pos.set(st.id, { x: GX / 2 + x * (NW + GX), y: offset + y * (NH + GY) });
    }));
    const width = cols.length * (NW + GX);
    const svg = s("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": "the plan as a graph", id: "dag-svg" });
    for (const st of steps) {
      for (const d of st.dependencies || []) {
        const a = pos.get(d);
        const b = pos.get(st.id);
        if (!a || !b) continue;
        const x1 = a.x + NW;
        const y1 = a.y + NH / 2;
        const x2 = b.x;
        const y2 = b.y + NH / 2;
        svg.append(s("path", { class: "edge", d: `M${x1},${y1} C${x1 + GX / 2},${y1} ${x2 - GX / 2},${y2} ${x2},${y2}` }));
      }
    }
    for (const st of steps) {
      const p = pos.get(st.id);
      const label = st.task.length > 18 ? st.task.slice(0, 17) + "…" : st.task;
      const g = s("g", { class: `node n-${st.status}`, transform: `translate(${p.x},${p.y})`, "data-step-id": st.id, "data-status": st.status },
        s("title", {}, `${st.id}: ${st.task} (${st.status})`),
        s("rect", { width: NW, height: NH, rx: 8 }),
        s("text", { x: 10, y: 21 }, st.id),
        s("text", { x: 10, y: 40, class: "sub" }, `${st.status} · ${label}`));
      svg.append(st.run_id ? s("a", { href: `#/run/${encodeURIComponent(st.run_id)}`, "aria-label": `step ${st.id}, ${st.status}: open its run` }, g) : g);
    }
    return svg;
  }

  // One finished round: the analyzer's verdict and the steps it ran (each links its run).
  function roundView(r) {
    const a = r.analysis;
    const verdict = a ? `${a.achieved ? "achieved" : "not achieved"}, confidence ${Number(a.confidence).toFixed(2)}` : "no analysis";
    return h("details", { class: "card" }, h("summary", {}, `Round ${r.round}: ${verdict}`),
      a && a.reasoning ? h("p", {}, a.reasoning) : "",
      h("ul", {}, (r.steps || []).map((st) => h("li", {}, h("b", {}, st.id), " ", RQ.badge(st.status), " ",
        st.run_id ? h("a", { href: `#/run/${encodeURIComponent(st.run_id)}` }, "run") : ""))));
  }

  RQ.pages.dag = function (view, dagId) {
    const ctrl = new AbortController();
    const box = h("div", { class: "dag", id: "dag-graph" });
    const badge = h("span", { id: "dag-status" });
    const info = h("p", { class: "muted", id: "dag-info", role: "status" });
    const steps = h("ol", { id: "dag-steps" });
    const answer = h("div", { class: "answer", id: "dag-answer" });
    const rounds = h("div", { id: "dag-rounds" });
    const cancel = h("button", { type: "button", class: "danger" }, "Cancel DAG");
    view.append(h("div", { class: "runhead" }, h("h1", {}, "DAG ", h("span", { class: "mono" }, dagId)), badge, cancel),
      info, box, h("h2", {}, "Steps"), steps, h("h2", {}, "Rounds"), rounds, h("h2", {}, "Answer"), answer);
    cancel.addEventListener("click", async () => {
      try { await RQ.api(`/v1/dags/${encodeURIComponent(dagId)}/cancel`, { method: "POST" }); info.textContent = "Cancel requested."; }
      catch (err) { info.textContent = `Cancel failed: ${err.message}`; }
    });

    let pending = null;
    let done = false;
    async function refresh() {
      const d = await RQ.api(`/v1/dags/${encodeURIComponent(dagId)}`, { signal: ctrl.signal });
      badge.replaceChildren(RQ.badge(d.status));
      info.textContent = `${d.goal || ""} — round ${d.round}, phase ${d.phase}${(d.rounds || []).length ? `, ${d.rounds.length} earlier round(s)` : ""}`;
      box.replaceChildren(graph(d.steps || []));
      steps.replaceChildren(...(d.steps || []).map((st) => h("li", {},
        h("b", {}, st.id), " ", RQ.badge(st.status), " ", st.task, " ",
        st.run_id ? h("a", { href: `#/run/${encodeURIComponent(st.run_id)}` }, "run") : "",
        st.result ? h("details", {}, h("summary", {}, "result"), h("pre", {}, st.result)) : "")));
      answer.textContent = d.answer || (d.error ? `error: ${d.error}` : "(not yet)");
      rounds.replaceChildren(...((d.rounds || []).length ? d.rounds.map(roundView) : [RQ.notice("No round analysed yet.")]));
      cancel.disabled = ["succeeded", "failed", "cancelled"].includes(d.status);
      done = cancel.disabled;
    }
    // Events say "something changed": refetch the view, at most every 250 ms.
    const soon = () => { if (!pending) pending = setTimeout(() => { pending = null; refresh().catch(() => {}); }, 250); };

    (async () => {
      try { await refresh(); } catch (err) {
        if (!ctrl.signal.aborted) info.textContent = err.status === 404 ? "No such DAG (it may have expired)." : err.message;
        return;
      }
      RQ.follow(`/v1/dags/${encodeURIComponent(dagId)}/events`, {
        signal: ctrl.signal, onEvent: soon, isOver: async () => done,
        onState: (st) => { box.dataset.conn = st; },
      });
      // A slow poll as well: a view that missed an event still converges.
      while (!ctrl.signal.aborted && !done) {
        await RQ.sleep(2000, ctrl.signal);
        try { await refresh(); } catch (_) { /* shown on the next success */ }
      }
    })();
    return () => { ctrl.abort(); if (pending) clearTimeout(pending); };
  };
})();
