// The abrq console: reads the admin API every two seconds and renders it;
// every button calls the same API route as the CLI, so each action leaves
// the same audit entry (actor "console"). Text from the server is only
// ever set as text, never parsed as HTML.
"use strict";

const POLL_MS = 2000;
const HISTORY_MS = 5 * 60 * 1000;
const TOKEN_KEY = "abrq-admin-token";
const COLUMNS = 10; // of a stream's destination table
const PREVIEW_RECORDS = 50;

const ui = {
  open: new Set(), // "stream/destination" whose dead letters are shown
  previews: new Map(), // dead letter id -> its records (or an error)
  deadLetters: new Map(), // "stream/destination" -> rows
  verifyOpen: new Set(), // "stream/destination" whose verification is shown
  verify: new Map(), // "stream/destination" -> last verification report (or null)
  history: new Map(), // "stream/destination" -> [{t, records, backlog}]
  lastPoll: 0,
};

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) {
      // through a property, so an update in place can swap the handler
      e[`__${k}`] = v;
      e.addEventListener(k.slice(2), (ev) => e[`__${k}`](ev));
    }
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

// --- updating in place --------------------------------------------------------
// Each poll renders the page anew, then `patch` brings the live nodes to
// it, touching only what differs: a row that still exists keeps its
// nodes, so a selection, keyboard focus or a click in flight survives.

// What identifies a node among its siblings: a row's or section's data-*
// name, else its tag and position.
function identity(node) {
  if (node.nodeType !== Node.ELEMENT_NODE) return null;
  const d = node.dataset || {};
  const id = d.stream ?? d.dest ?? d.deadLetter ?? d.deadLetters ?? d.skipped ?? d.preview ?? d.action;
  return id === undefined ? null : `${node.nodeName}:${id}`;
}

function patch(live, next) {
  if (live.nodeType !== next.nodeType || live.nodeName !== next.nodeName) {
    live.replaceWith(next);
    return;
  }
  if (live.nodeType !== Node.ELEMENT_NODE) {
    if (live.nodeValue !== next.nodeValue) live.nodeValue = next.nodeValue;
    return;
  }
  for (const a of [...live.attributes]) if (!next.hasAttribute(a.name)) live.removeAttribute(a.name);
  for (const a of next.attributes) if (live.getAttribute(a.name) !== a.value) live.setAttribute(a.name, a.value);
  for (const k of Object.keys(next)) if (k.startsWith("__on")) live[k] = next[k];
  patchChildren(live, [...next.childNodes]);
}

// Brings `parent`'s children to `wanted`, reusing a live child with the
// same identity (or, unnamed, the same tag in the same order).
function patchChildren(parent, wanted) {
  const named = new Map();
  const unnamed = [];
  for (const c of parent.childNodes) {
    const id = identity(c);
    if (id !== null) named.set(id, c);
    else unnamed.push(c);
  }
  let u = 0;
  wanted.forEach((next, i) => {
    const id = identity(next);
    let live = null;
    if (id !== null) {
      live = named.get(id) || null;
      named.delete(id);
    } else if (u < unnamed.length) {
      live = unnamed[u];
      u += 1;
    }
    const at = parent.childNodes[i] || null;
    if (!live) {
      parent.insertBefore(next, at);
      return;
    }
    if (live !== at) parent.insertBefore(live, at);
    patch(live, next);
  });
  while (parent.childNodes.length > wanted.length) parent.lastChild.remove();
}

// --- the API -----------------------------------------------------------------

class Unauthorized extends Error {}

async function api(method, path) {
  const headers = { Accept: "application/json", "X-Abrq-Actor": "console" };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = "Bearer " + token;
  if (method !== "GET") headers["Content-Type"] = "application/json";
  const resp = await fetch(path, { method, headers, credentials: "omit", cache: "no-store" });
  let body = null;
  try {
    body = await resp.json();
  } catch (_) {
    body = null;
  }
  if (resp.status === 401) throw new Unauthorized((body && body.error) || "unauthorized");
  if (!resp.ok) throw new Error(`${resp.status}: ${(body && body.error) || resp.statusText}`);
  return body;
}

const enc = encodeURIComponent;
const destPath = (s, d) => `/v1/streams/${enc(s)}/destinations/${enc(d)}`;

