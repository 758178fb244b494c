// plug ui: the page. Everything it shows is set as text (never as HTML),
// and every change is a POST with the token of this start.
"use strict";

const token = decodeURIComponent(location.hash.slice(1));
const $ = (id) => document.getElementById(id);

// el makes an element with text and attributes.
function el(tag, text, attrs) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = text;
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}

// rowsOr is rows, or one row saying none when there are none.
function rowsOr(rows, none, columns) {
  if (rows.length > 0) return rows;
  const tr = el("tr");
  tr.append(el("td", none, { colspan: String(columns), class: "empty" }));
  return [tr];
}

// fill replaces the rows of a table's body, and labels each cell with
// its column's heading, which a narrow window (200 % zoom) shows beside it.
function fill(tbody, rows) {
  const heads = [...tbody.closest("table").querySelectorAll("thead th")].map((th) => th.textContent);
  for (const tr of rows) {
    [...tr.cells].forEach((td, i) => { if (td.colSpan === 1) td.dataset.label = heads[i] || ""; });
  }
  tbody.replaceChildren(...rows);
}

function when(t) {
  if (!t || t.startsWith("0001-")) return "";
  return new Date(t).toLocaleString();
}

function short(key) {
  return key && key.length > 20 ? key.slice(0, 20) + "…" : key || "";
}

// post sends a change; it resolves to the answer's done text.
async function post(path, body) {
  const r = await fetch(path, {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-Plug-Token": token },
    body: JSON.stringify(body),
  });
  const text = await r.text();
  let a = {};
  try { a = JSON.parse(text); } catch (e) { a = { error: text }; }
  if (!r.ok) throw new Error(a.error || text);
  return a.done || "";
}

// ask opens the dialog: title, text, a reason field when reason is set,
// and run(reason) on confirm; its error stays in the dialog.
function ask(title, text, okText, withReason, run) {
  const d = $("ask");
  $("ask-h").textContent = title;
  $("ask-text").textContent = text;
  $("ask-ok").textContent = okText;
  $("ask-error").textContent = "";
  $("ask-reason-label").hidden = !withReason;
  $("ask-reason").value = "";
  $("ask-reason").required = withReason;
  const back = document.activeElement;
  $("ask-form").onsubmit = async (ev) => {
    ev.preventDefault();
    $("ask-ok").disabled = true;
    try {
      const done = await run($("ask-reason").value.trim());
      d.close();
      $("live").textContent = done;
    } catch (e) {
      $("ask-error").textContent = e.message;
    } finally {
      $("ask-ok").disabled = false;
    }
  };
  $("ask-cancel").onclick = () => d.close();
  d.onclose = () => { if (back && back.isConnected) back.focus(); };
  d.showModal();
  (withReason ? $("ask-reason") : $("ask-ok")).focus();
}

// grid draws a name's grid: the cluster, with the run's square coloured
// in its place (parked, personal) or turned and set beside it (added).
function grid(mode) {
  const g = el("span", null, { class: "grid", "data-mode": mode, "aria-hidden": "true" });
  for (let i = 0; i < 9; i++) g.append(el(mode !== "added" && i === 4 ? "b" : "i"));
  if (mode === "added") g.append(el("b"));
  return g;
}

function nameCell(n) {
  const mode = n.filter ? "personal" : n.mode;
  const s = el("span", null, { class: "name", "data-name": n.name, "data-mode": mode });
  s.append(grid(mode));
  let text = `${n.name}:${n.port}${n.udp ? "/udp" : ""} ${n.mode}`;
  if (n.filter) text += ` (personal: ${n.filter})`;
  s.append(el("span", text));
  return s;
}

function what(r) {
  let w = r.names && r.names.length ? "serving" : r.kind === "serves" ? "nothing served yet" : "client only";
  if (r.container === "dockerrun") w += ", in a local container (--dockerrun)";
  if (r.away) w += ", away";
  return w;
}

// keepFocus re-renders with f, and puts the focus back on the element of
// the same data-focus it was on.
function keepFocus(f) {
  const a = document.activeElement;
  const key = a && a.dataset ? a.dataset.focus : undefined;
  f();
  if (key) {
    const again = document.querySelector(`[data-focus="${CSS.escape(key)}"]`);
    if (again) again.focus();
  }
}

