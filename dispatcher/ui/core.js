// reactq viewer, core: DOM helper, API calls with the token, the SSE reader, formatting.
// No framework, no build step. Every page is a function (RQ.pages.*) that renders into
// #view and returns a cleanup function; app.js routes on the #fragment.
"use strict";
const RQ = (window.RQ = { pages: {}, config: { flower_url: null } });

RQ.TOKEN_KEY = "reactq.token";

// h("div", {class: "x", onclick: fn}, "text", child) — text is always a text node, so no
// value from the API is ever parsed as HTML.
RQ.h = function h(tag, attrs, ...children) {
  const svg = ["svg", "g", "rect", "text", "path", "polyline", "line", "circle", "title", "a"].includes(tag) &&
    attrs && attrs._svg;
  const el = svg ? document.createElementNS("http://www.w3.org/2000/svg", tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "_svg" || v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(el.dataset, v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
};
RQ.s = (tag, attrs, ...children) => RQ.h(tag, { ...(attrs || {}), _svg: true }, ...children);

RQ.token = () => sessionStorage.getItem(RQ.TOKEN_KEY);
RQ.authHeaders = function () {
  const t = RQ.token();
  return t ? { Authorization: "Bearer " + t } : {};
};

class ApiError extends Error {
  constructor(status, detail) {
    super(typeof detail === "string" ? detail : JSON.stringify(detail));
    this.status = status;
  }
}
RQ.ApiError = ApiError;

// fetch a JSON API route; 401 sends the user back to the token prompt.
RQ.api = async function api(path, opts = {}) {
  const headers = { ...RQ.authHeaders(), ...(opts.headers || {}) };
  if (opts.json !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(path, {
    method: opts.method || "GET", headers, cache: "no-store", signal: opts.signal,
    body: opts.json !== undefined ? JSON.stringify(opts.json) : undefined,
  });
  if (res.status === 401) {
    RQ.needLogin();
    throw new ApiError(401, "the API token is missing or wrong");
  }
  const text = await res.text();
  if (opts.raw) {
    if (!res.ok) throw new ApiError(res.status, text);
    return text;
  }
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch (_) { body = text; }
  if (!res.ok) {
    // Every error is {"error": {code, message, field?, details?}}.
    const err = body && typeof body === "object" && body.error ? body.error : null;
    throw new ApiError(res.status, err ? err.message : (body || res.statusText));
  }
  return body;
};

// Parse SSE frames out of a growing text buffer; returns [frames, rest].
RQ.parseFrames = function (buf) {
  const frames = [];
  buf = buf.replace(/\r\n?/g, "\n");
  let at;
  while ((at = buf.indexOf("\n\n")) >= 0) {
    const block = buf.slice(0, at);
    buf = buf.slice(at + 2);
    const f = { id: null, event: "message", data: [] };
    for (const line of block.split("\n")) {
      if (!line || line.startsWith(":")) continue;
      const i = line.indexOf(":");
      const field = i < 0 ? line : line.slice(0, i);
      const value = i < 0 ? "" : line.slice(i + 1).replace(/^ /, "");
      if (field === "id") f.id = value;
      else if (field === "event") f.event = value;
      else if (field === "data") f.data.push(value);
    }
    if (f.data.length) frames.push({ id: f.id, event: f.event, data: f.data.join("\n") });
  }
  return [frames, buf];
};

const sleep = (ms, signal) => new Promise((resolve) => {
  const t = setTimeout(resolve, ms);
  if (signal) signal.addEventListener("abort", () => { clearTimeout(t); resolve(); }, { once: true });
});
RQ.sleep = sleep;

// Follow an event stream with fetch() + ReadableStream (so the token goes in a header,
// never in a URL), resuming with Last-Event-ID after any drop. onEvent(channel, data, id)
// is called once per frame received; callers drop repeats by seq. Ends after `done`, or
// when isOver() says the stream's owner has ended and nothing more will come.
RQ.follow = async function follow(url, { onEvent, onState, signal, isOver }) {
  let lastId = null;
  let backoff = 300;
  const state = (s) => onState && onState(s);
  while (!signal.aborted) {
    let finished = false;
    try {
      const headers = { ...RQ.authHeaders(), Accept: "text/event-stream" };
      if (lastId) headers["Last-Event-ID"] = lastId;
      const res = await fetch(url, { headers, signal, cache: "no-store" });
      if (res.status === 401) { RQ.needLogin(); return; }
      if (res.status === 404) { state("gone"); return; }
      if (!res.ok || !res.body) throw new Error("HTTP " + res.status);
      state("live");
      backoff = 300;
      const reader = res.body.getReader();
      const dec = new TextDecoder();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        let frames;
        [frames, buf] = RQ.parseFrames(buf + dec.decode(value, { stream: true }));
        for (const f of frames) {
          if (f.id) lastId = f.id;
          let data;
          try { data = JSON.parse(f.data); } catch (_) { data = { raw: f.data }; }
          onEvent(f.event, data, f.id);
          if (f.event === "done") finished = true;
        }
      }
      if (finished) { state("ended"); return; }
      if (isOver && (await isOver())) { state("ended"); return; }
    } catch (err) {
      if (signal.aborted) return;
    }
    state("reconnecting");
    await sleep(backoff, signal);
    backoff = Math.min(backoff * 2, 4000);
  }
};

RQ.badge = (status) => RQ.h("span", { class: `badge st-${status || "unknown"}` }, status || "?");
RQ.fmtTime = (ts) => {
  if (!ts) return "";
  const d = new Date(ts * 1000);
  const same = new Date().toDateString() === d.toDateString();
  return same ? d.toLocaleTimeString() : d.toLocaleString();
};
RQ.fmtSecs = (s) => {
  if (s === null || s === undefined || isNaN(s)) return "–";
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 90) return `${s.toFixed(1)} s`;
  const m = Math.floor(s / 60);
  return m < 90 ? `${m} min ${Math.round(s % 60)} s` : `${Math.floor(m / 60)} h ${m % 60} min`;
};
RQ.tokens = (usage) => (usage && (usage.total_tokens ?? ((usage.prompt_tokens || 0) + (usage.completion_tokens || 0)))) || 0;
// Dollars of a usage object ("" for a model without a price).
RQ.cost = (usage) => (usage && usage.cost_usd ? `$${usage.cost_usd.toFixed(usage.cost_usd < 0.01 ? 5 : 2)}` : "");
RQ.json = (v) => (typeof v === "string" ? v : JSON.stringify(v, null, 2));
RQ.notice = (text, cls = "muted") => RQ.h("p", { class: cls, role: cls === "error" ? "alert" : null }, text);