// --- formatting --------------------------------------------------------------

function count(n) {
  return Number(n || 0).toLocaleString("en-US");
}

function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = Number(n || 0);
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i += 1;
  }
  return `${i === 0 ? v : v.toFixed(1)} ${units[i]}`;
}

function seconds(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  return s < 120 ? `${s}s` : `${Math.round(s / 60)}m`;
}

// One line per item, as a JSON lines file shows it.
function previewText(items) {
  const lines = items.slice(0, PREVIEW_RECORDS).map((it) => {
    if (it.kind === "record") return (it.op && it.op !== "insert" ? `${it.op} ` : "") + JSON.stringify(it.fields);
    return `(${it.kind}) ${JSON.stringify(it)}`;
  });
  if (items.length > PREVIEW_RECORDS) lines.push(`… and ${items.length - PREVIEW_RECORDS} more`);
  return lines.join("\n");
}

function badge(state) {
  return el("span", { class: `state ${state}`, "data-state": state, text: state.replace("_", " ") });
}

// --- history and the small charts -------------------------------------------

function remember(key, dest, now) {
  const h = ui.history.get(key) || [];
  h.push({ t: now, records: dest.delivered_records, backlog: dest.backlog, lag: dest.lag_seconds });
  while (h.length && now - h[0].t > HISTORY_MS) h.shift();
  ui.history.set(key, h);
  return h;
}

// Records per second between consecutive polls.
function rates(h) {
  const out = [];
  for (let i = 1; i < h.length; i += 1) {
    const dt = (h[i].t - h[i - 1].t) / 1000;
    out.push(dt > 0 ? Math.max(0, (h[i].records - h[i - 1].records) / dt) : 0);
  }
  return out;
}

function sparkline(values, title) {
  const w = 120;
  const h = 24;
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("class", "spark");
  svg.setAttribute("width", w);
  svg.setAttribute("height", h);
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", title);
  if (values.length > 1) {
    const max = Math.max(...values, 1);
    const step = w / (values.length - 1);
    const pts = values.map((v, i) => `${(i * step).toFixed(1)},${(h - 2 - (v / max) * (h - 4)).toFixed(1)}`);
    const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
    line.setAttribute("points", pts.join(" "));
    svg.append(line);
  }
  return svg;
}

// --- actions -----------------------------------------------------------------

function confirmAction(title, text) {
  const dialog = $("confirm");
  $("confirm-title").textContent = title;
  $("confirm-text").textContent = text;
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.returnValue = "";
    dialog.showModal();
  });
}

async function act(label, method, path, confirmation) {
  if (confirmation && !(await confirmAction(confirmation.title, confirmation.text))) {
    notice(`${label}: cancelled`);
    return;
  }
  try {
    const r = await api(method, path);
    notice(`${label}: done${r && r.skipped ? ` (${r.skipped} batches skipped)` : ""}`);
  } catch (e) {
    if (e instanceof Unauthorized) return showLogin(e.message);
    notice(`${label}: ${e.message}`, true);
  }
  await poll();
}

function notice(text, isError) {
  const n = $("notice");
  n.textContent = text;
  n.className = isError ? "error" : "";
}

function actionButton(label, name, onclick, danger) {
  return el("button", { type: "button", "data-action": name, class: danger ? "danger" : null, onclick }, label);
}