function renderAgent(s) {
  const i = s.info;
  $("profile").textContent = "· " + i.profile;
  document.title = "plug · " + i.profile;
  $("agent-addr").textContent = `${i.host}:${i.port} (as ${i.user}, key ${i.key})`;
  $("agent-hostkey").textContent = i.host_key;
  const a = s.agent;
  $("agent-version").textContent = a ? a.version : "";
  $("agent-platform").textContent = a ? a.platform : "";
  $("agent-admission").textContent = !a ? "" :
    a.admission === "invite" ? "by approval: only the keys a member accepted get in" :
    a.admission === "open" ? "open: any key that reaches the agent gets in" : "not said (an older agent)";
  const t = $("agent-tunnel");
  t.className = "";
  if (s.agent_error) {
    t.textContent = "cannot ask the agent: " + s.agent_error;
    t.className = "bad";
  } else if (a && a.refusing) {
    t.textContent = "refusing runs: " + a.refusing;
    t.className = "bad";
  } else if (a) {
    t.textContent = "listening: runs are served";
    t.className = "good";
  }
  const rights = (a && a.rights) || [];
  const missing = rights.filter((r) => !r.Granted);
  const req = missing.filter((r) => r.Required);
  $("agent-rights").textContent = !a ? "" : a.rights_error ? "not checked: " + a.rights_error :
    missing.length === 0 ? `all ${rights.length} granted` :
    `${missing.length} of ${rights.length} missing (${req.length} required)`;
  const list = $("rights-list");
  list.replaceChildren(...rights.map((r) => {
    const li = el("li", `${r.Granted ? "granted" : "MISSING"}: ${r.Rule} — ${r.Feature}${r.Required ? " (required)" : ""}`);
    if (!r.Granted && r.Fix) li.append(el("pre", r.Fix));
    return li;
  }));
  const inst = $("install");
  if (inst.childElementCount === 0) {
    for (const x of s.install) {
      const d = el("div", null, { class: "install" });
      const id = "install-" + x.system.replace(/\W+/g, "-");
      d.append(el("h4", x.system, { id: id + "-h" }));
      d.append(el("pre", x.command, { id }));
      const b = el("button", "Copy", { type: "button", "aria-describedby": id + "-h" });
      b.onclick = async () => {
        try {
          await navigator.clipboard.writeText(x.command);
          $("live").textContent = `The ${x.system} install command is copied.`;
        } catch (e) {
          $("live").textContent = "Copying failed: select the command and copy it.";
        }
      };
      d.append(b);
      inst.append(d);
    }
  }
}

function renderRuns(s) {
  $("runs-note").textContent = s.runs_error ? "cannot ask who is plugged in: " + s.runs_error :
    s.all ? "" : "You see your key's runs only: members (admission by approval) and admins see everyone's.";
  keepFocus(() => fill($("runs-body"), rowsOr(s.runs.map((r) => {
    const tr = el("tr", null, { "data-run": r.run });
    tr.append(el("td", r.user + (r.comment ? ` (${r.comment})` : "")));
    tr.append(el("td", short(r.key), { class: "mono", title: r.key }));
    tr.append(el("td", (r.from || []).join(", ")));
    tr.append(el("td", r.kind === "openssh" ? "(OpenSSH)" : r.version || ""));
    tr.append(el("td", when(r.since)));
    tr.append(el("td", what(r), { "data-what": "" }));
    const names = el("td");
    for (const n of r.names || []) names.append(nameCell(n));
    tr.append(names);
    const act = el("td");
    const b = el("button", "End", { type: "button", class: "danger", "data-focus": "end-" + r.run,
      "aria-label": `End the run of ${r.user} (${r.run})` });
    b.onclick = () => ask(`End the run of ${r.user}`,
      "Their command stops as Ctrl-C would stop it; what the run set aside in the cluster is back at once. It is not a ban.",
      "End this run", true, (reason) => post("/api/end", { run: r.run, reason }));
    act.append(b);
    tr.append(act);
    return tr;
  }), s.all ? "Nobody is plugged in." : "No run of your key is plugged in.", 8)));
}

function memberButton(text, op, key, user, withReason, danger) {
  const b = el("button", text, { type: "button", "data-focus": op + "-" + key, "aria-label": `${text} ${user} (${key})` });
  if (danger) b.className = "danger";
  b.onclick = () => ask(`${text} ${user}`, key, text, withReason,
    (reason) => post("/api/members", { op, key, reason }));
  return b;
}

