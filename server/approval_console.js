// codeexec approvals console. Everything from the server (code, reasons,
// requester) is attacker-controlled: it is only ever set with textContent.
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const tokenKey = "codeexec-admin-token";
  const whoKey = "codeexec-approver";
  let token = sessionStorage.getItem(tokenKey) || "";
  let version = "";
  let asks = [];

  // A token may come in the URL fragment (#token=...), which never reaches a server log.
  const frag = new URLSearchParams(location.hash.slice(1));
  if (frag.get("token")) {
    token = frag.get("token");
    sessionStorage.setItem(tokenKey, token);
    history.replaceState(null, "", location.pathname);
  }
  $("who").value = localStorage.getItem(whoKey) || "";
  $("who").addEventListener("change", () => localStorage.setItem(whoKey, $("who").value));
  $("login").addEventListener("submit", (e) => {
    e.preventDefault();
    token = $("token").value.trim();
    sessionStorage.setItem(tokenKey, token);
    $("login").hidden = true;
    version = "";
    poll();
  });

  function headers() {
    const h = { "X-Codeexec-Admin": "console" };
    if (token) h["Authorization"] = "Bearer " + token;
    return h;
  }

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function left(deadline) {
    const s = Math.max(0, Math.round((new Date(deadline) - Date.now()) / 1000));
    return s >= 60 ? Math.floor(s / 60) + " min " + (s % 60) + " s" : s + " s";
  }

  function render() {
    const list = $("pending");
    list.replaceChildren();
    $("empty").hidden = asks.length > 0;
    for (const a of asks) {
      const li = el("li", "ask");
      li.dataset.id = a.id;
      li.append(el("h2", null, a.language + " — request " + a.id));
      const r = a.requester || {};
      let from = r.client || "an unnamed MCP client";
      if (r.transport) from += " over " + r.transport;
      if (r.remote) from += " from " + r.remote;
      if (r.session) from += " (session " + r.session + ")";
      li.append(el("p", "meta", "Requested by " + from));
      li.append(el("p", "meta deadline", "Denied automatically in " + left(a.deadline) + " · " + a.code.length + " characters" +
        (a.stdin_bytes ? " · " + a.stdin_bytes + " bytes of stdin" : "") + (a.files && a.files.length ? " · " + a.files.length + (a.files.length === 1 ? " file" : " files") : "") +
        " · timeout " + (a.timeout_ms / 1000) + " s · sha256 " + a.code_sha256.slice(0, 16) + "…"));
      if (a.workspace) li.append(el("p", "meta workspace", "The code can see " + a.workspace + "."));
      if (a.packages && a.packages.length) li.append(el("p", "meta packages", "Packages installed for it first (their code runs with the program's): " + a.packages.join(", ")));
      if (a.files && a.files.length) {
        const ul = el("ul", "files");
        for (const f of a.files) ul.append(el("li", null, f.path + " (" + f.size + " bytes, sha256 " + f.sha256.slice(0, 16) + "…)"));
        li.append(ul);
      }
      if (a.reasons && a.reasons.length) {
        const ul = el("ul", "reasons");
        for (const reason of a.reasons) ul.append(el("li", null, reason));
        li.append(ul);
      } else {
        li.append(el("p", "noreasons", "The risk check flagged nothing."));
      }
      const pre = el("pre");
      pre.append(el("code", "code", a.code));
      li.append(pre);
      const actions = el("div", "actions");
      const approve = el("button", "approve", "Approve");
      const deny = el("button", "deny", "Deny");
      approve.type = deny.type = "button";
      approve.addEventListener("click", () => answer(a.id, "approve", li));
      deny.addEventListener("click", () => answer(a.id, "deny", li));
      actions.append(approve, deny);
      li.append(actions);
      list.append(li);
    }
  }

  // The latest requests with their decisions and how their runs ended,
  // from the audit record (those still waiting are listed above).
  function renderRecent(items) {
    items = items.filter((it) => (it.decisions || []).length > 0);
    const list = $("recent");
    list.replaceChildren();
    $("norecent").hidden = items.length > 0;
    for (const it of items) {
      const li = el("li", "done");
      li.dataset.id = it.id;
      const req = it.request || {};
      const when = new Date(it.latest).toLocaleString();
      li.append(el("p", "line meta", when + " · " + (req.language || "?") + " — request " + it.id +
        (req.requester && req.requester.client ? " · from " + req.requester.client : "")));
      for (const d of it.decisions || []) {
        const p = el("p", "line");
        const allowed = d.outcome === "approved" || d.outcome === "not_required";
        p.append(el("span", "outcome " + (allowed ? "allowed" : "refused"), d.outcome.replace("_", " ")));
        p.append(document.createTextNode(" by " + (d.by || "?") + " via " + (d.via || "?") + (d.note ? " — " + d.note : "")));
        li.append(p);
      }
      const run = it.run;
      if (run) {
        let how = "ran in the " + (run.sandbox || "?") + " sandbox: exit code " + run.exit_code;
        if (run.duration_ms !== undefined) how += " after " + Math.round(run.duration_ms) + " ms";
        if (run.limit) how += ", stopped by its " + run.limit + " limit";
        if (run.error) how = "could not run: " + run.error;
        li.append(el("p", "line run", how));
      } else if ((it.decisions || []).length) {
        li.append(el("p", "line run", "did not run"));
      }
      if (req.code) {
        const details = el("details");
        details.append(el("summary", null, "code (" + req.code.length + " characters" + (req.reasons && req.reasons.length ? "; flagged: " + req.reasons.join("; ") : "") + ")"));
        const pre = el("pre");
        pre.append(el("code", null, req.code));
        details.append(pre);
        li.append(details);
      }
      list.append(li);
    }
  }

  async function refreshRecent() {
    try {
      const resp = await fetch("/api/recent", { headers: headers(), credentials: "omit", cache: "no-store" });
      if (resp.ok) renderRecent((await resp.json()).recent || []);
    } catch (e) {
      // The pending list reports connection problems.
    }
  }

  async function answer(id, action, li) {
    for (const b of li.querySelectorAll("button")) b.disabled = true;
    try {
      const resp = await fetch("/api/requests/" + encodeURIComponent(id) + "/" + action, {
        method: "POST",
        headers: Object.assign({ "Content-Type": "application/json" }, headers()),
        body: JSON.stringify({ by: $("who").value.trim() }),
        credentials: "omit",
      });
      const body = await resp.json().catch(() => ({}));
      if (!resp.ok) {
        $("status").textContent = "Could not " + action + " " + id + ": " + (body.error || resp.status);
      } else {
        $("status").textContent = (action === "approve" ? "Approved " : "Denied ") + id + ".";
        asks = asks.filter((a) => a.id !== id);
        render();
        refreshRecent();
      }
    } catch (e) {
      $("status").textContent = "Could not reach codeexec: " + e;
    }
    for (const b of li.querySelectorAll("button")) b.disabled = false;
  }

  async function poll() {
    for (;;) {
      try {
        const q = version === "" ? "" : "?wait=1&since=" + encodeURIComponent(version);
        const resp = await fetch("/api/pending" + q, { headers: headers(), credentials: "omit", cache: "no-store" });
        if (resp.status === 401) {
          $("status").textContent = "This console needs the admin token.";
          $("login").hidden = false;
          return;
        }
        if (!resp.ok) throw new Error("HTTP " + resp.status);
        const body = await resp.json();
        version = String(body.version);
        asks = body.pending || [];
        $("status").textContent = "Live · policy " + body.policy + " · " + asks.length + " waiting";
        render();
        refreshRecent();
      } catch (e) {
        $("status").textContent = "Disconnected (" + e.message + "); retrying…";
        version = "";
        await new Promise((r) => setTimeout(r, 2000));
      }
    }
  }

  // Runs end after their decision: keep the recent list current.
  setInterval(refreshRecent, 3000);

  setInterval(() => {
    for (const li of document.querySelectorAll("li.ask")) {
      const a = asks.find((x) => x.id === li.dataset.id);
      if (a) li.querySelector(".deadline").textContent = li.querySelector(".deadline").textContent.replace(/^Denied automatically in [^·]*/, "Denied automatically in " + left(a.deadline) + " ");
    }
  }, 1000);
  poll();
})();