function destinationActions(s, d) {
  const p = destPath(s, d.name);
  const who = `${s}/${d.name}`;
  const out = [];
  if (d.paused) out.push(actionButton("Resume", "resume", () => act(`resume ${who}`, "POST", `${p}/resume`)));
  else out.push(actionButton("Pause", "pause", () => act(`pause ${who}`, "POST", `${p}/pause`)));
  if (d.enabled) {
    out.push(
      actionButton(
        "Disable",
        "disable",
        () =>
          act(`disable ${who}`, "POST", `${p}/disable`, {
            title: `Disable ${who}?`,
            text:
              `A disabled destination gets nothing and no longer holds the spool: ` +
              `the GC may delete batches it has not received. When it is enabled again it ` +
              `resumes at the oldest batch still spooled, and the batches in between are ` +
              `skipped for it (recorded as a skipped range). To stop deliveries and keep ` +
              `every batch, pause instead.`,
          }),
        true,
      ),
    );
  } else {
    out.push(actionButton("Enable", "enable", () => act(`enable ${who}`, "POST", `${p}/enable`)));
  }
  const b = d.breaker || {};
  if (b.state === "open" || b.state === "half_open" || (b.state === "closed" && b.failures > 0)) {
    out.push(actionButton("Reset breaker", "reset-breaker", () => act(`breaker reset ${who}`, "POST", `${p}/breaker/reset`)));
  }
  const key = `${s}/${d.name}`;
  if (RELATIONAL.has(d.kind)) {
    out.push(
      actionButton(ui.verifyOpen.has(key) ? "Hide verification" : "Verification", "verification", async () => {
        if (ui.verifyOpen.has(key)) ui.verifyOpen.delete(key);
        else ui.verifyOpen.add(key);
        await poll();
      }),
    );
  }
  out.push(
    actionButton(ui.open.has(key) ? "Hide dead letters" : "Dead letters", "dead-letters", async () => {
      if (ui.open.has(key)) ui.open.delete(key);
      else ui.open.add(key);
      await poll();
    }),
  );
  return out;
}

function breakerText(d, now) {
  const b = d.breaker || {};
  if (b.state === "open") {
    const until = Date.parse(b.until);
    return `breaker open, trial in ${seconds(until - now)}`;
  }
  if (b.state === "half_open") return "breaker half-open, trial running";
  if (b.failures > 0) return `${b.failures} failed attempts in a row`;
  return null;
}

// --- rendering ---------------------------------------------------------------

// Shared state: the process holding a lease, "node-b (epoch 3)".
function holderText(h) {
  if (!h.node_id) return "nobody (free)";
  return `${h.node_id}${h.here ? " (this process)" : ""}, epoch ${h.epoch}`;
}

function renderSource(st, now) {
  const src = st.source;
  const h = remember(`${st.name}/`, { delivered_records: src.staged_records, backlog: st.spool.batches, lag_seconds: src.lag_seconds || 0 }, now);
  const r = rates(h);
  const facts = [
    el("span", {}, "source ", el("b", { text: src.engine }), " ", badge(src.state)),
    el("span", {}, "staging ", el("b", { "data-role": "source-rate", text: `${count(Math.round(r.length ? r[r.length - 1] : 0))}/s` }), " ", sparkline(r, "records staged per second, last 5 minutes")),
    el("span", {}, "spool ", el("b", { text: `${count(st.spool.batches)} batches` }), `, ${count(st.spool.records)} records, ${bytes(st.spool.bytes)}`),
    el("span", {}, "last seq ", el("b", { text: count(st.spool.last_seq) })),
  ];
  if (src.lag_seconds !== null && src.lag_seconds !== undefined) facts.push(el("span", { text: `lag ${src.lag_seconds.toFixed(1)}s` }));
  if (src.lag_bytes !== null && src.lag_bytes !== undefined) facts.push(el("span", { text: `lag ${bytes(src.lag_bytes)}` }));
  if (src.restarts) facts.push(el("span", { text: `${src.restarts} restarts` }));
  if (src.holder) facts.push(el("span", { "data-role": "source-holder" }, "read by ", el("b", { text: holderText(src.holder) })));
  const out = [el("div", { class: "facts" }, facts)];
  if (src.position) out.push(el("div", { class: "muted" }, "position ", el("code", { text: JSON.stringify(src.position) })));
  const how = src.state === "stopped" ? "stopped" : "failing";
  if (src.error) out.push(el("p", { class: "error", "data-role": "source-error", text: `${how} since ${src.failing_since}: ${src.error}` }));
  // a definite failure: nothing restarts the source until the operator does
  if (src.recovery) {
    const restart = () => act(`restart the source of ${st.name}`, "POST", `/v1/streams/${enc(st.name)}/source/restart`);
    out.push(el("p", { "data-role": "source-recovery" }, "recovery: ", src.recovery, " ", actionButton("Restart source", "restart-source", restart)));
  }
  if (src.gc_failure) out.push(el("p", { class: "error", text: `spool GC failing: ${src.gc_failure.error}` }));
  return out;
}

