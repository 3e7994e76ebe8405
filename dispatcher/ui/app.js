// reactq viewer: boot, token prompt, theme, and the #fragment router.
// Pages: #/runs, #/run/{id}, #/batch/{id}, #/dag/{id}, #/evals, #/eval/{id}.
"use strict";
(function () {
  const { h } = RQ;
  let cleanup = null;

  RQ.needLogin = function (message) {
    if (cleanup) { cleanup(); cleanup = null; }
    document.getElementById("view").replaceChildren();
    document.getElementById("top").hidden = true;
    const login = document.getElementById("login");
    login.hidden = false;
    document.getElementById("login-error").textContent = message || (RQ.token() ? "That token was refused." : "");
    document.getElementById("token").focus();
  };

  function route() {
    if (cleanup) { cleanup(); cleanup = null; }
    const view = document.getElementById("view");
    view.replaceChildren();
    const [, page, id] = (location.hash || "#/runs").match(/^#\/([a-z]+)\/?(.*)$/) || [null, "runs", ""];
    for (const a of document.querySelectorAll("[data-nav]")) {
      a.setAttribute("aria-current", a.dataset.nav === page ? "page" : "false");
    }
    const fn = RQ.pages[page];
    if (!fn) {
      view.append(RQ.notice(`No page called "${page}".`, "error"));
      return;
    }
    cleanup = fn(view, decodeURIComponent(id)) || null;
    document.getElementById("main").focus({ preventScroll: true });
  }
  RQ.go = (hash) => { if (location.hash === hash) route(); else location.hash = hash; };

  async function start() {
    // /v1/ui/config is behind the token like every API route: a 401 here means "ask for it"
    // and nothing else of the app is shown.
    try {
      RQ.config = await RQ.api("/v1/ui/config");
    } catch (err) {
      if (err.status !== 401) {
        document.getElementById("view").append(RQ.notice(`The gateway did not answer: ${err.message}`, "error"));
      }
      return;
    }
    document.getElementById("login").hidden = true;
    document.getElementById("top").hidden = false;
    route();
  }

  function theme() {
    const root = document.documentElement;
    const saved = localStorage.getItem("reactq.theme");
    if (saved) root.dataset.theme = saved;
    document.getElementById("theme").addEventListener("click", () => {
      const dark = root.dataset.theme
        ? root.dataset.theme === "dark"
        : matchMedia("(prefers-color-scheme: dark)").matches;
      root.dataset.theme = dark ? "light" : "dark";
      localStorage.setItem("reactq.theme", root.dataset.theme);
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    theme();
    document.getElementById("login-form").addEventListener("submit", (e) => {
      e.preventDefault();
      sessionStorage.setItem(RQ.TOKEN_KEY, document.getElementById("token").value.trim());
      document.getElementById("token").value = "";
      start();
    });
    document.getElementById("open-form").addEventListener("submit", (e) => {
      e.preventDefault();
      const id = document.getElementById("open-id").value.trim();
      if (id) RQ.go(`#/${document.getElementById("open-kind").value}/${encodeURIComponent(id)}`);
    });
    window.addEventListener("hashchange", () => { if (!document.getElementById("top").hidden) route(); });
    start();
  });
  void h;
})();
