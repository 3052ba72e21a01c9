// fencepost operator pages: plain JavaScript, no build step.
// Reads poll the JSON API; actions send the API token (kept in this tab's sessionStorage) as a bearer token.
// Every value goes into the page through textContent, never innerHTML.
"use strict";

(function () {
  const TOKEN_KEY = "fencepost.apiToken";
  const OPEN = new Set(["PENDING", "RUNNING"]);
  const main = document.getElementById("main");
  const page = main ? main.dataset.page : null;

  // ── small helpers ──
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "className") el.className = value;
      else if (key.startsWith("data-") || key.startsWith("aria-") || ["id", "title", "datetime", "type", "scope", "role"].includes(key)) el.setAttribute(key, value);
      else el[key] = value;
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      el.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return el;
  }
  const when = (iso) => (iso ? iso.slice(0, 19).replace("T", " ") + " UTC" : "—");
  // A hash in full (cut by CSS with an ellipsis where space is short; hover shows it, copying takes all of it).
  const fp = (value) => h("code", { className: "fp", title: value }, value);
  const duration = (started, finished) => {
    if (!started || !finished) return "—";
    const seconds = (parse(finished) - parse(started)) / 1000;
    return seconds < 60 ? seconds.toFixed(2) + " s" : age(seconds);
  };
  const badge = (text, cls) => h("span", { className: "badge " + (cls || "s-" + text) }, text);
  const age = (seconds) => {
    if (seconds === null || seconds === undefined) return "—";
    const whole = Math.floor(seconds);
    const pad = (n) => String(n).padStart(2, "0");
    if (whole < 60) return whole + " s";
    if (whole < 3600) return Math.floor(whole / 60) + " min " + pad(whole % 60) + " s";
    return Math.floor(whole / 3600) + " h " + pad(Math.floor((whole % 3600) / 60)) + " min";
  };
  const parse = (iso) => Date.parse(iso.replace(/(\.\d{3})\d*Z$/, "$1Z"));

  function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

  // The live notice says what is under way or what just happened; an error replaces it (a "Creating…" notice
  // never stays under the error that ended it).
  let sayTimer = null;
  function say(text) {
    const el = document.getElementById("notice");
    if (!el) return;
    window.clearTimeout(sayTimer);
    el.textContent = "";
    sayTimer = window.setTimeout(() => { el.textContent = text; }, 30);
  }
  function alarm(text) {
    const el = document.getElementById("alert");
    if (el) el.textContent = text || "";
    if (text) {
      window.clearTimeout(sayTimer);
      const notice = document.getElementById("notice");
      if (notice) notice.textContent = "";
    }
  }

  class ApiError extends Error {
    constructor(status, problem) {
      super(problem && problem.detail ? problem.detail : "HTTP " + status);
      this.status = status;
      this.problem = problem || {};
    }
  }

  // Conditional GET (ADR 0067): the ETag last seen per URL goes out as If-None-Match; a 304 answers with the
  // data drawn from the last 200, so an unchanged poll moves no body.
  const etags = new Map();  // url -> { tag, data }
  async function poll(url) { return call("GET", url, undefined, true); }

  async function call(method, url, body, conditional) {
    const headers = { Accept: "application/json" };
    const known = conditional ? etags.get(url) : undefined;
    if (known) headers["If-None-Match"] = known.tag;
    const t = token();
    if (t) headers.Authorization = "Bearer " + t;
    const init = { method, headers, cache: "no-store" };
    if (body instanceof FormData) init.body = body;
    else if (body !== undefined) { headers["Content-Type"] = "application/json"; init.body = JSON.stringify(body); }
    const response = await fetch(url, init);
    if (response.status === 304 && known) return known.data;
    const text = await response.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
    if (!response.ok) throw new ApiError(response.status, data);
    const tag = response.headers.get("ETag");
    if (conditional && tag) etags.set(url, { tag, data });
    return data;
  }

  function describe(error) {
    if (error instanceof ApiError) {
      if (error.status === 401) {
        sessionStorage.removeItem(TOKEN_KEY);
        showTokenState();
        return "The API token is missing or wrong: paste the token printed by `fencepost serve` above.";
      }
      if (error.problem.lease_until) return error.message + " (lease deadline " + when(error.problem.lease_until) + ")";
      return error.message;
    }
    return "Cannot reach the server: " + (error && error.message ? error.message : String(error));
  }

  async function mutate(method, url, body, pending) {
    if (!token()) {
      alarm("Paste the API token printed by `fencepost serve` into the API token field first.");
      const input = document.getElementById("api-token");
      if (input) input.focus();
      return null;
    }
    if (pending) say(pending);
    try {
      const result = await call(method, url, body);
      alarm("");
      return result;
    } catch (error) {
      alarm(describe(error));
      return null;
    }
  }

  // ── token field ──
  function showTokenState() {
    const state = document.getElementById("token-state");
    if (state) state.textContent = token() ? "token set for this tab" : "no token: actions are disabled";
  }
  const tokenForm = document.getElementById("token-form");
  if (tokenForm) {
    tokenForm.addEventListener("submit", (event) => {
      event.preventDefault();
      const input = document.getElementById("api-token");
      const value = input.value.trim();
      if (value) sessionStorage.setItem(TOKEN_KEY, value);
      input.value = "";
      showTokenState();
      alarm("");
    });
    document.getElementById("forget-token").addEventListener("click", () => {
      sessionStorage.removeItem(TOKEN_KEY);
      showTokenState();
    });
    showTokenState();
  }

  // ── list page ──
  // One row per rehearsal: its latest Attempt, how many it has and the gate's verdict now.
  function renderRuns(items) {
    const body = document.getElementById("runs");
    if (!body) return;
    body.replaceChildren(...(items.length ? items.map((run) => h("tr", { "data-run": run.id },
      h("td", {}, h("a", { href: "/rehearsals/" + encodeURIComponent(run.id) }, run.package.name), run.status !== "READY" ? [" ", badge(run.status)] : null),
      h("td", {}, run.package.version, run.package.previous_version ? [" ", h("span", { className: "muted" }, "(from " + run.package.previous_version + ")")] : null),
      h("td", { "data-field": "latest" }, run.latest_attempt ? ["#" + run.latest_attempt.seq + " ", badge(run.latest_attempt.state)] : h("span", { className: "muted" }, "none yet")),
      h("td", { "data-field": "attempt-count" }, run.attempt_count),
      h("td", { "data-field": "gate" }, badge(run.gate_passed ? "PASS" : "BLOCKED", run.gate_passed ? "pass" : "blocked")),
      h("td", {}, h("time", { datetime: run.created_at }, when(run.created_at))),
      h("td", {}, h("code", { className: "fp", title: run.id }, run.id)))) : [h("tr", {}, h("td", { colSpan: 7, className: "muted" }, "No rehearsals yet: create one above."))]));
  }

  // The list polls its first pages with If-None-Match: an unchanged list is a 304 with no body.
  function initRuns() {
    const section = document.getElementById("runs-section");
    if (!section) return;
    const size = Number(section.dataset.pageSize) || 20;
    const more = document.getElementById("runs-more");
    let pages = 1;
    let drawn = null;
    async function refresh() {
      try {
        const data = await poll("/delivery-rehearsals?limit=" + Math.min(500, size * pages));
        if (data !== drawn) { renderRuns(data.items); drawn = data; }
        more.hidden = !data.next_cursor;
      } catch (e) { alarm(describe(e)); }
    }
    more.addEventListener("click", () => { pages += 1; refresh(); });
    const loop = () => refresh().finally(() => window.setTimeout(loop, 5000));
    if (main.dataset.openReads === "true") window.setTimeout(loop, 5000);
    else loop();
  }

  // Workers (GET /workers): who runs now, and who stopped renewing.
  function renderWorkers(data) {
    const body = document.getElementById("workers");
    if (!body) return;
    const summary = document.getElementById("workers-summary");
    summary.className = data.live.length ? "muted" : "no-workers";
    summary.replaceChildren(...(data.live.length
      ? [data.live.length + " live worker" + (data.live.length === 1 ? "" : "s") + " (store time " + when(data.now) + ")"]
      : ["No live worker: nothing claims commands. Start one with ", h("code", {}, "fencepost worker"), "."]));
    body.replaceChildren(...data.live.map((w) => h("tr", { "data-worker": w.id },
      h("td", {}, h("code", {}, w.id)), h("td", {}, w.host), h("td", {}, w.pid), h("td", {}, w.kinds.join(", ")),
      h("td", {}, w.in_flight + " / " + w.concurrency),
      h("td", {}, h("time", { datetime: w.started_at }, when(w.started_at))),
      h("td", {}, age(w.last_seen_seconds) + " ago"))));
    const expired = document.getElementById("workers-expired");
    expired.replaceChildren(...(data.expired.length ? ["Stopped renewing (expired): ",
      // flatMap: replaceChildren takes nodes and strings, not arrays of them (an array shows as its toString)
      ...data.expired.flatMap((w, i) => [i ? "; " : "", h("code", {}, w.id), " last seen " + age(w.last_seen_seconds) + " ago"]),
      ". Their leases expire and live workers take their commands over."] : []));
  }

  function pollWorkers() {
    call("GET", "/workers").then(renderWorkers).catch((e) => alarm(describe(e)))
      .finally(() => window.setTimeout(pollWorkers, 5000));
  }

  // Event relay (GET /v1/events/outbox/summary and ?status=dead_lettered): what waits to be published and what
  // used up its attempts. Polled like the workers; redrawn only when the answer changed, so nothing flickers.
  const RELAY_MS = 5000;
  const COUNTS = [["pending", "Pending"], ["retry_pending", "Retry pending"], ["processing", "Processing"],
    ["published", "Published"], ["dead_lettered", "Dead-lettered"]];
  let relayDrawn = "";
  let relayDead = null;  // dead-letter ids last drawn (null before the first draw: nothing to announce)

  function renderRelay(summary, dead) {
    const key = JSON.stringify([summary.counts, summary.backlog, summary.oldest_unpublished_at,
      Math.floor(summary.oldest_unpublished_age_seconds || 0), dead]);
    if (key === relayDrawn) return;
    relayDrawn = key;
    const backlog = document.getElementById("relay-backlog");
    backlog.className = summary.backlog ? "relay-waiting" : "muted";
    backlog.replaceChildren(...(summary.backlog
      ? [h("strong", { "data-field": "backlog" }, summary.backlog), " event" + (summary.backlog === 1 ? "" : "s") + " waiting to be published. The oldest has waited ",
        h("strong", { "data-field": "oldest-age" }, age(summary.oldest_unpublished_age_seconds)), " (recorded ",
        h("time", { datetime: summary.oldest_unpublished_at }, when(summary.oldest_unpublished_at)), ")."]
      : ["No events waiting: nothing is pending, retrying or being published."]));
    document.getElementById("relay-counts").replaceChildren(...COUNTS.map(([status, label]) =>
      h("div", {}, h("dt", {}, label), h("dd", { "data-field": "count-" + status }, summary.counts[status]))));
    document.getElementById("dead-letters").replaceChildren(...(dead.length ? dead.map((d) => h("tr", { "data-event": d.event_id },
      h("td", {}, h("code", {}, d.event_id)), h("td", {}, d.type || "—"), h("td", {}, d.tenant_id + "/" + d.space_id),
      h("td", {}, d.attempts), h("td", { className: "last-error" }, d.last_error || "—"),
      h("td", {}, h("time", { datetime: d.updated_at }, when(d.updated_at)))))
      : [h("tr", {}, h("td", { colSpan: 6, className: "muted" }, "No dead letters: no event has used up its publish attempts."))]));
    const total = summary.counts.dead_lettered;
    document.getElementById("dead-letters-more").replaceChildren(...(total ? [
      total > dead.length ? ["Showing the oldest " + dead.length + " of " + total + "; ", h("code", {}, "fencepost events dead-letters"), " lists them all. "] : [],
      "Send one again with ", h("code", {}, "fencepost events requeue ID"), "."] : []));
    const ids = dead.map((d) => d.event_id);
    if (relayDead !== null) {
      const added = ids.filter((id) => !relayDead.includes(id));
      if (added.length) say("New dead letter" + (added.length === 1 ? ": " : "s: ") + added.join(", "));
    }
    relayDead = ids;
  }

  function initRelay(serverRendered) {
    const section = document.getElementById("relay-section");
    if (!section) return;
    const limit = Number(section.dataset.deadLimit) || 20;
    const stateEl = document.getElementById("relay-freshness");
    const detailEl = document.getElementById("relay-freshness-detail");
    let lastOk = serverRendered ? performance.now() : null;  // the server drew the panel just now
    let lastError = null;
    if (serverRendered) {
      relayDead = [...document.querySelectorAll("#dead-letters tr[data-event]")].map((tr) => tr.dataset.event);
    }

    // The same stale indicator as the rehearsal page: stale after 2.5 intervals without a good refresh, or at once
    // when a refresh failed, saying why.
    function freshness(serverNow) {
      const since = lastOk === null ? Infinity : (performance.now() - lastOk) / 1000;
      let state, text;
      if (lastError) { state = "error"; text = "Stale: the last refresh failed (" + lastError + ")"; }
      else if (since > RELAY_MS / 1000 * 2.5) { state = "stale"; text = "Stale: no refresh for " + (since === Infinity ? "a while" : Math.round(since) + " s"); }
      else { state = "live"; text = "Live: updating every " + RELAY_MS / 1000 + " s"; }
      if (stateEl.textContent !== text) stateEl.textContent = text;
      stateEl.dataset.state = state;
      if (serverNow) detailEl.textContent = "store time " + when(serverNow);
      else if (lastError && lastOk !== null) detailEl.textContent = "last good refresh " + Math.round(since) + " s ago";
      stateEl.parentElement.classList.toggle("stale", state !== "live");
    }

    async function poll() {
      try {
        const [summary, dead] = await Promise.all([call("GET", "/v1/events/outbox/summary"),
          call("GET", "/v1/events/outbox?status=dead_lettered&limit=" + limit)]);
        renderRelay(summary, dead.items);
        lastOk = performance.now();
        lastError = null;
        freshness(summary.now);
      } catch (error) {
        lastError = describe(error);
        freshness(null);
      }
      window.setTimeout(poll, RELAY_MS);
    }

    freshness(null);
    window.setInterval(() => freshness(null), 1000);
    if (serverRendered) window.setTimeout(poll, RELAY_MS);
    else poll();
  }

  function initIndex() {
    const created = (run) => { if (run) window.location.assign("/rehearsals/" + encodeURIComponent(run.id)); };
    document.getElementById("create-path").addEventListener("submit", async (event) => {
      event.preventDefault();
      const path = document.getElementById("package-path").value.trim();
      created(await mutate("POST", "/delivery-rehearsals", { package_path: path }, "Creating the rehearsal…"));
    });
    document.getElementById("create-upload").addEventListener("submit", async (event) => {
      event.preventDefault();
      const input = document.getElementById("package-archive");
      if (!input.files.length) { alarm("Choose a .zip or .tar.gz archive first."); return; }
      const form = new FormData();
      form.append("archive", input.files[0]);
      created(await mutate("POST", "/delivery-rehearsals/uploads", form, "Uploading the archive…"));
    });
    initRuns();
    if (main.dataset.openReads !== "true") {
      pollWorkers();
    } else {
      window.setTimeout(pollWorkers, 5000);
    }
    initRelay(main.dataset.openReads === "true");
  }

  // ── rehearsal page ──
  function leaseNote(outbox) {
    if (outbox.status !== "PROCESSING") return null;
    return h("span", { className: "lease-note" + (outbox.lease_expired ? " expired" : "") },
      outbox.lease_expired ? "expired (by server time)" : "active");
  }

  function receiptRow(r) {
    let integrity;
    if (r.integrity.status === "tampered") integrity = [h("strong", { className: "tamper" }, "TAMPERED"), " ", h("span", { className: "reason" }, r.integrity.reason)];
    else if (r.integrity.status === "ok") integrity = h("span", { className: "ok" }, "verified");
    else integrity = h("span", { className: "muted" }, r.integrity.reason);
    return h("tr", { className: r.integrity.status === "tampered" ? "tampered" : "", "data-scenario": r.scenario },
      h("td", {}, r.position), h("td", {}, r.scenario),
      h("td", {}, badge(r.state),
        r.not_applicable_reason ? [" ", h("span", { className: "reason", "data-field": "not-applicable" }, r.not_applicable_reason)]
          : r.partial ? [" ", h("span", { className: "reason", "data-field": "partial" }, r.partial)] : []),
      h("td", {}, r.delivery === null ? "—" : r.delivery),
      h("td", { "data-field": "duration" }, duration(r.started_at, r.finished_at)),
      h("td", {}, r.evidence_fingerprint ? fp(r.evidence_fingerprint) : "—"),
      h("td", {}, integrity));
  }

  function attemptCard(a) {
    const o = a.outbox;
    const actions = h("div", { className: "actions" },
      o.lease_expired ? h("button", { type: "button", className: "reconcile", id: "reconcile-" + a.id, "data-action": "reconcile", "data-attempt": a.id }, "Reconcile expired lease") : null,
      OPEN.has(a.status) ? [h("label", { className: "abort-reason", htmlFor: "abort-reason-" + a.id }, "Reason ",
        h("input", { type: "text", id: "abort-reason-" + a.id, name: "reason", maxLength: 500, spellcheck: false, placeholder: "why you abort it (recorded)" })),
      h("button", { type: "button", className: "abort", id: "abort-" + a.id, "data-action": "abort", "data-attempt": a.id }, "Abort attempt")] : null);
    const field = (label, name, ...value) => h("div", {}, h("dt", {}, label), h("dd", { "data-field": name }, ...value));
    return h("li", { className: "attempt s-" + a.status, id: "attempt-" + a.id, "data-status": a.status, "data-outbox": o.status },
      h("article", { "aria-labelledby": "h-" + a.id },
        h("h3", { id: "h-" + a.id }, "Attempt #" + a.seq + " ", h("span", { className: "badge s-" + a.state, "data-field": "status" }, a.state)),
        h("p", { className: "muted" }, h("code", {}, a.id), " · created ", h("time", { datetime: a.created_at }, when(a.created_at))),
        h("dl", { className: "lease" },
          field("Outbox", "outbox-status", badge(o.status)),
          field("Lease owner", "lease-owner", o.lease_owner || "—"),
          field("Last heartbeat", "heartbeat", when(o.last_heartbeat_at)),
          field("Lease deadline", "lease-until", when(o.lease_until), " ", leaseNote(o)),
          field("Delivery count", "delivery-count", o.delivery_count),
          o.pending_seconds === null || o.pending_seconds === undefined ? null : field("Pending for", "pending-for", age(o.pending_seconds))),
        o.no_live_worker ? h("p", { className: "no-worker", "data-field": "no-live-worker" }, h("strong", {}, "No live worker serves this kind"),
          " (" + o.kind + "): nothing will run it until one starts (", h("code", {}, "fencepost worker"), ").") : null,
        a.state === "INTERRUPTED" ? h("p", { className: "interrupted", "data-field": "interrupted" }, h("strong", {}, "Interrupted, will be replayed"),
          ": nothing runs it now (its lease was released or reconciled); the next delivery replays all six scenarios from the first.") : null,
        a.error ? h("p", { className: "attempt-error" }, h("strong", {}, "Error:"), " " + a.error) : null,
        actions,
        leaseTimeline(a),
        h("div", { className: "scroll" }, h("table", { className: "receipts" },
          h("caption", {}, "Scenarios of attempt #" + a.seq),
          h("thead", {}, h("tr", {}, ["#", "Scenario", "State", "Delivery", "Duration", "Evidence fingerprint", "Integrity"].map((t) => h("th", { scope: "col" }, t)))),
          h("tbody", {}, a.receipts.map(receiptRow))))));
  }

  // Each delivery of the Attempt's command: who claimed it (or took it over), its heartbeats, how it ended.
  function leaseTimeline(a) {
    const history = a.lease_history || [];
    const n = history.length;
    return h("details", { className: "lease-history", "data-field": "lease-history" },
      h("summary", {}, "Lease history (" + n + " deliver" + (n === 1 ? "y" : "ies") + ")"),
      n ? h("ol", { className: "timeline" }, history.map((d) => h("li", { "data-delivery": d.delivery, "data-ended": d.ended },
        h("strong", {}, "#" + d.delivery + " " + d.claim), " by ", h("code", {}, d.owner || "—"), " at ",
        h("time", { datetime: d.claimed_at }, when(d.claimed_at)),
        " · " + d.heartbeats + " heartbeat" + (d.heartbeats === 1 ? "" : "s"),
        d.last_heartbeat_at ? [" (last ", h("time", { datetime: d.last_heartbeat_at }, when(d.last_heartbeat_at)), ")"] : null,
        " · ", h("span", { className: "ended e-" + d.ended }, d.ended),
        d.ended_at ? [" at ", h("time", { datetime: d.ended_at }, when(d.ended_at))] : null)))
        : h("p", { className: "muted" }, "Not claimed yet: no worker has taken its command."));
  }

  // A redrawn card keeps what the operator typed (the abort reason, caret included) and the open lease history.
  function keepTyped(from, to) {
    const typed = from.querySelector("input[name=reason]");
    const again = to.querySelector("input[name=reason]");
    if (typed && again) {
      again.value = typed.value;
      if (document.activeElement === typed) {
        const [start, end] = [typed.selectionStart, typed.selectionEnd];
        window.requestAnimationFrame(() => { again.focus(); again.setSelectionRange(start, end); });
      }
    }
    const open = from.querySelector("details.lease-history");
    const details = to.querySelector("details.lease-history");
    if (open && details) details.open = open.open;
  }

  function renderGate(gate) {
    const heading = document.getElementById("gate-h");
    heading.replaceChildren("Release gate ", h("span", { className: "badge " + (gate.passed ? "pass" : "blocked"), "data-field": "gate-verdict" }, gate.passed ? "PASS" : "BLOCKED"));
    document.getElementById("gate-checks").replaceChildren(...gate.checks.map((c) => h("li", { className: c.passed ? "pass" : "fail" },
      h("span", { className: "mark" }, c.passed ? "✔ pass" : "✘ fail"), " ", h("strong", {}, c.name), ": " + c.reason)));
    const tampered = document.getElementById("gate-tampered");
    tampered.replaceChildren(...(gate.tampered_receipts.length ? [h("p", { className: "tamper-list" }, h("strong", { className: "tamper" }, "Tampered receipts:"), " ",
      gate.tampered_receipts.map((t) => "#" + t.position + " " + t.scenario + " (" + t.reason + ")").join("; "))] : []));
  }

  function renderComparison(c) {
    const body = document.getElementById("comparison-body");
    if (!c.comparable) { body.replaceChildren(h("p", {}, c.reason)); return; }
    const row = (role, f) => h("tr", {}, h("th", { scope: "row" }, role), h("td", {}, "#" + f.seq + " ", fp(f.attempt_id)),
      h("td", {}, fp(f.semantic_fingerprint)),
      h("td", {}, h("ul", { className: "raw" }, f.raw.map((r) => h("li", {}, r.position + " " + r.scenario + ": ",
        r.evidence_fingerprint ? fp(r.evidence_fingerprint) : "—")))));
    // replaceChildren takes nodes, not arrays (an array would be drawn as "[object HTMLParagraphElement],…").
    body.replaceChildren(
      h("p", {}, badge(c.equal ? "MATCH" : "DIFFERENT", c.equal ? "pass" : "blocked"), " " + c.reason),
      h("div", { className: "scroll" }, h("table", { className: "fingerprints" },
        h("caption", { className: "visually-hidden" }, "Fingerprints of the compared attempts"),
        h("thead", {}, h("tr", {}, ["Role", "Attempt", "Semantic fingerprint", "Raw evidence fingerprints"].map((t) => h("th", { scope: "col" }, t)))),
        h("tbody", {}, row("baseline", c.baseline), row("candidate", c.candidate)))),
      ...(c.differing_paths && c.differing_paths.length ? [h("p", {}, h("strong", {}, "Differing paths:")),
        h("ul", { className: "paths" }, c.differing_paths.map((p) => h("li", {}, h("code", {}, p))))] : []));
  }

  function initRehearsal() {
    const runId = main.dataset.runId;
    const base = "/delivery-rehearsals/" + encodeURIComponent(runId);
    const pollMs = Number(main.dataset.pollMs) || 1000;
    const idleMs = Math.max(5000, pollMs);
    const pageSize = Number(document.getElementById("history").dataset.pageSize) || 10;
    let pages = 1;
    const drawn = { attempts: null, gate: null, comparison: null };
    const seen = new Map();      // attempt id -> JSON of what is drawn
    const statuses = new Map();  // attempt id -> "status/outbox" last announced
    let lastOk = null;           // performance.now() of the last successful refresh
    let lastError = null;
    let open = true;
    let timer = null;
    let freshnessState = "";

    function setFreshness(state, text, detail) {
      const el = document.getElementById("freshness");
      if (freshnessState !== state || el.textContent !== text) { el.textContent = text; el.dataset.state = state; freshnessState = state; }
      document.getElementById("freshness-detail").textContent = detail;
      el.parentElement.classList.toggle("stale", state !== "live" && state !== "idle");
    }

    function updateFreshness(serverNow) {
      const age = lastOk === null ? Infinity : (performance.now() - lastOk) / 1000;
      const limit = Math.max(4, (open ? pollMs : idleMs) / 1000 * 2.5);
      const detail = serverNow ? "server time " + when(serverNow) : document.getElementById("freshness-detail").textContent;
      if (lastError) setFreshness("error", "Stale: the last refresh failed (" + lastError + ")", lastOk === null ? "" : "last good refresh " + Math.round(age) + " s ago");
      else if (age > limit) setFreshness("stale", "Stale: no refresh for " + (age === Infinity ? "a while" : Math.round(age) + " s"), detail);
      else setFreshness(open ? "live" : "idle", open ? "Live: updating every " + (pollMs / 1000) + " s" : "Up to date (no open attempt)", detail);
    }

    function renderAttempts(list) {
      const ol = document.getElementById("attempts");
      const none = document.getElementById("no-attempts");
      if (none) none.hidden = list.items.length > 0;
      const focusedId = document.activeElement && document.activeElement.id;
      const total = document.getElementById("attempts-total");
      if (total) total.textContent = "(newest first, " + list.total + " attempt" + (list.total === 1 ? "" : "s") + ")";
      document.getElementById("attempts-more").hidden = !list.next_cursor;
      const nodes = list.items.map((a) => {
        const key = JSON.stringify(a);
        const existing = document.getElementById("attempt-" + a.id);
        if (existing && seen.get(a.id) === key) return existing;
        seen.set(a.id, key);
        const card = attemptCard(a);
        if (existing) keepTyped(existing, card);
        return card;
      });
      const same = nodes.length === ol.children.length && nodes.every((n, i) => ol.children[i] === n);
      if (!same) ol.replaceChildren(...nodes);
      if (focusedId && document.activeElement !== document.getElementById(focusedId)) {
        const again = document.getElementById(focusedId);
        if (again) again.focus();
      }
      for (const a of list.items) {
        const now = a.status + "/" + a.outbox.status + "/" + a.outbox.lease_expired;
        const before = statuses.get(a.id);
        if (before !== undefined && before !== now) {
          say("Attempt #" + a.seq + " is " + a.status + ", outbox " + a.outbox.status + (a.outbox.lease_expired ? ", lease expired: reconcile is possible" : ""));
        }
        statuses.set(a.id, now);
      }
      open = list.items.some((a) => OPEN.has(a.status) || a.outbox.status === "PENDING" || a.outbox.status === "PROCESSING");
    }

    let inflight = false;
    let again = false;

    async function refresh() {
      if (inflight) { again = true; return; }
      inflight = true;
      window.clearTimeout(timer);
      try {
        const [run, attempts, gate, comparison] = await Promise.all([
          document.getElementById("run-title").dataset.loaded ? null : call("GET", base),
          poll(base + "/attempts?order=newest&limit=" + Math.min(500, pageSize * pages)),
          poll(base + "/release-gate"), poll(base + "/attempt-comparison")]);
        if (run) {
          const title = document.getElementById("run-title");
          title.textContent = run.package.name + " " + run.package.version;
          title.dataset.loaded = "1";
        }
        // A 304 hands back the very object drawn last time: nothing to redraw.
        if (attempts !== drawn.attempts) renderAttempts(attempts);
        if (gate !== drawn.gate) renderGate(gate);
        if (comparison !== drawn.comparison) renderComparison(comparison);
        Object.assign(drawn, { attempts, gate, comparison });
        lastOk = performance.now();
        lastError = null;
        updateFreshness(attempts.now);
      } catch (error) {
        lastError = describe(error);
        updateFreshness(null);
      } finally {
        inflight = false;
      }
      if (again) { again = false; refresh(); return; }
      timer = window.setTimeout(refresh, open ? pollMs : idleMs);
    }

    if (main.dataset.openReads === "true") document.getElementById("run-title").dataset.loaded = "1";

    document.getElementById("start-attempt").addEventListener("click", async () => {
      const attempt = await mutate("POST", base + "/attempts");
      if (attempt) { say("Attempt #" + attempt.seq + " enqueued (" + attempt.status + ")"); open = true; refresh(); }
    });
    document.getElementById("attempts").addEventListener("click", async (event) => {
      const button = event.target.closest("button[data-action]");
      if (!button) return;
      const attemptId = button.dataset.attempt;
      const action = button.dataset.action;
      if (action === "abort" && !window.confirm("Abort this attempt? Open scenarios become ABORTED and its worker is fenced.")) return;
      button.disabled = true;
      const typed = document.getElementById("abort-reason-" + attemptId);
      const reason = typed && typed.value.trim() ? typed.value.trim() : "aborted from the operator page";
      const attempt = await mutate("POST", base + "/attempts/" + encodeURIComponent(attemptId) + "/" + action, action === "abort" ? { reason } : undefined);
      if (attempt) say((action === "abort" ? "Aborted" : "Reconciled") + " attempt #" + attempt.seq + ": now " + attempt.status + ", outbox " + attempt.outbox.status);
      button.disabled = false;
      refresh();
    });
    document.getElementById("attempts-more").addEventListener("click", () => { pages += 1; refresh(); });
    window.setInterval(() => updateFreshness(null), 1000);
    refresh();
    pollRehearsalWorkers();
  }

  // The live workers (GET /workers, the worker registry) on the rehearsal page: who could run an Attempt now.
  function pollRehearsalWorkers() {
    const el = document.getElementById("rw-summary");
    if (!el) return;
    call("GET", "/workers").then((data) => {
      el.className = data.live.length ? "muted" : "no-workers";
      el.replaceChildren(...(data.live.length
        ? ["Live: ", ...data.live.map((w, i) => [i ? "; " : "", h("code", { "data-worker": w.id }, w.id),
          " (" + w.kinds.join(", ") + ", " + w.in_flight + " / " + w.concurrency + " in flight, seen " + age(w.last_seen_seconds) + " ago)"]).flat()]
        : ["No live worker: nothing claims commands. Start one with ", h("code", {}, "fencepost worker"), "."]));
    }).catch(() => {}).finally(() => window.setTimeout(pollRehearsalWorkers, 5000));
  }


  // ── the action host's views (ADR 0049): invocations, one invocation, the reconciliation queue ──
  const HOST = "/v1/host";
  const VERDICTS = new Set(["ActionInvocationSucceeded", "ActionInvocationFailed",
    "ActionInvocationReconciliationRequired", "InvocationResolved"]);
  const APPROVAL_EVENTS = new Set(["ApprovalRequested", "ApprovalGranted", "ApprovalRejected", "ApprovalExpired"]);
  function approvalText(e) {
    const p = e.payload;
    if (e.type === "ApprovalRequested") return ", authority " + p.authority + " required until " + when(p.expires_at) + (p.reason ? ": " + p.reason : "");
    if (e.type === "ApprovalExpired") return ": nobody decided in time";
    return " by " + p.approver + " (authority " + p.authority + ")" + (p.note ? ": " + p.note : "");
  }
  const json = (value) => (value === null || value === undefined ? "—" : JSON.stringify(value));
  const invLink = (id) => h("a", { href: "/invocations/" + encodeURIComponent(id) }, h("code", {}, id));

  // Poll ``load`` every pollMs (never two at once), with the same freshness line as the rehearsal page.
  function poller(load) {
    const pollMs = Number(main.dataset.pollMs) || 1000;
    const stateEl = document.getElementById("freshness");
    const detailEl = document.getElementById("freshness-detail");
    let lastOk = null, lastError = null, inflight = false, timer = null;
    function freshness() {
      const since = lastOk === null ? Infinity : (performance.now() - lastOk) / 1000;
      let state, text;
      if (lastError) { state = "error"; text = "Stale: the last refresh failed (" + lastError + ")"; }
      else if (since > Math.max(4, pollMs / 1000 * 2.5)) { state = "stale"; text = "Stale: no refresh for " + (since === Infinity ? "a while" : Math.round(since) + " s"); }
      else { state = "live"; text = "Live: updating every " + pollMs / 1000 + " s"; }
      if (stateEl.textContent !== text) stateEl.textContent = text;
      stateEl.dataset.state = state;
      stateEl.parentElement.classList.toggle("stale", state !== "live");
    }
    async function refresh() {
      if (inflight) return;
      inflight = true;
      window.clearTimeout(timer);
      try {
        await load();
        lastOk = performance.now();
        lastError = null;
        detailEl.textContent = "";
      } catch (error) {
        lastError = describe(error);
      } finally {
        inflight = false;
      }
      freshness();
      timer = window.setTimeout(refresh, pollMs);
    }
    window.setInterval(freshness, 1000);
    refresh();
    return refresh;
  }

  function invocationRow(v) {
    return h("tr", { "data-invocation": v.id },
      h("td", {}, invLink(v.id)), h("td", {}, v.action_id + " v" + v.action_version),
      h("td", {}, badge(v.status)), h("td", {}, v.attempt_count), h("td", {}, h("code", {}, v.idempotency_key)),
      h("td", {}, h("time", { datetime: v.created_at }, when(v.created_at))),
      h("td", { className: "attempt-error" }, v.error || ""));
  }

  function initInvocations() {
    const form = document.getElementById("invocation-filters");
    const more = document.getElementById("more-invocations");
    let pages = 1;
    function query(cursor) {
      const params = new URLSearchParams({ limit: "50" });
      const status = document.getElementById("filter-status").value;
      const action = document.getElementById("filter-action").value.trim();
      if (status) params.set("status", status);
      if (action) params.set("action_id", action);
      if (cursor) params.set("cursor", cursor);
      return HOST + "/invocations?" + params.toString();
    }
    let drawn = "";
    const refresh = poller(async () => {
      let items = [], cursor = null;
      for (let i = 0; i < pages; i++) {
        const page = await call("GET", query(cursor));
        items = items.concat(page.items);
        cursor = page.next_cursor;
        if (!cursor) break;
      }
      more.hidden = !cursor;
      const key = JSON.stringify(items);
      if (key === drawn) return;
      drawn = key;
      const body = document.getElementById("invocations");
      body.replaceChildren(...(items.length ? items.map(invocationRow)
        : [h("tr", {}, h("td", { colSpan: 7, className: "muted" }, "No invocation matches."))]));
    });
    form.addEventListener("submit", (event) => { event.preventDefault(); pages = 1; refresh(); });
    more.addEventListener("click", () => { pages += 1; refresh(); });
  }

  function resolutionText(r) {
    return "Resolved " + r.outcome + " by " + r.operator + " at " + when(r.resolved_at) + " (was " + r.prior.status + "): " + r.note;
  }

  function initInvocation() {
    const id = main.dataset.invocationId;
    let drawn = "";
    let lastStatus = null;
    poller(async () => {
      const v = await call("GET", HOST + "/invocations/" + encodeURIComponent(id));
      const key = JSON.stringify(v);
      if (key === drawn) return;
      drawn = key;
      if (lastStatus !== null && lastStatus !== v.status) say("The invocation is now " + v.status);
      lastStatus = v.status;
      document.getElementById("inv-status").replaceChildren(badge(v.status));
      const rec = v.reconciliation || {};
      const rows = [["Action", v.action_id + " v" + v.action_version], ["Status", badge(v.status)],
        ["Attempts", v.attempt_count], ["Submitted by", v.actor + (v.authority ? " under " + v.authority : "")],
        ["Idempotency key", h("code", {}, v.idempotency_key)], ["Created", when(v.created_at)],
        ["Reconciliation kind", rec.kind || "—"], ["Error", v.error || "—"], ["Lease owner", v.lease_owner || "—"]];
      document.getElementById("inv-summary").replaceChildren(...rows.map(([label, value]) =>
        h("div", {}, h("dt", {}, label), h("dd", { "data-field": label.toLowerCase().replace(/ /g, "-") }, value))));
      // Both verdicts when an operator resolved it: the one the host wrote, and the resolution.
      const verdicts = v.events.filter((e) => VERDICTS.has(e.type));
      const approvals = v.events.filter((e) => APPROVAL_EVENTS.has(e.type));
      // (replaceChildren draws a null as the text "null": the absent resolution is "".)
      document.getElementById("inv-verdicts").replaceChildren(
        h("h3", {}, "Verdict history"),
        h("ol", { className: "verdict-history", id: "verdict-history" }, ...(verdicts.length ? verdicts.map((e) =>
          h("li", { "data-type": e.type }, h("strong", {}, e.type), " at " + when(e.occurred_at),
            e.type === "InvocationResolved" ? " by " + e.payload.operator + ": " + e.payload.outcome + " (" + e.payload.note + ")"
              : e.payload.error ? ": " + e.payload.error : "")) : [h("li", { className: "muted" }, "No verdict yet.")])),
        // The approval's request and decision (ADR 0052), when a policy asked for one.
        h("div", { id: "inv-approvals" }, approvals.length ? [h("h3", {}, "Approval"),
          h("ol", { className: "verdict-history", id: "approval-history" }, ...approvals.map((e) => h("li", { "data-type": e.type },
            h("strong", {}, e.type), " at " + when(e.occurred_at), " · policy " + e.payload.policy + approvalText(e))))] : null),
        v.resolution ? h("p", { id: "resolution", "data-outcome": v.resolution.outcome }, resolutionText(v.resolution),
          v.resolution.evidence ? [" · evidence ", h("code", {}, json(v.resolution.evidence))] : null) : "");
      document.getElementById("inv-steps").replaceChildren(...(v.steps.length ? v.steps.map((s) => h("tr", { "data-step": s.name },
        h("td", {}, s.name), h("td", {}, badge(s.status)), h("td", {}, s.attempts),
        h("td", {}, h("code", {}, s.adapter_invocation_id)), h("td", {}, s.external_reference ? h("code", {}, s.external_reference) : "—"),
        h("td", { className: "attempt-error" }, s.error || ""))) : [h("tr", {}, h("td", { colSpan: 6, className: "muted" }, "No step has run."))]));
      document.getElementById("inv-events").replaceChildren(...v.events.map((e) => h("li", { "data-type": e.type, className: VERDICTS.has(e.type) ? "verdict" : "" },
        e.type, " ", h("span", { className: "muted" }, "#" + e.sequence + " · " + when(e.occurred_at) + " · " + e.subject_type),
        " ", h("code", { className: "payload" }, json(e.payload)))));
      document.getElementById("inv-recon").replaceChildren(...(v.reconciliations.length ? v.reconciliations.map((r) => h("tr", {},
        h("td", {}, r.log), h("td", {}, r.kind), h("td", {}, r.adapter_invocation_id ? h("code", {}, r.adapter_invocation_id) : "—"),
        h("td", {}, when(r.created_at)), h("td", {}, h("code", { className: "payload" }, json(r.payload)))))
        : [h("tr", {}, h("td", { colSpan: 5, className: "muted" }, "No reconciliation record."))]));
      document.getElementById("inv-leases").replaceChildren(...(v.lease_timeline.length ? v.lease_timeline.map((d) => h("tr", {},
        h("td", {}, "#" + d.delivery + " (" + d.claim + ")"), h("td", {}, d.owner || "—"), h("td", {}, when(d.claimed_at)),
        h("td", {}, d.heartbeats), h("td", {}, when(d.lease_until)), h("td", {}, d.ended + (d.ended_at ? " at " + when(d.ended_at) : ""))))
        : [h("tr", {}, h("td", { colSpan: 6, className: "muted" }, "No delivery yet (inline, or not claimed)."))]));
    });
  }

  function queueItem(entry) {
    const v = entry.invocation;
    const fid = "resolve-" + v.id;
    return h("li", { className: "attempt s-reconciliation_required", id: "queue-" + v.id, "data-invocation": v.id },
      h("article", { "aria-labelledby": "qh-" + v.id },
        h("h3", { id: "qh-" + v.id }, invLink(v.id), " ", v.action_id + " v" + v.action_version, " ", badge(v.status)),
        h("p", {}, h("strong", {}, entry.kind || "reconciliation"), " · waiting since " + when(entry.waiting_since)),
        h("p", { className: "attempt-error" }, entry.reason || ""),
        h("ul", { className: "lookups" }, ...(entry.lookups.length ? entry.lookups.map((lk) => h("li", {},
          "Look up at ", h("strong", {}, lk.vendor), ": step " + lk.step + " (" + lk.operation + ", " + lk.status + "), provider key ",
          h("code", {}, lk.adapter_invocation_id), lk.external_reference ? [", external reference ", h("code", {}, lk.external_reference)] : null))
          : [h("li", { className: "muted" }, "No step reached a provider: nothing to look up.")])),
        h("form", { className: "resolve-form", "data-invocation": v.id, id: fid },
          h("div", { className: "stack" }, h("label", { htmlFor: fid + "-outcome" }, "Outcome"),
            // Nothing preselected: recording an effect that did not happen must take a choice, never a default.
            h("select", { id: fid + "-outcome", name: "outcome", required: true },
              h("option", { value: "", disabled: true, selected: true }, "choose an outcome"),
              h("option", { value: "succeeded" }, "succeeded: the effect happened"),
              h("option", { value: "failed" }, "failed: it did not happen"))),
          h("div", { className: "stack" }, h("label", { htmlFor: fid + "-operator" }, "Operator"),
            h("input", { id: fid + "-operator", name: "operator", type: "text", required: true, spellcheck: false, placeholder: "ops:alice" })),
          h("div", { className: "stack wide" }, h("label", { htmlFor: fid + "-note" }, "Note: what you found at the provider"),
            h("input", { id: fid + "-note", name: "note", type: "text", required: true })),
          h("div", { className: "stack wide" }, h("label", { htmlFor: fid + "-evidence" }, "Evidence (optional JSON object)"),
            h("textarea", { id: fid + "-evidence", name: "evidence", rows: 2, spellcheck: false, placeholder: '{"charge_id": "ch_…"}' })),
          h("div", { className: "actions" }, h("button", { type: "submit", className: "primary", id: fid + "-submit" }, "Resolve")),
          // Approving is on the approvals view (ADR 0052): an awaiting_approval invocation never enters this queue.
          h("p", { className: "resolve-error wide", id: fid + "-error", role: "alert" }))));
  }

  function initQueue() {
    let known = null, linked = false;
    const refresh = poller(async () => {
      const data = await call("GET", HOST + "/reconciliation-queue");
      const list = document.getElementById("queue");
      const ids = data.items.map((e) => e.invocation.id);
      document.getElementById("queue-empty").hidden = ids.length > 0;
      // Keyed update: an item already drawn keeps its element, so a half-typed resolution is never wiped.
      const nodes = data.items.map((e) => document.getElementById("queue-" + e.invocation.id) || queueItem(e));
      const same = nodes.length === list.children.length && nodes.every((n, i) => list.children[i] === n);
      if (!same) list.replaceChildren(...nodes);
      // A link to one entry (``#queue-<id>``, e.g. from a package's deliveries) scrolls to it once it is drawn.
      const wanted = !linked && location.hash.startsWith("#queue-") ? document.getElementById(decodeURIComponent(location.hash.slice(1))) : null;
      if (wanted) {
        linked = true;
        wanted.classList.add("targeted");
        wanted.scrollIntoView({ block: "start" });
      }
      if (known !== null) {
        const added = ids.filter((id) => !known.includes(id));
        if (added.length) say("New in the reconciliation queue: " + added.join(", "));
      }
      known = ids;
    });
    document.getElementById("queue").addEventListener("submit", async (event) => {
      const form = event.target.closest("form.resolve-form");
      if (!form) return;
      event.preventDefault();
      const id = form.dataset.invocation;
      const errorEl = document.getElementById("resolve-" + id + "-error");
      errorEl.textContent = "";
      const raw = form.elements.evidence.value.trim();
      let evidence = null;
      if (raw) {
        try { evidence = JSON.parse(raw); } catch (e) { errorEl.textContent = "Evidence is not valid JSON."; return; }
      }
      const body = { outcome: form.elements.outcome.value, operator: form.elements.operator.value.trim(),
        note: form.elements.note.value.trim(), evidence };
      const button = form.querySelector("button[type=submit]");
      button.disabled = true;
      const result = await mutate("POST", HOST + "/invocations/" + encodeURIComponent(id) + "/resolve", body, "Resolving " + id + "…");
      button.disabled = false;
      if (result) {
        say("Resolved " + id + " as " + result.status);
        refresh();
      } else {
        errorEl.textContent = document.getElementById("alert").textContent;
      }
    });
  }

  // ── approvals (ADR 0052): open requests, oldest first, with Approve and Reject; the server judges ──
  function approvalExpiry(entry) {
    return entry.expired ? "expired at " + when(entry.expires_at) + ": it can no longer be decided"
      : "expires " + when(entry.expires_at);
  }

  function approvalItem(entry) {
    const v = entry.invocation;
    const fid = "approval-" + v.id;
    return h("li", { className: "attempt s-awaiting_approval", id: "approvals-" + v.id, "data-invocation": v.id },
      h("article", { "aria-labelledby": "ah-" + v.id },
        h("h3", { id: "ah-" + v.id }, invLink(v.id), " ", v.action_id + " v" + v.action_version, " ", badge(v.status)),
        h("p", {}, "Policy ", h("strong", { "data-field": "policy" }, entry.policy), " requires authority ",
          h("strong", { "data-field": "authority" }, entry.authority), entry.reason ? ": " + entry.reason : ""),
        h("p", { className: "muted" }, "Submitted by " + v.actor + " · requested " + when(entry.requested_at) + " · ",
          h("span", { className: "approval-expiry", "data-expired": String(entry.expired) }, approvalExpiry(entry))),
        h("p", {}, "Params ", h("code", { className: "payload" }, json(v.params))),
        h("form", { className: "approval-form", "data-invocation": v.id, id: fid },
          h("div", { className: "stack" }, h("label", { htmlFor: fid + "-approver" }, "Approver (you)"),
            h("input", { id: fid + "-approver", name: "approver", type: "text", required: true, spellcheck: false, placeholder: "ops:alice" })),
          h("div", { className: "stack" }, h("label", { htmlFor: fid + "-authority" }, "Authority you hold"),
            h("input", { id: fid + "-authority", name: "authority", type: "text", required: true, spellcheck: false, placeholder: entry.authority })),
          h("div", { className: "stack wide" }, h("label", { htmlFor: fid + "-note" }, "Note (recorded with the decision)"),
            h("input", { id: fid + "-note", name: "note", type: "text" })),
          h("div", { className: "actions" },
            h("button", { type: "submit", className: "primary", id: fid + "-approve", "data-decision": "approve" }, "Approve"),
            h("button", { type: "submit", id: fid + "-reject", "data-decision": "reject" }, "Reject")),
          h("p", { className: "resolve-error wide", id: fid + "-error", role: "alert" }))));
  }

  function initApprovals() {
    let known = null;
    const refresh = poller(async () => {
      const data = await call("GET", HOST + "/approvals");
      const list = document.getElementById("approvals");
      const ids = data.items.map((e) => e.invocation.id);
      document.getElementById("approvals-empty").hidden = ids.length > 0;
      // Keyed update: a drawn item keeps its element (and what is typed in its form); only its expiry is redrawn.
      const nodes = data.items.map((e) => {
        const drawn = document.getElementById("approvals-" + e.invocation.id);
        if (!drawn) return approvalItem(e);
        const expiry = drawn.querySelector(".approval-expiry");
        const text = approvalExpiry(e);
        if (expiry.textContent !== text) { expiry.textContent = text; expiry.dataset.expired = String(e.expired); }
        return drawn;
      });
      const same = nodes.length === list.children.length && nodes.every((n, i) => list.children[i] === n);
      if (!same) list.replaceChildren(...nodes);
      if (known !== null) {
        const added = ids.filter((id) => !known.includes(id));
        if (added.length) say("New approval request" + (added.length === 1 ? ": " : "s: ") + added.join(", "));
      }
      known = ids;
    });
    document.getElementById("approvals").addEventListener("submit", async (event) => {
      const form = event.target.closest("form.approval-form");
      if (!form) return;
      event.preventDefault();
      const decision = event.submitter && event.submitter.dataset.decision === "reject" ? "reject" : "approve";
      const id = form.dataset.invocation;
      const errorEl = document.getElementById("approval-" + id + "-error");
      errorEl.textContent = "";
      const body = { approver: form.elements.approver.value.trim(), authority: form.elements.authority.value.trim(),
        note: form.elements.note.value.trim() };
      const buttons = form.querySelectorAll("button[type=submit]");
      buttons.forEach((b) => { b.disabled = true; });
      const result = await mutate("POST", HOST + "/invocations/" + encodeURIComponent(id) + "/" + decision, body,
        (decision === "approve" ? "Approving " : "Rejecting ") + id + "…");
      buttons.forEach((b) => { b.disabled = false; });
      if (result) {
        say((decision === "approve" ? "Approved " : "Rejected ") + id + ": now " + result.status);
        refresh();
      } else {
        errorEl.textContent = document.getElementById("alert").textContent;
      }
    });
  }

  // ── delivery (issue 17; ADRs 0055-0058): targets, packages, and one package's deliveries ──
  const deliveriesHref = (name) => "/packages/" + encodeURIComponent(name) + "/deliveries";
  const labelsText = (labels) => Object.entries(labels || {}).map(([k, v]) => k + "=" + v).join(", ");
  // Draw ``items`` with ``draw`` only when they changed (a 304 poll returns the same data: nothing is redrawn).
  function redrawn(state, items, draw) {
    const key = JSON.stringify(items);
    if (key === state.drawn) return false;
    state.drawn = key;
    draw();
    return true;
  }

  function targetRow(t) {
    const removed = Boolean(t.removed_at);
    return h("tr", { "data-target": t.name, "data-removed": removed ? "true" : "false", className: removed ? "removed" : null },
      h("th", { scope: "row" }, t.name, removed ? [" ", badge("removed", "s-removed")] : null),
      h("td", {}, h("code", { className: "fp", title: t.url }, t.url)),
      h("td", {}, labelsText(t.labels) || h("span", { className: "muted" }, "none")),
      h("td", {}, h("time", { datetime: t.added_at || "" }, when(t.added_at)),
        removed ? h("span", { className: "muted" }, " · removed " + when(t.removed_at)) : null),
      h("td", {}, t.last_deliveries.length ? h("ul", { className: "last-deliveries" }, ...t.last_deliveries.map((d) =>
        h("li", { "data-package": d.package }, h("a", { href: deliveriesHref(d.package) }, d.package), " " + (d.version || "?") + " ",
          badge(d.status), " ", h("span", { className: "muted" }, when(d.updated_at)))))
        : h("span", { className: "muted" }, "never delivered")));
  }

  function initTargets() {
    const removed = document.getElementById("show-removed");
    const state = { drawn: null };
    const refresh = poller(async () => {
      const url = "/v1/targets" + (removed.checked ? "?include_removed=true" : "");
      const data = await poll(url);
      redrawn(state, data.items, () => {
        document.getElementById("targets").replaceChildren(...(data.items.length ? data.items.map(targetRow)
          : [h("tr", {}, h("td", { colSpan: 5, className: "muted" }, "No target yet: add one with `fencepost target add NAME sqlite:///path.db`."))]));
      });
    });
    removed.addEventListener("change", () => refresh());
  }

  function initPackages() {
    const state = { drawn: null };
    poller(async () => {
      const data = await poll("/v1/packages");
      redrawn(state, data.items, () => {
        document.getElementById("packages").replaceChildren(...(data.items.length ? data.items.map((p) =>
          h("tr", { "data-package": p.name }, h("th", { scope: "row" }, h("a", { href: deliveriesHref(p.name) }, p.name)),
            h("td", {}, p.installed_version || h("span", { className: "muted" }, "not installed")),
            h("td", {}, p.versions.join(", ")), h("td", {}, p.targets)))
          : [h("tr", {}, h("td", { colSpan: 4, className: "muted" }, "No package is published yet."))]));
      });
    });
  }

  function ledgerText(row) {
    return row.migration + " " + row.state + " (version " + row.version + ", applied " + when(row.applied_at) + ")";
  }

  // A step's error that is the delivery's own (already shown above the steps) is not printed twice.
  function stepError(s, d) {
    if (!s.error) return "";
    if (d.error && d.error.includes(s.error)) return h("span", { className: "muted" }, "the delivery's error, above");
    return s.error;
  }

  function deliveryStep(s, d) {
    return h("tr", { "data-step": s.step },
      h("th", { scope: "row" }, s.step), h("td", {}, s.migration || "—"), h("td", {}, badge(s.status)),
      h("td", {}, s.attempts),
      h("td", {}, s.applied === true ? "applied" : s.applied === false ? "already in the ledger" : "—"),
      h("td", { className: "ledger" }, s.ledger ? [ledgerText(s.ledger), " ", h("code", { className: "fp", title: s.ledger.checksum }, s.ledger.checksum)]
        : h("span", { className: "muted" }, s.migration ? "no ledger row recorded by this step" : "—")),
      h("td", {}, h("code", { className: "fp", title: s.adapter_invocation_id }, s.adapter_invocation_id)),
      h("td", { className: "attempt-error" }, stepError(s, d)));
  }

  function evidenceText(d) {
    const e = d.evidence;
    if (e && e.comparison) return e.comparison;
    if (d.status === "succeeded") return "no evidence recorded";
    return d.status === "failed" || d.status === "reconciliation_required" ? "not compared: the delivery did not finish"
      : "not compared yet: the delivery is " + d.status;
  }

  function deliveryItem(d) {
    const name = d.target || d.target_id;
    const matched = d.evidence && d.evidence.matches_rehearsal === true;
    const e = d.evidence;
    const queueHref = "/reconciliation-queue#queue-" + encodeURIComponent(d.invocation_id);
    return h("li", { className: "attempt s-" + d.status, id: "delivery-" + name, "data-target": name, "data-status": d.status },
      h("article", { "aria-labelledby": "dh-" + name },
        h("h2", { id: "dh-" + name }, name, " ", d.target_removed ? badge("removed", "s-removed") : null, " ",
          h("span", { className: "version" }, d.version || "?"), " ", badge(d.status)),
        h("p", {}, "Invocation ", invLink(d.invocation_id), " · submitted " + when(d.created_at) + " · last change " + when(d.updated_at),
          d.target_info ? [" · ", h("code", { className: "fp", title: d.target_info.url }, d.target_info.url)] : null),
        d.error ? h("p", { className: "attempt-error delivery-error" }, d.error) : null,
        h("p", { className: "evidence" + (matched ? " ok" : e && e.comparison ? " bad" : ""), "data-matches": e ? String(e.matches_rehearsal) : "none" },
          h("strong", {}, "Evidence: "), evidenceText(d),
          e && e.scenario ? h("span", { className: "muted" }, " (" + e.scenario + (e.start_state ? ", from " + e.start_state : "") + ")") : null,
          e && e.fingerprint ? [" · target ", h("code", { className: "fp", title: e.fingerprint }, e.fingerprint)] : null,
          e && e.rehearsal ? [" · rehearsal ", h("code", { className: "fp", title: e.rehearsal }, e.rehearsal)] : null),
        d.reconciliation ? h("p", { className: "reconciliation" }, h("strong", {}, "Reconciliation: "),
          (d.reconciliation.kind || "reconciliation") + " since " + when(d.reconciliation.waiting_since) + ". ",
          h("a", { href: queueHref, className: "queue-link" }, "Open its entry in the reconciliation queue"),
          " to resolve it with what the target shows.") : null,
        h("div", { className: "scroll" }, h("table", { className: "steps" },
          h("caption", { className: "visually-hidden" }, "Steps of the delivery to " + name),
          h("thead", {}, h("tr", {}, ...["Step", "Migration", "Status", "Attempts", "Applied", "Ledger row", "Provider key", "Error"]
            .map((c) => h("th", { scope: "col" }, c)))),
          h("tbody", {}, ...(d.steps.length ? d.steps.map((s) => deliveryStep(s, d))
            : [h("tr", {}, h("td", { colSpan: 8, className: "muted" }, "No step has run yet."))]))))));
  }

  function initDeliveries() {
    const name = main.dataset.package;
    const state = { drawn: null };
    let statuses = null;
    poller(async () => {
      const data = await poll("/v1/packages/" + encodeURIComponent(name) + "/deliveries");
      document.getElementById("deliveries-empty").hidden = data.items.length > 0;
      redrawn(state, data.items, () => {
        document.getElementById("deliveries").replaceChildren(...data.items.map(deliveryItem));
      });
      const now = Object.fromEntries(data.items.map((d) => [d.target || d.target_id, d.status]));
      if (statuses !== null) {
        const changed = Object.entries(now).filter(([t, st]) => statuses[t] !== st).map(([t, st]) => t + ": " + st);
        if (changed.length) say("Delivery " + changed.join(", "));
      }
      statuses = now;
    });
  }

  // ── workflow runs (issue 18; ADR 0072): the Runs list, and one Run's DAG drawn live ──
  const STEP_STATES = ["waiting", "ready", "running", "lost", "succeeded", "failed", "skipped", "cancelled", "timed_out"];
  const runHref = (id) => "/workflows/" + encodeURIComponent(id);
  const countsText = (counts) => STEP_STATES.filter((s) => counts[s]).map((s) => counts[s] + " " + s).join(", ");

  function workflowRunRow(r) {
    return h("tr", { "data-run": r.run_id, "data-status": r.status },
      h("th", { scope: "row" }, h("a", { href: runHref(r.run_id) }, h("code", { className: "fp", title: r.run_id }, r.run_id)),
        h("br", {}), h("span", { className: "muted" }, "plan " + r.plan_id)),
      h("td", {}, r.workflow_id),
      h("td", {}, badge(r.status), r.cancel ? [" ", badge("cancel requested", "s-cancelling")] : null),
      h("td", { className: "step-counts" }, r.steps + ": " + countsText(r.counts)),
      h("td", {}, h("time", { datetime: r.created_at }, when(r.created_at))),
      h("td", {}, r.settled_at ? h("time", { datetime: r.settled_at }, when(r.settled_at)) : h("span", { className: "muted" }, "not yet")));
  }

  function initWorkflows() {
    const status = main.dataset.status || "";
    const params = new URLSearchParams({ limit: main.dataset.limit || "50" });
    if (status) params.set("status", status);
    const state = { drawn: null };
    poller(async () => {
      const data = await poll("/workflows.json?" + params.toString());
      document.getElementById("workflow-runs-more").hidden = !data.more;
      redrawn(state, data.items, () => {
        document.getElementById("workflow-runs").replaceChildren(...(data.items.length ? data.items.map(workflowRunRow)
          : [h("tr", {}, h("td", { colSpan: 6, className: "muted" }, "No workflow run" + (status ? " is " + status : "") + ": plan and admit one with `fencepost workflow plan` and `fencepost workflow admit`."))]));
      });
    });
  }

  // The DAG as SVG from the page JSON's ``dag`` (ui/dag.py layout), for a page served without it (closed reads).
  const SVG = "http://www.w3.org/2000/svg";
  function svg(tag, attrs, ...children) {
    const el = document.createElementNS(SVG, tag);
    for (const [key, value] of Object.entries(attrs || {})) el.setAttribute(key, value);
    for (const child of children) el.append(child instanceof Node ? child : document.createTextNode(String(child)));
    return el;
  }
  function drawDag(dag, steps) {
    const byKey = new Map(steps.map((s) => [s.key, s]));
    const short = (key) => (key.length > 13 ? key.slice(0, 12) + "…" : key);
    const root = svg("svg", { id: "dag", class: "dag", viewBox: "0 0 " + dag.width + " " + dag.height, width: dag.width, role: "img", "aria-labelledby": "dag-title" },
      svg("title", { id: "dag-title" }, "DAG of " + dag.nodes.length + " steps in " + dag.layers.length + " layers"),
      svg("g", { class: "edges" }, ...dag.edges.map((e) => svg("line", { x1: e.x1, y1: e.y1, x2: e.x2, y2: e.y2, "data-edge": e.source + ">" + e.target }))),
      ...dag.nodes.map((n) => {
        const status = byKey.get(n.key).status;
        return svg("a", { href: "#step-" + n.key, class: "node s-" + status, "data-step": n.key, "data-status": status },
          svg("title", {}, n.key + ": " + status),
          svg("rect", { x: n.x, y: n.y, width: dag.node_w, height: dag.node_h, rx: 6 }),
          svg("text", { x: n.cx, y: n.y + 16, class: "node-key" }, short(n.key)),
          svg("text", { x: n.cx, y: n.y + 32, class: "node-status" }, status));
      }));
    document.getElementById("dag-box").replaceChildren(root);
  }

  function needsCell(needs) {
    const shown = Number(main.dataset.needsShown) || 6;
    if (!needs.length) return h("td", { "data-field": "needs" }, h("span", { className: "muted" }, "none"));
    if (needs.length <= shown) return h("td", { "data-field": "needs" }, needs.join(", "));
    return h("td", { "data-field": "needs", title: needs.join(", ") }, needs.slice(0, shown).join(", ") + " and " + (needs.length - shown) + " more");
  }

  function workflowStepRow(s) {
    return h("tr", { id: "step-" + s.key, "data-step": s.key, "data-status": s.status },
      h("th", { scope: "row" }, s.key), h("td", {}, s.task), needsCell(s.needs),
      h("td", { "data-field": "status" }, badge(s.status)),
      h("td", { "data-field": "attempts" }, s.attempts),
      h("td", { "data-field": "invocation" }, s.invocation_id ? [h("a", { href: "/invocations/" + encodeURIComponent(s.invocation_id) }, fp(s.invocation_id)), " ", badge(s.invocation_status || "unknown")]
        : h("span", { className: "muted" }, "not started")),
      h("td", { "data-field": "reason", className: "reason" }, (s.reason || "—") + ((s.blocked_by || []).length ? ": " + s.blocked_by.map((b) => b.key + " " + b.status).join(", ") : "")),
      h("td", { "data-field": "started" }, when(s.started_at)),
      h("td", { "data-field": "deadline" }, when(s.deadline_at)));
  }

  function drawWorkflowRun(r) {
    const field = (name) => document.querySelector('#wf-summary [data-field="' + name + '"]');
    field("status").replaceChildren(badge(r.status));
    field("verdict").textContent = r.terminal ? r.status + " at " + when(r.settled_at) : "not yet: steps are still to run";
    field("cancel").textContent = r.cancel ? "requested " + when(r.cancel.requested_at) + (r.cancel.reason ? ": " + r.cancel.reason : "") : "not requested";
    field("workflow").replaceChildren(r.workflow_id, r.package ? [" of ", h("a", { href: deliveriesHref(r.package) }, r.package)] : null);
    field("target").textContent = r.target ? r.target.name : "—";
    field("plan").replaceChildren(h("code", {}, r.plan_id));
    field("created").textContent = when(r.created_at);
    field("fence").textContent = r.fence + " · " + r.events;
    if (r.dag && !document.getElementById("dag")) drawDag(r.dag, r.steps);
    document.getElementById("wf-counts").replaceChildren(r.steps.length + " steps:", ...STEP_STATES.filter((s) => r.counts[s]).map((s) =>
      [" ", h("span", { className: "count", "data-count": s }, badge(s), " " + r.counts[s])]).flat());
    const nodes = new Map([...document.querySelectorAll("#dag .node")].map((n) => [n.dataset.step, n]));
    const rows = new Map([...document.querySelectorAll("#wf-steps tr[data-step]")].map((n) => [n.dataset.step, n]));
    const body = document.getElementById("wf-steps");
    for (const s of r.steps) {
      const node = nodes.get(s.key);
      if (node && node.dataset.status !== s.status) {
        node.setAttribute("class", "node s-" + s.status);
        node.dataset.status = s.status;
        node.querySelector("title").textContent = s.key + ": " + s.status;
        node.querySelector(".node-status").textContent = s.status;
      }
      const fresh = workflowStepRow(s);
      const row = rows.get(s.key);
      if (!row) body.append(fresh);
      else if (row.textContent !== fresh.textContent || row.dataset.status !== s.status) row.replaceWith(fresh);
    }
  }

  // Polls /workflows/{id}.json (ETag: an unchanged Run is a 304) until the Run settles, then stops.
  function initWorkflowRun() {
    // A page served without the drawing (reads need the token) asks for the layout with the state.
    const url = "/workflows/" + encodeURIComponent(main.dataset.runId) + ".json" + (document.getElementById("dag") ? "" : "?dag=true");
    const pollMs = Number(main.dataset.pollMs) || 1000;
    const stateEl = document.getElementById("freshness");
    const detailEl = document.getElementById("freshness-detail");
    let drawn = null, lastOk = null, lastError = null, settled = null, status = null;
    function freshness() {
      const since = lastOk === null ? Infinity : (performance.now() - lastOk) / 1000;
      let state, text;
      if (settled) { state = "settled"; text = "Settled: the run is " + settled + "; no longer updating"; }
      else if (lastError) { state = "error"; text = "Stale: the last refresh failed (" + lastError + ")"; }
      else if (since > Math.max(4, pollMs / 1000 * 2.5)) { state = "stale"; text = "Stale: no refresh for " + (since === Infinity ? "a while" : Math.round(since) + " s"); }
      else { state = "live"; text = "Live: updating every " + pollMs / 1000 + " s"; }
      if (stateEl.textContent !== text) stateEl.textContent = text;
      stateEl.dataset.state = state;
      stateEl.parentElement.classList.toggle("stale", state === "stale" || state === "error");
    }
    async function refresh() {
      try {
        const r = await poll(url);
        if (r !== drawn) {
          drawWorkflowRun(r);
          drawn = r;
          detailEl.textContent = "fence " + r.fence + ", " + r.events + " events";
        }
        if (status !== null && status !== r.status) say("The run is now " + r.status);
        status = r.status;
        lastOk = performance.now();
        lastError = null;
        if (r.terminal) settled = r.status;
      } catch (error) {
        lastError = describe(error);
      }
      freshness();
      if (!settled) window.setTimeout(refresh, pollMs);
    }
    const ticker = window.setInterval(() => { freshness(); if (settled) window.clearInterval(ticker); }, 1000);
    if (main.dataset.terminal === "true") { settled = document.querySelector('#wf-summary [data-field="status"]').textContent.trim(); freshness(); }
    else refresh();
  }

  if (page === "index") initIndex();
  if (page === "rehearsal") initRehearsal();
  if (page === "invocations") initInvocations();
  if (page === "invocation") initInvocation();
  if (page === "queue") initQueue();
  if (page === "approvals") initApprovals();
  if (page === "targets") initTargets();
  if (page === "packages") initPackages();
  if (page === "deliveries") initDeliveries();
  if (page === "workflows") initWorkflows();
  if (page === "workflow-run") initWorkflowRun();
})();