function renderDestination(st, d, now) {
  const key = `${st.name}/${d.name}`;
  const h = remember(key, d, now);
  const r = rates(h);
  const rate = r.length ? r[r.length - 1] : 0;
  const backlogs = h.map((x) => x.backlog);
  const errors = [];
  if (d.task_failure) errors.push(`${d.task_failure.task} failing: ${d.task_failure.error}`);
  if (d.last_error) errors.push(d.last_error);
  const breaker = breakerText(d, now);
  return el(
    "tr",
    { "data-dest": key },
    el("td", {}, el("b", { text: d.name }), el("div", { class: "muted", text: d.kind })),
    el(
      "td",
      {},
      badge(d.state),
      breaker ? el("div", { class: "muted", "data-role": "breaker", text: breaker }) : null,
      d.holder ? el("div", { class: "muted", "data-role": "holder", text: `held by ${holderText(d.holder)}` }) : null,
    ),
    el("td", { class: "num", "data-role": "hwm", text: count(d.high_water_mark) }),
    el(
      "td",
      { class: "num" },
      el("span", { "data-role": "backlog", text: count(d.backlog) }),
      " ",
      sparkline(backlogs, "backlog, batches, last 5 minutes"),
      el("div", { class: "muted", text: `${count(d.backlog_records)} records, ${bytes(d.backlog_bytes)}` }),
    ),
    el("td", { class: "num" }, el("span", { "data-role": "lag", text: `${(d.lag_seconds || 0).toFixed(1)}s` }), " ", sparkline(h.map((x) => x.lag || 0), "delivery lag, seconds, last 5 minutes")),
    el("td", { class: "num" }, el("span", { text: `${count(Math.round(rate))}/s` }), " ", sparkline(r, "records delivered per second, last 5 minutes")),
    el("td", { class: "num" }, `${count(d.delivered_records)} records`, el("div", { class: "muted", text: bytes(d.delivered_bytes) })),
    el("td", { class: "num", "data-role": "pending-dead-letters", text: count(d.pending_dead_letters) }),
    el("td", {}, errors.length ? el("div", { class: "error", "data-role": "last-error", text: errors.join("\n") }) : el("span", { class: "muted", text: "—" })),
    el("td", {}, destinationActions(st.name, d)),
  );
}

function renderSkipped(st, d) {
  if (!d.skipped_ranges || !d.skipped_ranges.length) return null;
  return el(
    "tr",
    { class: "panel", "data-skipped": `${st.name}/${d.name}` },
    el(
      "td",
      { colspan: COLUMNS },
      el("b", { text: `${d.name}: skipped while disabled` }),
      el("ul", {}, d.skipped_ranges.map((r) => el("li", { text: `seqs ${r.from_seq}–${r.to_seq} (${r.to_seq - r.from_seq + 1} batches) at ${r.at}` }))),
    ),
  );
}

