// codeexec approvals console. Everything from the server (code, files,
// stdin, reasons, requester) is attacker-controlled: it is only ever set as
// text, through visible(), which shows every character that does not show
// as itself (HIDDEN, defined by the server before this script: the same
// characters as approvals.Hidden) as its code point, highlighted.
//
// A card keeps its place until the approver dismisses it: when a request
// is withdrawn, times out, or is decided (here or elsewhere), its buttons
// give way to a notice, and nothing below it moves, so a click aimed at
// one request never lands on another.
(function () {
  "use strict";
  const $ = (id) => document.getElementById(id);
  const tokenKey = "codeexec-admin-token";
  const whoKey = "codeexec-approver";
  let token = sessionStorage.getItem(tokenKey) || "";
  let version = "";
  const cards = new Map(); // request id -> {li, ask, state: "pending" | "answering" | "settled", notice}
  const recent = new Map(); // request id -> its latest decision, from the audit record

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

  // escapeOf is how a hidden character shows: ⟨U+202E⟩.
  function escapeOf(ch) {
    return "⟨U+" + ch.codePointAt(0).toString(16).toUpperCase().padStart(4, "0") + "⟩";
  }

  // visible returns text as nodes, every hidden character (and, for text
  // on one line, every tab and newline) as a highlighted escape.
  function visible(text, oneLine) {
    const frag = document.createDocumentFragment();
    text = String(text);
    let last = 0;
    for (const m of text.matchAll(oneLine ? HIDDEN_ON_ONE_LINE : HIDDEN)) {
      if (m.index > last) frag.append(text.slice(last, m.index));
      const mark = document.createElement("span");
      mark.className = "hidden-char";
      mark.textContent = escapeOf(m[0]);
      mark.title = "a character that does not show as itself: " + escapeOf(m[0]).slice(1, -1);
      frag.append(mark);
      last = m.index + m[0].length;
    }
    if (last < text.length) frag.append(text.slice(last));
    return frag;
  }

  // el makes an element whose text (if any) is shown with visible().
  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.append(visible(text, true));
    return e;
  }

  function setStatus(text) {
    $("status").replaceChildren(visible(text, true));
    $("status").title = text;
  }

  // wideGap is a run of white space in the middle of a line wide enough to
  // hide what follows in a narrow window: it is highlighted.
  const wideGap = /(?<=\S)[ \t]{16,}/g;

  // textBlock shows text as numbered lines that wrap inside the card (a
  // wrapped line goes on without a number), with wide gaps highlighted.
  function textBlock(text, cls) {
    const pre = el("pre", "text");
    const code = el("code", cls);
    const lines = text.split("\n");
    const endsWithNewline = lines.length > 1 && lines[lines.length - 1] === "";
    if (endsWithNewline) lines.pop();
    lines.forEach((line, i) => {
      const span = el("span", "code-line");
      let last = 0;
      for (const m of line.matchAll(wideGap)) {
        span.append(visible(line.slice(last, m.index)));
        const gap = el("span", "gap");
        gap.title = m[0].length + " spaces or tabs";
        gap.textContent = m[0];
        span.append(gap);
        last = m.index + m[0].length;
      }
      span.append(visible(line.slice(last)));
      if (i < lines.length - 1 || endsWithNewline) span.append("\n");
      code.append(span);
    });
    pre.append(code);
    return pre;
  }

  function left(deadline) {
    const s = Math.max(0, Math.round((new Date(deadline) - Date.now()) / 1000));
    return s >= 60 ? Math.floor(s / 60) + " min " + (s % 60) + " s" : s + " s";
  }

  function requester(r) {
    r = r || {};
    let from = r.client || "an unnamed MCP client";
    if (r.principal) from = "principal " + r.principal + (r.org ? " of " + r.org : "") + ", through " + from;
    if (r.transport) from += " over " + r.transport;
    if (r.remote) from += " from " + r.remote;
    if (r.session) from += " (session " + r.session + ")";
    return from;
  }

  // newCard shows one pending request: who asks, why the risk check
  // flagged it, and everything that will run: the code, every file (the
  // text of each textual one) and stdin.
  function newCard(a) {
    const li = el("li", "ask");
    li.dataset.id = a.id;
    const creates = a.action === "session_create";
    li.append(el("h2", null, (creates ? "New " + a.language + " session" : a.language) + " — request " + a.id));
    if (creates) li.append(el("p", "meta action", "Asks to create a " + a.language + " session with the packages below; no code runs now, and every call in the session is approved on its own."));
    li.append(el("p", "meta requester", "Requested by " + requester(a.requester)));
    li.append(el("p", "meta deadline", "Denied automatically in " + left(a.deadline)));
    const files = a.files || [];
    li.append(el("p", "meta summary", a.code.length + " characters" +
      (a.stdin_bytes ? " · " + a.stdin_bytes + " bytes of stdin" : "") + (files.length ? " · " + files.length + (files.length === 1 ? " file" : " files") : "") +
      " · timeout " + (a.timeout_ms / 1000) + " s · sha256 " + a.code_sha256.slice(0, 16) + "…"));
    if (a.session) li.append(el("p", "meta session", "Runs in session " + a.session + ", whose earlier calls' state it sees."));
    if (a.workspace) li.append(el("p", "meta workspace", "The code can see " + a.workspace + "."));
    if (a.packages && a.packages.length) li.append(el("p", "meta packages", (creates ? "Packages installed for the session (their code runs with each call that imports them): " : "Packages installed for it first (their code runs with the program's): ") + a.packages.join(", ")));
    if (a.reasons && a.reasons.length) {
      const ul = el("ul", "reasons");
      for (const reason of a.reasons) ul.append(el("li", null, reason));
      li.append(ul);
    } else {
      li.append(el("p", "noreasons", "The risk check flagged nothing."));
    }
    if (!creates) {
      li.append(el("h3", null, "Code"));
      li.append(textBlock(a.code, "code"));
    }
    for (const f of files) {
      const h = el("h3", "file", "File " + f.path);
      h.append(el("span", "meta", " (" + f.size + " bytes, sha256 " + f.sha256 + ")"));
      li.append(h);
      if (f.binary) li.append(el("p", "binary", "Binary, not shown: " + f.kind + "."));
      else li.append(textBlock(f.text || "", "file-text"));
    }
    if (a.stdin) {
      li.append(el("h3", null, "Stdin"));
      li.append(textBlock(a.stdin, "stdin"));
    }
    const actions = el("div", "actions");
    const approve = el("button", "approve", "Approve");
    const deny = el("button", "deny", "Deny");
    approve.type = deny.type = "button";
    actions.append(approve, deny);
    li.append(actions);
    const card = { li, ask: a, state: "pending", notice: null };
    approve.addEventListener("click", () => answer(card, "approve"));
    deny.addEventListener("click", () => answer(card, "deny"));
    return card;
  }

  // describe says what became of a request the console no longer lists.
  function describe(id) {
    const d = recent.get(id);
    if (!d) return "No longer waiting: it was withdrawn, answered elsewhere or timed out.";
    return "No longer waiting: " + d.outcome.replace("_", " ") + " by " + (d.by || "?") + " via " + (d.via || "?") + (d.note ? " — " + d.note : "") + ".";
  }

  // settle replaces a card's buttons with notice and a Dismiss button, at
  // the other end of the row: the card keeps its place and its size.
  function settle(card, notice) {
    card.state = "settled";
    card.notice = notice;
    card.li.classList.add("settled");
    card.li.querySelector(".deadline").textContent = "No longer waiting.";
    const actions = card.li.querySelector(".actions");
    const dismiss = el("button", "dismiss", "Dismiss");
    dismiss.type = "button";
    dismiss.addEventListener("click", () => {
      card.li.remove();
      cards.delete(card.ask.id);
      $("empty").hidden = cards.size > 0;
    });
    actions.replaceChildren(el("p", "notice", notice), dismiss);
  }

  // sync adds the requests that are new (at the end: nothing moves) and
  // settles those that are no longer pending.
  function sync(pending) {
    const ids = new Set(pending.map((a) => a.id));
    for (const a of pending) {
      if (!cards.has(a.id)) {
        const card = newCard(a);
        cards.set(a.id, card);
        $("pending").append(card.li);
      }
    }
    for (const [id, card] of cards) {
      if (card.state === "pending" && !ids.has(id)) settle(card, describe(id));
    }
    $("empty").hidden = cards.size > 0;
  }

  // The latest requests with their decisions and how their runs ended,
  // from the audit record (those still waiting are listed above).
  function renderRecent(items) {
    items = items.filter((it) => (it.decisions || []).length > 0);
    for (const it of items) recent.set(it.id, it.decisions[it.decisions.length - 1]);
    for (const card of cards.values()) {
      if (card.state === "settled" && card.notice && card.notice.startsWith("No longer waiting") && recent.has(card.ask.id)) {
        const notice = describe(card.ask.id);
        if (notice !== card.notice) {
          card.notice = notice;
          card.li.querySelector(".notice").replaceChildren(visible(notice, true));
        }
      }
    }
    const list = $("recent");
    list.replaceChildren();
    $("norecent").hidden = items.length > 0;
    for (const it of items) {
      const li = el("li", "done");
      li.dataset.id = it.id;
      const req = it.request || {};
      const when = new Date(it.latest).toLocaleString();
      li.append(el("p", "line meta", when + " · " + (req.language || "?") + " — request " + it.id +
        (req.requester && req.requester.principal ? " · principal " + req.requester.principal + (req.requester.org ? " of " + req.requester.org : "") : "") +
        (req.requester && req.requester.client ? " · from " + req.requester.client : "")));
      for (const d of it.decisions || []) {
        const p = el("p", "line");
        const allowed = d.outcome === "approved" || d.outcome === "not_required";
        p.append(el("span", "outcome " + (allowed ? "allowed" : "refused"), d.outcome.replace("_", " ")));
        p.append(visible(" by " + (d.by || "?") + " via " + (d.via || "?") + (d.note ? " — " + d.note : ""), true));
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
        details.append(textBlock(req.code, "code"));
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

  async function answer(card, action) {
    if (card.state !== "pending") return;
    card.state = "answering";
    for (const b of card.li.querySelectorAll(".actions button")) b.disabled = true;
    const id = card.ask.id;
    try {
      const resp = await fetch("/api/requests/" + encodeURIComponent(id) + "/" + action, {
        method: "POST",
        headers: Object.assign({ "Content-Type": "application/json" }, headers()),
        body: JSON.stringify({ by: $("who").value.trim() }),
        credentials: "omit",
      });
      const body = await resp.json().catch(() => ({}));
      if (resp.ok) {
        setStatus((action === "approve" ? "Approved " : "Denied ") + id + ".");
        settle(card, (action === "approve" ? "Approved" : "Denied") + " by you.");
        refreshRecent();
        return;
      }
      if (resp.status === 409 && body.decision) {
        settle(card, "Already decided: " + body.decision.outcome.replace("_", " ") + " by " + body.decision.by + " via " + body.decision.via + ".");
        return;
      }
      if (resp.status === 404) {
        settle(card, describe(id));
        refreshRecent();
        return;
      }
      setStatus("Could not " + action + " " + id + ": " + (body.error || resp.status));
    } catch (e) {
      setStatus("Could not reach codeexec: " + e);
    }
    card.state = "pending";
    for (const b of card.li.querySelectorAll(".actions button")) b.disabled = false;
  }

  async function poll() {
    for (;;) {
      try {
        const q = version === "" ? "" : "?wait=1&since=" + encodeURIComponent(version);
        const resp = await fetch("/api/pending" + q, { headers: headers(), credentials: "omit", cache: "no-store" });
        if (resp.status === 401) {
          setStatus("This console needs the admin token.");
          $("login").hidden = false;
          return;
        }
        if (!resp.ok) throw new Error("HTTP " + resp.status);
        const body = await resp.json();
        version = String(body.version);
        const pending = body.pending || [];
        const down = (body.replicas || []).filter((r) => r.error).map((r) => " · replica " + r.id + " unreachable: " + r.error);
        setStatus("Live · policy " + body.policy + " · " + pending.length + " waiting" + down.join(""));
        sync(pending);
        refreshRecent();
      } catch (e) {
        setStatus("Disconnected (" + e.message + "); retrying…");
        version = "";
        await new Promise((r) => setTimeout(r, 2000));
      }
    }
  }

  // Runs end after their decision: keep the recent list current.
  setInterval(refreshRecent, 3000);

  setInterval(() => {
    for (const card of cards.values()) {
      if (card.state !== "settled") card.li.querySelector(".deadline").textContent = "Denied automatically in " + left(card.ask.deadline);
    }
  }, 1000);
  poll();
})();