function renderPeople(s) {
  const invite = !!s.members || !!(s.agent && s.agent.admission === "invite");
  $("people").hidden = !invite;
  if (!invite) return;
  $("people-note").textContent = s.members_error || "";
  const l = s.members || {};
  keepFocus(() => {
    fill($("pending-body"), rowsOr((l.pending || []).map((p) => {
      const tr = el("tr", null, { "data-key": p.key });
      tr.append(el("td", p.key, { class: "mono" }), el("td", p.user), el("td", p.from), el("td", when(p.last)));
      const act = el("td");
      act.append(memberButton("Accept", "accept", p.key, p.user, false, false), " ",
        memberButton("Refuse", "refuse", p.key, p.user, false, true));
      tr.append(act);
      return tr;
    }), "No pending request.", 5));
    fill($("members-body"), (l.members || []).map((m) => {
      const tr = el("tr", null, { "data-key": m.key });
      tr.append(el("td", m.key, { class: "mono" }), el("td", m.user), el("td", m.comment || ""),
        el("td", m.by), el("td", when(m.since)));
      const act = el("td");
      act.append(memberButton("Remove", "remove", m.key, m.user, true, true));
      tr.append(act);
      return tr;
    }));
  });
  $("admins").replaceChildren(...(l.admins || []).map((a) => el("li", a, { class: "mono" })));
}

function render(s) {
  renderAgent(s);
  renderRuns(s);
  renderPeople(s);
}

// The audit search: one row per run found, with its start, its end and
// the names it served; other events in a list.
function localToRFC3339(v) {
  return v ? new Date(v).toISOString() : "";
}

async function search(ev) {
  ev.preventDefault();
  const p = new URLSearchParams({ token });
  for (const [k, id] of [["name", "q-name"], ["user", "q-user"], ["key", "q-key"]]) {
    const v = $(id).value.trim();
    if (v) p.set(k, v);
  }
  for (const [k, id] of [["since", "q-since"], ["until", "q-until"]]) {
    const v = localToRFC3339($(id).value);
    if (v) p.set(k, v);
  }
  $("audit-note").textContent = "Searching…";
  try {
    const r = await fetch("/api/audit?" + p.toString());
    const a = await r.json();
    if (!r.ok) throw new Error(a.error || r.statusText);
    showAudit(a.events);
  } catch (e) {
    $("audit-note").textContent = "The search failed: " + e.message;
  }
}

function showAudit(events) {
  const runs = new Map();
  const other = [];
  for (const e of events) {
    if (!e.run) { other.push(e); continue; }
    const id = e.run + " " + (e.key || "");
    if (!runs.has(id)) runs.set(id, { run: e.run, user: e.user, key: e.key, names: [] });
    const r = runs.get(id);
    r.user = r.user || e.user;
    r.key = r.key || e.key;
    if (e.event === "run.opened") r.opened = e.time;
    if (e.event === "run.ended") Object.assign(r, { ended: e.time, how: e.how, by: e.by, reason: e.reason });
    if (e.event === "name.served") r.names.push(`${e.name}:${e.port} ${e.mode} from ${when(e.time)}`);
    if (!r.opened) r.first = r.first || e.time;
  }
  fill($("audit-body"), rowsOr([...runs.values()].map((r) => {
    const tr = el("tr", null, { "data-run": r.run });
    let how = r.how || (r.ended ? "" : "not ended yet");
    if (r.by) how += ` by ${r.by}`;
    if (r.reason) how += `: ${r.reason}`;
    tr.append(el("td", r.run, { class: "mono" }), el("td", r.user || ""), el("td", short(r.key), { class: "mono", title: r.key || "" }),
      el("td", when(r.opened || r.first), { "data-opened": r.opened || "" }), el("td", when(r.ended), { "data-ended": r.ended || "" }),
      el("td", how), el("td", r.names.join("; ")));
    return tr;
  }), "No run found.", 7));
  $("audit-other").replaceChildren(...other.map((e) =>
    el("li", `${when(e.time)} ${e.event} ${e.user || ""} ${e.key || ""} ${e.by ? "by " + e.by : ""} ${e.reason || ""}`)));
  const n = (k, what) => `${k} ${what}${k === 1 ? "" : "s"}`;
  $("audit-note").textContent = `Found ${n(runs.size, "run")} and ${n(other.length, "other event")}.`;
}

function connect() {
  const es = new EventSource("/api/events?token=" + encodeURIComponent(token));
  es.addEventListener("state", (m) => {
    render(JSON.parse(m.data));
    if ($("live").dataset.up !== "1") {
      $("live").dataset.up = "1";
      $("live").textContent = "Live: updated as runs come and go.";
    }
  });
  es.onerror = () => {
    $("live").dataset.up = "0";
    $("live").textContent = "Lost the connection to plug ui; trying again…";
  };
}

document.addEventListener("DOMContentLoaded", () => {
  $("audit-form").addEventListener("submit", search);
  if (!token) {
    $("live").textContent = "This address has no token: open the address plug ui printed.";
    return;
  }
  connect();
});