function renderDeadLetters(st, d) {
  const key = `${st.name}/${d.name}`;
  if (!ui.open.has(key)) return null;
  const rows = ui.deadLetters.get(key) || [];
  const p = destPath(st.name, d.name);
  const pending = rows.filter((x) => x.state === "pending");
  const head = el(
    "div",
    {},
    el("b", { text: `Dead letters of ${d.name}` }),
    " ",
    pending.length
      ? [
          actionButton("Replay all", "replay-all", () => act(`replay all of ${key}`, "POST", `${p}/dead-letters/replay-all`)),
          actionButton(
            "Discard all",
            "discard-all",
            () =>
              act(`discard all of ${key}`, "POST", `${p}/dead-letters/discard-all`, {
                title: `Discard all ${pending.length} pending dead letters of ${key}?`,
                text: `This is data loss: ${count(pending.reduce((a, x) => a + x.records, 0))} records will never reach ${d.name}. It is recorded in the audit log and counted in abrq_stream_fanout_discarded_records_total.`,
              }),
            true,
          ),
        ]
      : el("span", { class: "muted", text: "none pending" }),
  );
  const table = el(
    "table",
    {},
    el("thead", {}, el("tr", {}, ["id", "seq", "reason", "records", "size", "attempts", "state", "first error", ""].map((t) => el("th", { text: t })))),
    el(
      "tbody",
      {},
      rows.map((x) => {
        const preview = ui.previews.get(x.id);
        const buttons = [
          actionButton(preview ? "Hide records" : "Records", "preview", async () => {
            if (ui.previews.has(x.id)) ui.previews.delete(x.id);
            else {
              try {
                const r = await api("GET", `${p}/dead-letters/${x.id}`);
                ui.previews.set(x.id, previewText(r.items));
              } catch (e) {
                ui.previews.set(x.id, `cannot read the records: ${e.message}`);
              }
            }
            await poll();
          }),
        ];
        if (x.state === "pending") {
          buttons.push(actionButton(x.replay_requested ? "Replay requested" : "Replay", "replay", () => act(`replay dead letter ${x.id}`, "POST", `${p}/dead-letters/${x.id}/replay`)));
          buttons.push(
            actionButton(
              "Discard",
              "discard",
              () =>
                act(`discard dead letter ${x.id}`, "POST", `${p}/dead-letters/${x.id}/discard`, {
                  title: `Discard dead letter ${x.id}?`,
                  text: `This is data loss: its ${count(x.records)} records (seq ${x.seq}) will never reach ${d.name}. It is recorded in the audit log and counted in abrq_stream_fanout_discarded_records_total.`,
                }),
              true,
            ),
          );
        }
        return [
          el(
            "tr",
            { "data-dead-letter": x.id, "data-dl-state": x.state },
            el("td", { text: x.id }),
            el("td", { class: "num", text: x.seq }),
            el("td", { "data-role": "reason", text: x.reason_class }),
            el("td", { class: "num", text: count(x.records) }),
            el("td", { class: "num", text: bytes(x.bytes) }),
            el("td", { class: "num", text: x.attempts }),
            el("td", {}, badge(x.state)),
            el("td", {}, el("div", { class: "error", text: x.error })),
            el("td", {}, buttons),
          ),
          preview ? el("tr", {}, el("td", { colspan: COLUMNS }, el("pre", { class: "preview", "data-preview": x.id, text: preview }))) : null,
        ];
      }),
    ),
  );
  return el("tr", { class: "panel", "data-dead-letters": key }, el("td", { colspan: COLUMNS }, head, rows.length ? table : null));
}

// Relational replicas can be compared with their source (abrq verify).
const RELATIONAL = new Set(["postgres", "mysql"]);

function verifyStart(st, d, repair) {
  const key = `${st.name}/${d.name}`;
  const q = repair ? "?repair=true" : "";
  return act(`${repair ? "verify and repair" : "verify"} ${key}`, "POST", `${destPath(st.name, d.name)}/verify${q}`);
}

function renderVerification(st, d) {
  const key = `${st.name}/${d.name}`;
  if (!ui.verifyOpen.has(key)) return null;
  const r = ui.verify.get(key);
  const running = r && r.state === "running";
  const head = el(
    "div",
    {},
    el("b", { text: `Verification of ${d.name} against its source` }),
    " ",
    running ? el("span", { class: "muted", text: "running…" }) : [
      actionButton("Verify now", "verify", () => verifyStart(st, d, false)),
      actionButton("Verify and repair", "verify-repair", () => verifyStart(st, d, true)),
    ],
  );
  let body;
  if (!r) body = el("p", { class: "muted", text: "not verified yet" });
  else {
    const verdict = r.state === "running" ? "running" : r.state === "failed" ? `failed: ${r.error}` : r.equal ? "equal" : "differs";
    const tables = (r.tables || []).map((t) => {
      const diffs = (t.differences || []).length + (t.more || 0);
      const repair = t.repair ? `; repair: ${t.repair.backfilled} backfilled, ${t.repair.deleted} deleted, ${t.repair.still_different} still different` : "";
      return el(
        "tr",
        { "data-verify-table": t.table },
        el("td", { text: t.table }),
        el("td", { class: "num", text: count(t.source_rows) }),
        el("td", { class: "num", text: count(t.replica_rows) }),
        el("td", { class: "num", "data-role": "differences", text: diffs }),
        el("td", { text: (t.differences || []).slice(0, 20).map((x) => `${x.kind} ${Object.values(x.key).join(",")}`).join("; ") + repair }),
        el("td", { class: "error", text: t.error || "" }),
      );
    });
    body = [
      el("p", { "data-role": "verdict" }, el("b", { text: verdict }), ` — started ${r.started_at}, ${r.seconds}s`),
      el(
        "table",
        {},
        el("thead", {}, el("tr", {}, ["table", "source rows", "replica rows", "differences", "keys", "error"].map((t) => el("th", { text: t })))),
        el("tbody", {}, tables),
      ),
    ];
  }
  return el("tr", { class: "panel", "data-verification": key }, el("td", { colspan: COLUMNS }, head, body));
}

function renderStream(st, now) {
  const head = ["destination", "state", "high-water mark", "backlog (batches)", "lag", "throughput", "delivered", "dead letters", "last error", "actions"];
  const rows = [];
  for (const d of st.destinations) {
    rows.push(renderDestination(st, d, now));
    rows.push(renderSkipped(st, d));
    rows.push(renderVerification(st, d));
    rows.push(renderDeadLetters(st, d));
  }
  return el(
    "section",
    { class: "stream", "data-stream": st.name },
    el("h2", { text: `stream ${st.name}` }),
    renderSource(st, now),
    el("table", {}, el("thead", {}, el("tr", {}, head.map((t) => el("th", { text: t })))), el("tbody", {}, rows)),
  );
}

function renderAudit(entries) {
  $("audit").hidden = false;
  patchChildren(
    $("audit-rows"),
    entries.map((e) =>
      el(
        "tr",
        { "data-audit": e.action },
        el("td", { text: e.at }),
        el("td", { text: e.actor }),
        el("td", { text: e.action }),
        el("td", { text: e.stream }),
        el("td", { text: e.destination || "" }),
        el("td", {}, el("code", { text: JSON.stringify(e.detail) })),
      ),
    ),
  );
}

// --- the loop ----------------------------------------------------------------

let polling = null;

async function poll() {
  if (polling) return polling;
  polling = (async () => {
    const token = sessionStorage.getItem(TOKEN_KEY);
    try {
      const { streams } = await api("GET", "/v1/streams");
      for (const key of ui.open) {
        const [s, d] = key.split("/");
        try {
          const r = await api("GET", `${destPath(s, d)}/dead-letters`);
          ui.deadLetters.set(key, r.dead_letters);
        } catch (e) {
          if (e instanceof Unauthorized) throw e;
          ui.deadLetters.set(key, []);
          notice(`dead letters of ${key}: ${e.message}`, true);
        }
      }
      for (const key of ui.verifyOpen) {
        const [s, d] = key.split("/");
        try {
          ui.verify.set(key, await api("GET", `${destPath(s, d)}/verify`));
        } catch (e) {
          if (e instanceof Unauthorized) throw e;
          // 404: never verified
          ui.verify.set(key, null);
        }
      }
      const audit = await api("GET", "/v1/audit?limit=50");
      // signed out (or in as someone else) while this poll ran
      if (sessionStorage.getItem(TOKEN_KEY) !== token) return;
      const now = Date.now();
      patchChildren($("streams"), streams.map((st) => renderStream(st, now)));
      renderAudit(audit.entries);
      $("login").hidden = true;
      $("logout").hidden = !sessionStorage.getItem(TOKEN_KEY);
      $("live").textContent = `live, updated ${new Date(now).toLocaleTimeString()}`;
      ui.lastPoll = now;
    } catch (e) {
      if (e instanceof Unauthorized) showLogin(sessionStorage.getItem(TOKEN_KEY) ? e.message : "");
      else $("live").textContent = `cannot reach the server: ${e.message}`;
    } finally {
      polling = null;
    }
  })();
  return polling;
}

function showLogin(message) {
  $("login").hidden = false;
  $("login-error").textContent = message || "";
  $("streams").replaceChildren();
  $("audit-rows").replaceChildren();
  $("audit").hidden = true;
  notice("");
  ui.deadLetters.clear();
  ui.previews.clear();
  $("live").textContent = "signed out";
}

function start() {
  $("login-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $("token").value.trim());
    $("token").value = "";
    await poll();
  });
  $("logout").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    showLogin("");
  });
  poll();
  setInterval(poll, POLL_MS);
}

document.addEventListener("DOMContentLoaded", start);
