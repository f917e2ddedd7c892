// The Portcullis console: one ES module, no build step. It calls the
// gateway's Connect APIs with fetch (Connect's JSON protocol), signed in by
// the HttpOnly session cookie; every call carries the session's CSRF token
// in the X-Portcullis-CSRF header. Data reaches the page as text nodes
// only (never innerHTML), and the Content-Security-Policy forbids inline
// script and style.

const state = {
  session: null, // {name, role, csrf}
  seq: 0, // the current render; an older one that finishes late is dropped
  streams: null, // an AbortController for the current page's streams
};

// ---------------------------------------------------------------- API

class APIError extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

async function rpc(service, method, body = {}) {
  let res;
  try {
    res = await fetch(`/portcullis.v1.${service}/${method}`, {
      method: "POST",
      credentials: "same-origin",
      headers: {
        "Content-Type": "application/json",
        "X-Portcullis-CSRF": state.session ? state.session.csrf : "",
      },
      body: JSON.stringify(body),
    });
  } catch (err) {
    throw new APIError("unavailable", "the gateway cannot be reached");
  }
  const text = await res.text();
  let data = {};
  try {
    data = text ? JSON.parse(text) : {};
  } catch {
    data = {};
  }
  if (!res.ok) {
    if (res.status === 404 && !data.code) {
      throw new APIError("unimplemented", `this gateway does not serve ${service}.${method}`);
    }
    const err = new APIError(data.code || "unknown", data.message || res.statusText);
    if (err.code === "unauthenticated") {
      signedOut("Your session has ended: sign in again.");
    }
    throw err;
  }
  return data;
}

// watch calls a server-streaming RPC with Connect's streaming JSON
// protocol (each message framed as a flag byte and a 4-byte big-endian
// length, the last frame flagged 2 with the error, if any) and calls
// onMessage with each message. It resolves when the stream ends, or
// quietly when signal aborts it, and rejects with an APIError.
async function watch(service, method, body, onMessage, signal) {
  const json = new TextEncoder().encode(JSON.stringify(body));
  const frame = new Uint8Array(5 + json.length);
  new DataView(frame.buffer).setUint32(1, json.length);
  frame.set(json, 5);
  let res;
  try {
    res = await fetch(`/portcullis.v1.${service}/${method}`, {
      method: "POST",
      credentials: "same-origin",
      signal,
      headers: {
        "Content-Type": "application/connect+json",
        "X-Portcullis-CSRF": state.session ? state.session.csrf : "",
      },
      body: frame,
    });
  } catch (err) {
    if (signal.aborted) return;
    throw new APIError("unavailable", "the gateway cannot be reached");
  }
  if (!res.ok || !res.body) {
    throw new APIError(res.status === 404 ? "unimplemented" : "unknown", `${service}.${method}: HTTP ${res.status}`);
  }
  const reader = res.body.getReader();
  const text = new TextDecoder();
  let buf = new Uint8Array(0);
  for (;;) {
    while (buf.length >= 5) {
      const size = new DataView(buf.buffer, buf.byteOffset).getUint32(1);
      if (buf.length < 5 + size) break;
      const flags = buf[0];
      const data = size ? JSON.parse(text.decode(buf.subarray(5, 5 + size))) : {};
      buf = buf.slice(5 + size);
      if (flags & 2) {
        if (!data.error) return;
        const err = new APIError(data.error.code || "unknown", data.error.message || "the stream failed");
        if (err.code === "unauthenticated") signedOut("Your session has ended: sign in again.");
        throw err;
      }
      onMessage(data);
    }
    let chunk;
    try {
      chunk = await reader.read();
    } catch {
      if (signal.aborted) return;
      throw new APIError("unavailable", "the gateway cannot be reached");
    }
    if (chunk.done) {
      if (signal.aborted) return;
      throw new APIError("unavailable", "the stream ended without its last frame");
    }
    const next = new Uint8Array(buf.length + chunk.value.length);
    next.set(buf);
    next.set(chunk.value, buf.length);
    buf = next;
  }
}

async function sessionRequest(method, body) {
  const init = { method, credentials: "same-origin", headers: {} };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const res = await fetch("/console/session", init);
  const text = await res.text();
  let data = {};
  try {
    data = text ? JSON.parse(text) : {};
  } catch {
    data = {};
  }
  return { ok: res.ok, status: res.status, data };
}

// ---------------------------------------------------------------- DOM

// h builds an element. Children that are not nodes become text nodes.
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.className = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

const $ = (id) => document.getElementById(id);

function link(href, ...children) {
  return h("a", { href }, ...children);
}

function sandboxLink(name) {
  return link(`#/sandbox/${encodeURIComponent(name)}`, name);
}

function proposalLink(id, text) {
  return link(`#/proposal/${encodeURIComponent(id)}`, text ?? `#${id}`);
}

function short(hash) {
  return hash ? h("span", { class: "mono", title: hash }, hash.slice(0, 12)) : "—";
}

// when shows a time relative to now ("3 min ago"); the exact time, in
// ISO 8601 (UTC), shows on hover.
function when(ts) {
  if (!ts) return "—";
  const d = new Date(ts);
  return h("time", { datetime: ts, title: iso(d) }, ago(d));
}

function iso(d) {
  return isNaN(d) ? "" : d.toISOString();
}

// absolute shows a time as a date and time to the second (local), ISO
// 8601 on hover: for the audit log, where "2 h ago" would not do.
function absolute(ts) {
  if (!ts) return "—";
  const d = new Date(ts);
  const p = (n) => String(n).padStart(2, "0");
  const text = `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
  return h("time", { datetime: ts, title: iso(d) }, text);
}

function ago(d) {
  const s = Math.round((Date.now() - d.getTime()) / 1000);
  const future = s < 0;
  const a = Math.abs(s);
  let text;
  if (a < 45) text = "seconds";
  else if (a < 90 * 60) text = `${Math.round(a / 60)} min`;
  else if (a < 36 * 3600) text = `${Math.round(a / 3600)} h`;
  else text = `${Math.round(a / 86400)} days`;
  return future ? `in ${text}` : `${text} ago`;
}

// clock shows a time to the second, for timelines, where "seconds ago"
// would not tell entries apart.
function clock(ts) {
  if (!ts) return "—";
  const d = new Date(ts);
  const today = d.toDateString() === new Date().toDateString();
  return h("time", { datetime: ts, title: iso(d) }, today ? d.toLocaleTimeString() : d.toLocaleString());
}

function duration(ms) {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60 * 1000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.round(ms / 60000)} min`;
}

function notice(kind, ...text) {
  return h("div", { class: `notice ${kind}`, role: kind === "bad" ? "alert" : "status" }, ...text);
}

function errorNotice(err) {
  const msg = err instanceof APIError ? `${err.message} (${err.code.replaceAll("_", " ")})` : String(err);
  return notice("bad", msg);
}

function table(headers, rows, empty) {
  if (rows.length === 0) return h("p", { class: "muted" }, empty);
  return h("div", { class: "table-wrap" },
    h("table", null,
      h("thead", null, h("tr", null, headers.map((x) => h("th", null, x)))),
      h("tbody", null, rows)));
}

function facts(pairs) {
  return h("dl", { class: "facts" },
    pairs.filter(([, v]) => v !== null && v !== undefined && v !== "").flatMap(([k, v]) => [h("dt", null, k), h("dd", null, v)]));
}

function statusBadge(status) {
  return h("span", { class: `badge ${status}` }, status);
}

// ---------------------------------------------------------------- findings

const findingKinds = {
  new_reach: ["New destination", "medium"],
  new_path: ["New path", "medium"],
  new_http_method: ["New HTTP method", "medium"],
  new_mcp_method: ["New MCP method", "medium"],
  new_mcp_tool: ["New MCP tool", "medium"],
  new_mcp_prompt: ["New MCP prompt", "medium"],
  new_mcp_resource: ["New MCP resource", "medium"],
  new_credentialed_reach: ["Reaches injected credentials", "high"],
  l7_bypass_credentialed: ["Uninspected protocol reaches credentials", "high"],
  private_network: ["Private network", "high"],
  wildcard_widening: ["Wildcard widening", "high"],
  exceeds_boundary: ["Exceeds the sandbox boundary", "high"],
  arguments_widened: ["Tool arguments widened", "medium"],
  rate_limit_widened: ["Tool rate limit widened", "medium"],
  tool_definition_changed: ["Pinned tool definition changed", "high"],
  mcp_oauth_opened: ["OAuth paths served uninspected", "medium"],
  enforcement_weakened: ["Enforcement weakened", "high"],
  cloud_metadata: ["Cloud metadata endpoint", "high"],
  review_removed: ["Allowed without a person's review", "high"],
  review_added: ["Now held for review", "medium"],
};

function findingLabel(kind) {
  return (findingKinds[kind] || [kind.replaceAll("_", " ")])[0];
}

function findingSeverity(f) {
  return f.credentialed ? "high" : (findingKinds[f.kind] || [, "medium"])[1];
}

// findingChips summarises findings by kind, for the queue.
function findingChips(findings) {
  if (!findings || findings.length === 0) return h("span", { class: "chip none" }, "no findings");
  const byKind = new Map();
  for (const f of findings) {
    const e = byKind.get(f.kind) || { n: 0, sev: "medium" };
    e.n++;
    if (findingSeverity(f) === "high") e.sev = "high";
    byKind.set(f.kind, e);
  }
  return h("div", { class: "chips" },
    [...byKind].map(([kind, e]) => h("span", { class: `chip ${e.sev} finding-chip`, title: kind },
      findingLabel(kind) + (e.n > 1 ? ` ×${e.n}` : ""))));
}

// requestLine renders a counterexample as one line, the way a log would.
function requestLine(r) {
  const parts = [];
  if (r.binary) parts.push(r.binary, "→");
  let target = r.host || r.addr || "?";
  if (r.port) target += `:${r.port}`;
  if (r.path) target += r.path;
  if (r.query) target += `?${r.query}`;
  if (r.httpMethod) parts.push(r.httpMethod);
  parts.push(target);
  if (r.mcpMethod) parts.push(r.mcpMethod + (r.tool ? ` ${r.tool}` : ""));
  if (r.arguments) parts.push(r.arguments);
  return parts.join(" ");
}

function findingCard(f) {
  const sev = findingSeverity(f);
  const where = [f.entry, f.endpoint, f.rule].filter(Boolean).join(" › ");
  const ce = f.counterexample;
  return h("div", { class: `finding ${sev}` },
    h("div", { class: "row" },
      h("h3", { class: "finding-kind" }, findingLabel(f.kind)),
      h("code", null, f.kind),
      f.credentialed ? h("span", { class: "badge bad" }, "credentialed") : null),
    where ? h("div", { class: "where" }, where) : null,
    f.detail ? h("p", { class: "detail" }, f.detail) : null,
    ce ? h("div", { class: "counterexample" },
      h("div", { class: "muted" }, f.kind === "exceeds_boundary"
        ? "A request the proposal allows and the boundary does not:"
        : "A request the proposal allows that the current policy denies:"),
      h("div", { class: "request" }, requestLine(ce)),
      facts([
        ["binary", ce.binary], ["host", ce.host], ["address", ce.addr], ["port", ce.port],
        ["HTTP method", ce.httpMethod], ["path", ce.path], ["query", ce.query],
        ["MCP method", ce.mcpMethod], ["tool", ce.tool], ["arguments", ce.arguments],
        ["MCP version", ce.mcpProtocolVersion],
      ])) : null);
}

// ---------------------------------------------------------------- summary

// matcherText shows a matcher: one glob, or {any: [...]} as a|b.
function matcherText(m) {
  if (m === null || m === undefined) return "";
  if (typeof m === "string") return m;
  if (Array.isArray(m.any)) return m.any.join("|");
  return JSON.stringify(m);
}

// place is host[:port][path], the port left out when it is the scheme's.
function place(host, port, path) {
  const p = Number(port);
  return `${host || "?"}${p && p !== 443 && p !== 80 ? `:${p}` : ""}${path || ""}`;
}

// ruleText is what one L7 rule lets through at host:port/path, the way a
// request line reads: "POST api.example/v1/refunds", "tools/call
// track_shipment at orders.example.com/mcp".
function ruleText(r, host, port, path) {
  if (!r) return place(host, port, path);
  const method = matcherText(r.method);
  const named = r.tool ?? r.prompt ?? r.resource;
  if (named !== undefined) return `${method || "tools/call"} ${matcherText(named)} at ${place(host, port, path)}`;
  if (r.command) return `${matcherText(r.command)} at ${place(host, port, path)}`;
  if (r.operation_type || r.operation_name) {
    return `${matcherText(r.operation_type) || "graphql"} ${matcherText(r.operation_name) || "*"} at ${place(host, port, path)}`;
  }
  return `${method || "*"} ${place(host, port, r.path ? matcherText(r.path) : path)}`;
}

function binariesOf(policy, entry) {
  const e = policy && policy.network_policies && policy.network_policies[entry];
  return ((e && e.binaries) || []).map((b) => b.path).filter(Boolean);
}

// endpointPath is the path scope of the entry's endpoint at host:port in
// policy (an MCP endpoint's /mcp), when the operation does not name one.
function endpointPath(policy, entry, host, port, path) {
  if (path) return path;
  const e = policy && policy.network_policies && policy.network_policies[entry];
  const ep = ((e && e.endpoints) || []).find((x) => x.host === host && (Number(x.port) === Number(port) || (x.ports || []).map(Number).includes(Number(port))));
  return (ep && ep.path) || "";
}

function forBinaries(bins) {
  if (bins.length === 0) return "";
  return ` for ${bins.slice(0, 2).join(", ")}${bins.length > 2 ? ` and ${bins.length - 2} more` : ""}`;
}

function listText(items, max = 2) {
  return items.slice(0, max).join(", ") + (items.length > max ? ` and ${items.length - max} more` : "");
}

// operationText is one proposal operation in a line.
function operationText(op, resulting) {
  if (op.add_allow_rules) {
    const o = op.add_allow_rules;
    const path = endpointPath(resulting, o.policy, o.host, o.port, o.path);
    const rules = (o.rules || []).map((r) => ruleText(r.allow, o.host, o.port, path));
    return `allow ${listText(rules)}${forBinaries(binariesOf(resulting, o.policy))}`;
  }
  if (op.add_deny_rules) {
    const o = op.add_deny_rules;
    const path = endpointPath(resulting, o.policy, o.host, o.port, o.path);
    return `deny ${listText((o.rules || []).map((r) => ruleText(r, o.host, o.port, path)))}`;
  }
  if (op.add_binary) {
    const o = op.add_binary;
    return `let ${o.path} reach ${listText(o.endpoints || [])} (${o.policy})`;
  }
  if (op.add_rule) {
    const o = op.add_rule;
    const rule = o.rule || {};
    const reach = (rule.endpoints || []).flatMap((e) => {
      const allows = (e.rules || []).map((r) => r.allow).filter(Boolean);
      return allows.length ? allows.map((r) => ruleText(r, e.host, e.port, e.path)) : [`all of ${place(e.host, e.port || (e.ports || [])[0], e.path)}`];
    });
    return `allow ${listText(reach)}${forBinaries(((rule.binaries || []).map((b) => b.path)))} (new entry ${o.name})`;
  }
  if (op.repin) {
    const o = op.repin;
    return `re-pin the definition of tool ${o.tool} at ${place(o.host, o.port, endpointPath(resulting, o.policy, o.host, o.port, o.path))}`;
  }
  return Object.keys(op).join(", ").replaceAll("_", " ");
}

// proposalSummary is what a proposal changes, in one line: "allow POST
// api.orders.example/v1/refunds for /usr/bin/python3".
function proposalSummary(p) {
  const ops = (p.proposal && p.proposal.operations) || [];
  if (ops.length === 0) return "(no operations)";
  return ops.map((op) => operationText(op, p.resultingPolicy)).join("; ");
}

// ---------------------------------------------------------------- diff

function diffLines(cls, sign, text) {
  return String(text).split("\n").map((l) => h("pre", { class: `line ${cls}` }, `${sign} ${l}`));
}

// diffView renders PolicyChanges: added lines green, removed red.
function diffView(changes) {
  if (!changes || changes.length === 0) return h("p", { class: "muted" }, "No changes.");
  return h("div", { class: "diff" }, changes.map((c) => {
    const lines = [];
    if (c.kind === "removed" || c.kind === "changed") lines.push(diffLines("del", "-", c.before || c.path));
    if (c.kind === "added" || c.kind === "changed") lines.push(diffLines("add", "+", c.after || c.path));
    return h("div", { class: `hunk ${c.kind}` },
      h("div", { class: "hunk-head" }, h("span", { class: "mono" }, c.path || "(document)"),
        c.summary ? ` — ${c.summary}` : ""),
      lines);
  }));
}

// ---------------------------------------------------------------- tool definitions

// definitionText is a tool definition's JSON, indented; "" when none.
function definitionText(d) {
  if (!d || !d.definition) return "";
  try {
    return JSON.stringify(JSON.parse(d.definition), null, 2);
  } catch {
    return d.definition;
  }
}

// lineDiff pairs the lines of a and b side by side along a longest common
// subsequence: [left, right, kind] with kind "same", "del" (left only) or
// "add" (right only).
function lineDiff(a, b) {
  if ((a.length + 1) * (b.length + 1) > 4e6) {
    return [...a.map((l) => [l, "", "del"]), ...b.map((l) => ["", l, "add"])];
  }
  const lcs = Array.from({ length: a.length + 1 }, () => new Int32Array(b.length + 1));
  for (let i = a.length - 1; i >= 0; i--) {
    for (let j = b.length - 1; j >= 0; j--) {
      lcs[i][j] = a[i] === b[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
    }
  }
  const out = [];
  let i = 0, j = 0;
  while (i < a.length && j < b.length) {
    if (a[i] === b[j]) out.push([a[i++], b[j++], "same"]);
    else if (lcs[i + 1][j] >= lcs[i][j + 1]) out.push([a[i++], "", "del"]);
    else out.push(["", b[j++], "add"]);
  }
  while (i < a.length) out.push([a[i++], "", "del"]);
  while (j < b.length) out.push(["", b[j++], "add"]);
  return out;
}

// pairRows puts each run of removed lines beside the run of added lines
// that follows it, row by row: [left, right, leftKind, rightKind], kinds
// "same", "del", "add" or "gap" (no line on that side).
function pairRows(rows) {
  const out = [];
  for (let i = 0; i < rows.length;) {
    if (rows[i][2] === "same") {
      out.push([rows[i][0], rows[i][1], "same", "same"]);
      i++;
      continue;
    }
    const dels = [], adds = [];
    while (i < rows.length && rows[i][2] === "del") dels.push(rows[i++][0]);
    while (i < rows.length && rows[i][2] === "add") adds.push(rows[i++][1]);
    for (let k = 0; k < Math.max(dels.length, adds.length); k++) {
      out.push([dels[k] ?? "", adds[k] ?? "", k < dels.length ? "del" : "gap", k < adds.length ? "add" : "gap"]);
    }
  }
  return out;
}

function definitionHead(label, d) {
  let seen = "not seen by the gateway";
  if (d && d.firstSeen) {
    seen = h("span", null, "seen ", absolute(d.firstSeen), " – ", absolute(d.lastSeen), d.proxyId ? ` by ${d.proxyId}` : "",
      d.definition ? "" : " (over 64 KiB, not kept)");
  }
  return h("div", { class: "hunk-head" }, h("strong", null, label), " ", h("code", null, (d && d.fingerprint) || "—"),
    h("div", { class: "muted" }, seen));
}

// definitionChangesView shows each re-pin of a proposal: the definition
// pinned now and the one proposed, side by side, lines only on one side
// marked removed or added. What an MCP server wrote reaches the page as
// text only.
function definitionChangesView(changes) {
  return changes.map((c) => {
    const before = definitionText(c.pinned), after = definitionText(c.proposed);
    const rows = pairRows(lineDiff(before ? before.split("\n") : [], after ? after.split("\n") : []));
    const side = (k) => h("div", { class: "defside" }, rows.map((r) => {
      const kind = r[2 + k];
      return h("pre", { class: kind === "same" ? "line" : `line ${kind}` }, kind === "gap" ? " " : r[k]);
    }));
    return h("div", { class: "diff defchange" },
      h("div", { class: "hunk-head" }, "tools/call ", h("code", null, c.tool), " at ", h("span", { class: "mono" }, c.endpoint)),
      h("div", { class: "defcols" },
        h("div", { class: "defcol", "data-side": "pinned" }, definitionHead("Pinned", c.pinned), side(0)),
        h("div", { class: "defcol", "data-side": "proposed" }, definitionHead("Proposed", c.proposed), side(1))));
  });
}

// policyDoc shows a policy as YAML, the way people write it (and
// `portcullis policy get -o yaml` prints it); JSON only from a gateway
// that sends no YAML.
function policyDoc(yaml, policy) {
  if (yaml) return h("pre", { class: "doc", "data-format": "yaml" }, yaml);
  return h("pre", { class: "doc", "data-format": "json" }, JSON.stringify(policy ?? {}, null, 2));
}

// can says whether the signed-in role may call service/method (the
// session lists them); an older gateway that does not say allows all.
function can(service, method) {
  const list = state.session && state.session.can;
  return !Array.isArray(list) || list.includes(`${service}/${method}`);
}

// live calls poll every POLL_MS while the page that started it is shown
// (its render's AbortController), and again at once when the tab comes
// back into view. A failed poll is retried at the next tick; the page
// keeps what it shows.
const POLL_MS = 2000;

function live(poll) {
  const signal = state.streams.signal;
  let timer = null;
  const tick = async () => {
    timer = null;
    if (signal.aborted) return;
    if (!document.hidden) {
      try {
        await poll();
      } catch {
        // shown again at the next tick
      }
    }
    if (!signal.aborted) timer = setTimeout(tick, POLL_MS);
  };
  const onVisible = () => {
    if (!document.hidden && timer !== null) {
      clearTimeout(timer);
      tick();
    }
  };
  document.addEventListener("visibilitychange", onVisible);
  signal.addEventListener("abort", () => {
    if (timer !== null) clearTimeout(timer);
    document.removeEventListener("visibilitychange", onVisible);
  });
  timer = setTimeout(tick, POLL_MS);
}

// liveBadge says the page follows the gateway by itself, and when it
// last heard from it.
function liveBadge() {
  return h("span", { class: "live muted", id: "live", title: `updated every ${POLL_MS / 1000} s` },
    h("span", { class: "dot on" }), "live");
}

function touchLive() {
  const el = $("live");
  if (el) el.title = `updated every ${POLL_MS / 1000} s; last at ${new Date().toISOString()}`;
}

// busy says the person is in the middle of something on the page (typing
// a reason, a confirm button out): a live refresh waits.
function busy() {
  const a = document.activeElement;
  if (a && a.closest && a.closest("#view") && a.matches("input, textarea, select")) return true;
  return !!document.querySelector("#view [data-confirm-rollback], #view #freeze-confirm");
}

// ---------------------------------------------------------------- views

// changeCell leads with what the proposal changes; its rationale follows.
function changeCell(p) {
  return h("td", { class: "change" },
    h("div", { class: "summary" }, proposalSummary(p)),
    h("div", { class: "truncate muted rationale" }, p.rationale || "—"));
}

// proposalsKey is what a live list compares to know it changed.
function proposalsKey(list) {
  return JSON.stringify((list || []).map((p) => [p.id, p.status, p.updatedAt, (p.approvals || []).length, p.resultingHash]));
}

async function queueView(params) {
  const status = params.get("status") ?? "pending";
  const query = { status: status === "all" ? "" : status };
  const res = await rpc("ApprovalService", "ListProposals", query);
  const pending = status === "pending";
  const count = h("span", { class: "muted", id: "queue-count" });
  const list = h("div", { id: "queue-list" });
  let key = "";
  const show = (proposals) => {
    key = proposalsKey(proposals);
    count.textContent = `${proposals.length} ${pending ? "pending" : "shown"}, newest first`;
    list.replaceChildren(queueTable(proposals, pending));
  };
  show(res.proposals || []);
  // A proposal filed after the page opened appears without a reload.
  live(async () => {
    const next = await rpc("ApprovalService", "ListProposals", query);
    touchLive();
    if (proposalsKey(next.proposals) !== key) show(next.proposals || []);
  });
  const select = h("select", { id: "status-filter", "aria-label": "status" },
    ["pending", "all", "approved", "applied", "rejected", "expired", "superseded", "withdrawn"].map((s) =>
      h("option", { value: s, selected: s === status }, s)));
  select.addEventListener("change", () => { location.hash = `#/queue?status=${select.value}`; });
  return h("div", { id: "queue" },
    h("div", { class: "page-head" },
      h("h1", null, pending ? "Approval queue" : "Proposals"),
      count, liveBadge(),
      h("span", { class: "spacer" }),
      h("label", { for: "status-filter", class: "muted" }, "Status"), select),
    list);
}

function queueTable(proposals, pending) {
  const rows = proposals.map((p) => {
    const tr = h("tr", { class: "clickable", "data-id": p.id },
      h("td", { class: "num" }, proposalLink(p.id)),
      h("td", null, sandboxLink(p.sandbox)),
      changeCell(p),
      h("td", null, findingChips(p.findings)),
      h("td", { class: "num" }, `${(p.approvals || []).length} / ${p.approvalsRequired ?? "?"}`),
      h("td", null, statusBadge(p.status)),
      h("td", { class: "num" }, when(p.createdAt)));
    tr.addEventListener("click", (ev) => {
      if (ev.target.closest("a")) return;
      location.hash = `#/proposal/${p.id}`;
    });
    return tr;
  });
  return table(["#", "Sandbox", "Change", "Findings", "Approvals", "Status", "Submitted"], rows,
    pending ? "Nothing is waiting for a decision. Proposals appear here when an agent asks for access through its proxy (policy.local)."
      : "No proposals match.");
}

async function proposalView(id) {
  const p = await rpc("ApprovalService", "GetProposal", { id });
  document.title = `Proposal #${p.id} · Portcullis`;
  const approvals = p.approvals || [];
  const required = p.approvalsRequired || 0;
  const findings = p.findings || [];
  const pending = p.status === "pending";
  const tenths = required ? Math.min(10, Math.round((approvals.length / required) * 10)) : 0;

  const left = h("div", null,
    h("section", { class: "card" },
      h("h2", { class: "first" }, "What it changes"),
      h("p", { class: "summary-text", id: "proposal-summary" }, proposalSummary(p)),
      h("h2", null, "Rationale"),
      h("p", { class: "rationale-text", id: "rationale" }, p.rationale || "(none given)"),
      h("h2", null, "Details"),
      facts([
        ["Sandbox", sandboxLink(p.sandbox)],
        ["Proposer", p.proposer],
        ["Base version", p.baseVersion ? h("span", null, `v${p.baseVersion} `, short(p.baseHash)) : "—"],
        ["Resulting hash", short(p.resultingHash)],
        ["Submitted", when(p.createdAt)],
        ["Expires", pending && p.expiresAt ? when(p.expiresAt) : null],
        ["From denial", p.denialId ? h("code", null, p.denialId) : null],
        ["Grant ends", p.grantExpiresAt ? when(p.grantExpiresAt) : null],
        ["Decided", p.decidedAt ? h("span", null, when(p.decidedAt), p.decidedBy ? ` by ${p.decidedBy}` : "") : null],
        ["Applied as", p.appliedVersion ? `v${p.appliedVersion}` : null],
        ["Superseded by", p.supersededBy ? proposalLink(p.supersededBy) : null],
        ["Status reason", p.statusReason],
      ])),
    h("section", null,
      h("h2", null, `Policy diff against v${p.baseVersion || "?"}`),
      h("div", { id: "proposal-diff" }, diffView(p.changes)),
      p.resultingPolicy ? h("details", { id: "resulting-policy" }, h("summary", null, "The resulting policy"), policyDoc(p.resultingPolicyYaml, p.resultingPolicy)) : null),
    (p.definitionChanges || []).length ? h("section", { id: "definition-changes" },
      h("h2", null, "Tool definitions"),
      h("p", { class: "muted" }, "The server changed what a pinned tool says it does: compare the definition pinned now with the one this proposal pins."),
      definitionChangesView(p.definitionChanges)) : null,
    h("section", { id: "findings" },
      h("h2", null, `Prover findings (${findings.length})`),
      findings.length === 0
        ? h("p", { class: "muted" }, "The prover found nothing this change adds that needs a closer look.")
        : findings.map(findingCard)));

  const decisionResult = h("div", { id: "decision-result" });
  const reason = h("textarea", { id: "reason", placeholder: "Why you approve or reject it (recorded in the audit log)" });
  const grant = h("select", { id: "grant" },
    h("option", { value: "" }, "never"),
    h("option", { value: "3600" }, "in 1 hour"),
    h("option", { value: "86400" }, "in 1 day"),
    h("option", { value: "604800" }, "in 7 days"),
    h("option", { value: "2592000" }, "in 30 days"));
  const approve = h("button", { id: "approve", type: "button", class: "approve" }, "Approve");
  const reject = h("button", { id: "reject", type: "button", class: "reject" }, "Reject");
  const decide = async (method) => {
    const text = reason.value.trim();
    if (!text) {
      decisionResult.replaceChildren(notice("bad", "A reason is required."));
      reason.focus();
      return;
    }
    approve.disabled = reject.disabled = true;
    const body = { id: p.id, reason: text };
    if (method === "ApproveProposal") {
      body.resultingHash = p.resultingHash; // the version shown on this page
      if (grant.value) body.grantExpiresAt = new Date(Date.now() + Number(grant.value) * 1000).toISOString();
    }
    try {
      const q = await rpc("ApprovalService", method, body);
      await render(); // show the proposal as it is now
      let msg;
      if (method === "RejectProposal") msg = `Rejected proposal #${q.id}.`;
      else if (q.appliedVersion) msg = `Approved: applied as version ${q.appliedVersion} of ${q.sandbox}.`;
      else msg = `Approval recorded: ${(q.approvals || []).length} of ${q.approvalsRequired} needed.`;
      const out = $("decision-result");
      if (out) out.replaceChildren(notice("ok", msg));
    } catch (err) {
      approve.disabled = reject.disabled = false;
      if (err.code === "aborted") {
        decisionResult.replaceChildren(notice("warn", "The proposal changed since this page showed it (re-based onto a newer version). ",
          h("a", { href: location.hash, onclick: (ev) => { ev.preventDefault(); render(); } }, "Review it again"), "."));
      } else {
        decisionResult.replaceChildren(errorNotice(err));
      }
    }
  };
  approve.addEventListener("click", () => decide("ApproveProposal"));
  reject.addEventListener("click", () => decide("RejectProposal"));

  const right = h("div", null,
    p.status === "applied" && p.appliedVersion ? enforcementCard(p) : null,
    h("section", { class: "card", id: "approvals" },
      h("h2", { class: "first" }, "Approvals"),
      h("div", { id: "approvals-count" }, `${approvals.length} of ${required || "?"} approvals`),
      h("div", { class: "progress" }, h("div", { class: tenths ? `w${tenths}` : "" })),
      approvals.length ? h("ul", { class: "plain" }, approvals.map((a) =>
        h("li", null, h("strong", null, a.approver), " ", when(a.time), h("div", null, a.reason)))) : null,
      (p.approvalNotes || []).length ? h("ul", { class: "muted" }, p.approvalNotes.map((n) => h("li", null, n))) : null),
    pending && !can("ApprovalService", "ApproveProposal") ? h("p", { class: "muted", id: "decision-result" }, `A ${state.session.role} cannot approve or reject proposals.`) : null,
    pending && can("ApprovalService", "ApproveProposal") ? h("section", { class: "card decision" },
      h("h2", { class: "first" }, "Decision"),
      p.rebaseError ? notice("warn", `It no longer applies to the current version: ${p.rebaseError}`) : null,
      h("label", { for: "reason" }, "Reason"), reason,
      h("label", { for: "grant" }, "The grant ends"), grant,
      h("div", { class: "row" }, approve, reject),
      decisionResult) : null,
    pending ? null : h("div", { id: "decision-result" }));

  return h("div", { id: "proposal" },
    h("div", { class: "crumb" }, link("#/queue", "← Queue")),
    h("div", { class: "page-head" },
      h("h1", { id: "proposal-title" }, `Proposal #${p.id}`),
      statusBadge(p.status),
      h("span", { class: "muted" }, "for "), sandboxLink(p.sandbox)),
    h("div", { class: "columns" }, left, right));
}

// enforcementCard follows an applied proposal's version to the sandbox's
// proxies connected to this gateway (ProxyService.WatchEnforcement): "applied
// as v3 — enforced by 2 of 2 proxies in 14 ms", updated live as each proxy
// ACKs or NACKs, with every NACK's error.
function enforcementCard(p) {
  const v = p.appliedVersion;
  const line = h("div", { id: "enforcement-line", class: "notice warn", role: "status" }, `applied as v${v} — waiting for the proxies…`);
  const nacks = h("ul", { id: "enforcement-nacks", class: "plain" });
  const show = (e) => {
    const total = e.total || 0, acked = e.acked || 0, nacked = e.nacked || 0, pending = e.pending || 0;
    let text, kind;
    if (total === 0) {
      text = `applied as v${v} — no proxy of ${p.sandbox} is connected to this gateway`;
      kind = "warn";
    } else {
      text = `applied as v${v} — enforced by ${acked} of ${total} ${total === 1 ? "proxy" : "proxies"}`;
      if (pending === 0 && nacked === 0 && e.ms) text += ` in ${e.ms} ms`;
      if (pending) text += ` so far (${pending} pending)`;
      if (nacked) text += ` (${nacked} refused it)`;
      kind = nacked ? "bad" : pending ? "warn" : "ok";
    }
    line.className = `notice ${kind}`;
    line.textContent = text;
    nacks.replaceChildren(...(e.proxies || []).filter((x) => x.state === "nacked").map((x) =>
      h("li", { "data-proxy": x.proxyId }, h("strong", null, x.proxyId), ` refused v${v}: `, h("code", null, x.error || "no reason given"))));
  };
  watch("ProxyService", "WatchEnforcement", { sandbox: p.sandbox, version: v }, show, state.streams.signal)
    .catch((err) => line.replaceWith(errorNotice(err)));
  return h("section", { class: "card", id: "enforcement" },
    h("h2", { class: "first" }, "Enforcement"), line, nacks,
    h("p", { class: "muted" }, "Counts the sandbox's proxies connected to this gateway replica."));
}

async function sandboxesView() {
  const res = await rpc("SandboxService", "ListSandboxes", {});
  const rows = (res.sandboxes || []).map((s) => h("tr", null,
    h("td", null, sandboxLink(s.name)),
    h("td", { class: "num" }, s.currentVersion ? `v${s.currentVersion}` : "—"),
    h("td", null, short(s.currentHash)),
    h("td", null, s.frozen ? h("span", { class: "badge bad" }, "frozen") : h("span", { class: "badge ok" }, "active")),
    h("td", null, (s.credentialedHosts || []).join(", ") || "—"),
    h("td", null, when(s.createdAt))));
  return h("div", { id: "sandboxes" },
    h("div", { class: "page-head" }, h("h1", null, "Sandboxes")),
    table(["Name", "Version", "Hash", "State", "Credentialed hosts", "Created"], rows,
      "No sandboxes yet: an admin creates one with `portcullis sandbox create NAME -f policy.yaml`."));
}

// sourceText says where a version came from, with the version it names:
// "rollback to v1", "freeze (v9 before)".
function sourceText(v) {
  const p = v.provenance || {};
  switch (v.source) {
    case "rollback":
      return p.rollback_to ? `rollback to v${p.rollback_to}` : "rollback";
    case "freeze":
      return p.frozen_from ? `freeze: deny-all (v${p.frozen_from} before)` : "freeze: deny-all";
    case "unfreeze":
      return p.restored_from ? `unfreeze: v${p.restored_from}'s content again` : "unfreeze";
    case "expiry":
      return p.expired_rules ? `expiry: ${p.expired_rules} rule(s) ended` : "expiry";
    default:
      return v.source || "—";
  }
}

// sandboxKey is what the live sandbox page compares to know it changed
// (not the proxies' heartbeats or lag, which move all the time).
function sandboxKey(sb, versions, proxies, pending, calls) {
  return JSON.stringify([
    sb.currentVersion, sb.currentHash, sb.frozen, sb.frozenAt, sb.boundaryHash, (sb.credentialedHosts || []).join(","),
    (versions.versions || []).length,
    (proxies.proxies || []).map((x) => [x.proxyId, x.connected, x.appliedVersion, x.lastAckAt, x.lastNackVersion, x.lastNackAt]),
    pending instanceof Error ? "error" : proposalsKey(pending.proposals),
    calls instanceof Error ? "error" : (calls.calls || []).map((c) => [c.id, c.status]),
  ]);
}

async function sandboxData(name) {
  return Promise.all([
    rpc("SandboxService", "GetSandbox", { name }),
    rpc("PolicyService", "ListPolicyVersions", { sandbox: name }),
    rpc("ProxyService", "ListProxies", { sandbox: name }),
    // The page is useful without the queue: show its error in place.
    rpc("ApprovalService", "ListProposals", { sandbox: name, status: "pending" }).catch((err) => err),
    rpc("CallService", "ListCalls", { sandbox: name, limit: 50 }).catch((err) => err),
  ]);
}

async function sandboxView(name) {
  document.title = `${name} · Portcullis`;
  const [[sb, history, proxies, pendingList, callList], current, timeline] = await Promise.all([
    sandboxData(name),
    rpc("PolicyService", "GetPolicy", { sandbox: name }).catch((err) => (err.code === "not_found" ? null : Promise.reject(err))),
    rpc("SentryService", "Timeline", { sandbox: name, limit: 200 }).catch((err) => err),
  ]);
  // The page follows the sandbox: a freeze, a new version, a proxy's ACK
  // or a new proposal shows without a reload (once the person is not in
  // the middle of typing or confirming).
  let key = sandboxKey(sb, history, proxies, pendingList, callList);
  live(async () => {
    const next = sandboxKey(...(await sandboxData(name)));
    touchLive();
    if (next !== key && !busy()) {
      key = next;
      await render();
    }
  });

  const pendingRows = pendingList instanceof Error ? [] : (pendingList.proposals || []).map((p) => h("tr", { "data-id": p.id },
    h("td", { class: "num" }, proposalLink(p.id)),
    changeCell(p),
    h("td", null, findingChips(p.findings)),
    h("td", { class: "num" }, when(p.createdAt))));
  const calls = callList instanceof Error ? [] : callList.calls || [];
  const callRows = calls.map((c) => h("tr", { "data-id": c.id, "data-status": c.status },
    h("td", { class: "num" }, link(`#/call/${encodeURIComponent(c.id)}`, `#${c.id}`)),
    h("td", { class: "mono" }, callTarget(c)),
    h("td", null, callBadge(c.status)),
    h("td", null, deadlineCell(c)),
    h("td", { class: "num" }, when(c.requestedAt))));
  tickCountdowns(state.streams.signal);
  const versions = (history.versions || []).slice().sort((a, b) => b.version - a.version);
  const currentVersion = current ? current.version : 0;
  const connected = (proxies.proxies || []).filter((x) => x.connected);
  const lagging = connected.filter((x) => (x.appliedVersion || 0) < currentVersion);

  // Diff between any two versions.
  const diffOut = h("div", { id: "history-diff" });
  const options = (sel) => versions.map((v) => h("option", { value: v.version, selected: v.version === sel }, `v${v.version}`));
  const from = h("select", { id: "diff-from", "aria-label": "from version" }, options(Math.max(1, currentVersion - 1)));
  const to = h("select", { id: "diff-to", "aria-label": "to version" }, options(currentVersion));
  const compare = h("button", { id: "diff-button", type: "button" }, "Show diff");
  compare.addEventListener("click", async () => {
    diffOut.replaceChildren(h("p", { class: "muted" }, "Loading…"));
    try {
      const d = await rpc("PolicyService", "DiffPolicy", { sandbox: name, fromVersion: Number(from.value), toVersion: Number(to.value) });
      diffOut.replaceChildren(h("p", { class: "muted" }, `v${d.fromVersion} → v${d.toVersion}`), diffView(d.changes));
    } catch (err) {
      diffOut.replaceChildren(errorNotice(err));
    }
  });

  // Rolling back is an admin's, and not while frozen: the freeze holds
  // the sandbox at deny-all until an admin unfreezes it.
  const mayRollBack = can("PolicyService", "RollbackPolicy") && !sb.frozen;
  const rollbackOut = h("div", { id: "rollback-result" });
  const rollbackCell = (v) => {
    if (v.version === currentVersion) return h("span", { class: "badge ok" }, "current");
    if (!mayRollBack) return null;
    const cell = h("span");
    const start = h("button", { type: "button", class: "small", "data-rollback": v.version }, "Roll back to this");
    start.addEventListener("click", () => {
      const confirm = h("button", { type: "button", class: "small danger", "data-confirm-rollback": v.version }, `Make v${v.version}'s content current`);
      const cancel = h("button", { type: "button", class: "small" }, "Cancel");
      cancel.addEventListener("click", () => cell.replaceChildren(start));
      confirm.addEventListener("click", async () => {
        confirm.disabled = true;
        try {
          const nv = await rpc("PolicyService", "RollbackPolicy", { sandbox: name, toVersion: v.version, expectedVersion: currentVersion });
          cell.replaceChildren(start);
          await render();
          const out = $("rollback-result");
          if (out) out.replaceChildren(notice("ok", `Rolled back: version ${nv.version} has v${v.version}'s content.`));
        } catch (err) {
          cell.replaceChildren(start);
          rollbackOut.replaceChildren(errorNotice(err));
        }
      });
      cell.replaceChildren(h("span", { class: "row" }, confirm, cancel));
    });
    cell.append(start);
    return cell;
  };
  const historyRows = versions.map((v) => h("tr", { "data-version": v.version },
    h("td", { class: "num" }, `v${v.version}`),
    h("td", null, when(v.createdAt)),
    h("td", null, v.author || "—"),
    h("td", { class: "source" }, sourceText(v), v.provenance && v.provenance.proposal ? h("span", null, " ", proposalLink(v.provenance.proposal)) : null),
    h("td", null, short(v.hash)),
    h("td", null, rollbackCell(v))));
  const historyNote = sb.frozen ? "Frozen: no rollback until an admin unfreezes it."
    : can("PolicyService", "RollbackPolicy") ? null : `A ${state.session.role} cannot roll back; an admin can.`;

  const proxyRows = (proxies.proxies || []).map((x) => {
    const behind = x.appliedVersion && currentVersion && x.appliedVersion < currentVersion;
    // Behind a freeze, a proxy still enforces its older version: say so.
    const lag = !behind ? null : sb.frozen
      ? h("span", { class: "badge bad", title: `v${currentVersion} is the freeze's deny-all; this proxy has not applied it` }, `not frozen yet: freeze is v${currentVersion}`)
      : h("span", { class: "badge warn" }, `behind v${currentVersion}`);
    return h("tr", { "data-proxy": x.proxyId },
      h("td", null, h("span", { class: x.connected ? "dot on" : "dot" }), h("span", { class: "mono" }, x.proxyId)),
      h("td", null, x.connected ? "connected" : h("span", null, "disconnected, last seen ", when(x.lastSeenAt))),
      h("td", { class: "num" }, x.appliedVersion ? `v${x.appliedVersion}` : "none", lag ? h("span", null, " ", lag) : null),
      h("td", null, x.lastAckAt ? h("span", null, h("span", { class: "badge ok" }, "ACK"), " ", when(x.lastAckAt)) : "—"),
      h("td", null, x.lastNackVersion ? h("span", null, h("span", { class: "badge bad" }, `NACK v${x.lastNackVersion}`), " ",
        h("span", { class: "error" }, x.lastNackError || ""), " ", when(x.lastNackAt)) : "—"),
      h("td", { class: "num" }, x.lagMs !== undefined ? `${x.lagMs} ms` : "—"),
      h("td", null, x.replica || "—"));
  });

  return h("div", { id: "sandbox" },
    h("div", { class: "crumb" }, link("#/sandboxes", "← Sandboxes")),
    h("div", { class: "page-head" },
      h("h1", { id: "sandbox-title" }, name),
      sb.frozen ? h("span", { class: "badge bad" }, "frozen") : null,
      liveBadge(),
      h("span", { class: "spacer" }),
      killSwitch(name, sb.frozen)),
    h("div", { id: "freeze-result" }),
    sb.frozen ? frozenNotice(sb, currentVersion, connected, lagging) : null,
    h("section", { class: "card", id: "current-policy" },
      h("h2", { class: "first" }, current ? `Current policy: v${current.version}${sb.frozen ? " (the freeze: deny-all)" : ""}` : "No policy yet"),
      current ? facts([
        ["Hash", short(current.hash)],
        ["Author", current.author],
        ["Source", sourceText(current)],
        ["Stored", when(current.createdAt)],
        ["Credentialed hosts", (sb.credentialedHosts || []).join(", ") || null],
      ]) : null,
      current ? h("details", { open: true }, h("summary", null, "Document (YAML)"), policyDoc(current.yaml, current.policy)) : null),
    h("section", { class: "card", id: "boundary" },
      h("h2", { class: "first" }, "Boundary"),
      sb.boundary || sb.boundaryYaml
        ? [h("p", { class: "muted" }, "The most this sandbox may ever be granted: proposals beyond it are flagged ", h("code", null, "exceeds_boundary"), ". Hash ", short(sb.boundaryHash), "."),
          h("details", null, h("summary", null, "Document (YAML)"), policyDoc(sb.boundaryYaml, sb.boundary))]
        : h("p", { class: "muted" }, "None set: proposals are bounded only by review. An admin sets one with ",
          h("code", null, `portcullis sandbox set-boundary ${name} -f boundary.yaml`), ".")),
    h("h2", null, "Pending proposals"),
    h("div", { id: "sandbox-proposals" }, pendingList instanceof Error ? errorNotice(pendingList)
      : table(["#", "Change", "Findings", "Submitted"], pendingRows, "None.")),
    h("h2", null, "Held calls"),
    h("div", { id: "sandbox-calls" }, callList instanceof Error ? errorNotice(callList)
      : table(["#", "Call", "Status", "Deadline", "Requested"], callRows, "None: no call of this sandbox was held for review.")),
    h("h2", null, "Proxies"),
    h("div", { id: "proxies" }, table(["Proxy", "Connection", "Applied", "Last ACK", "Last NACK", "Lag", "Replica"], proxyRows,
      "No proxy has connected for this sandbox.")),
    h("h2", null, "History"),
    h("div", { class: "row" }, h("span", null, "Compare"), from, h("span", null, "with"), to, compare),
    diffOut,
    rollbackOut,
    historyNote ? h("p", { class: "muted", id: "history-note" }, historyNote) : null,
    h("div", { id: "history" }, table(["Version", "Stored", "Author", "Source", "Hash", ""], historyRows, "No versions.")),
    h("div", { class: "page-head section-head" }, h("h2", null, "Timeline"),
      h("span", { class: "muted" }, "the last 24 hours, oldest first: the newest entry is at the bottom")),
    h("div", { id: "timeline" }, timeline instanceof Error ? errorNotice(timeline) : timelineTable(withCalls(timeline.entries || [], calls))));
}

// withCalls adds the sandbox's held calls of the last 24 hours to its
// timeline, each where it was held, oldest first as the timeline is.
function withCalls(entries, calls) {
  const since = Date.now() - 24 * 3600 * 1000;
  const held = calls.filter((c) => new Date(c.requestedAt) >= since).map((c) => ({
    time: c.requestedAt,
    kind: "held_call",
    policyVersion: c.policyVersion,
    summary: `Call ${callTarget(c)} held for review` +
      (c.status === "held" ? "" : `: ${c.status}${c.decidedBy ? ` by ${c.decidedBy}` : ""}${c.reason ? ` (${c.reason})` : ""}`),
    refs: { call: c.id, arguments_digest: c.argumentsDigest },
  }));
  return [...entries, ...held].sort((a, b) => new Date(a.time) - new Date(b.time));
}

// frozenNotice says who froze a sandbox and why (when a Sentry quarantine
// did, at once or held and then confirmed by an operator, it names the
// event), and where its proxies stand: a proxy that has not applied the
// freeze's deny-all version yet still enforces its older one.
function frozenNotice(sb, version, connected, lagging) {
  let enforced;
  if (connected.length === 0) enforced = ` v${version} denies everything; no proxy of ${sb.name} is connected to this gateway (one that connects gets it first). Proposals are refused.`;
  else if (lagging.length === 0) enforced = ` v${version} denies everything, and ${connected.length === 1 ? "its one connected proxy enforces" : `all ${connected.length} connected proxies enforce`} it. Proposals are refused.`;
  else enforced = ` v${version} denies everything, but ${lagging.length} of ${connected.length} connected ${connected.length === 1 ? "proxy has" : "proxies have"} not applied it yet (${lagging.map((x) => `${x.proxyId} still on v${x.appliedVersion || "none"}`).join(", ")}). Proposals are refused.`;
  if (!sb.quarantineEventId) {
    return h("div", { class: "notice bad", role: "alert", id: "frozen" },
      `Frozen by ${sb.frozenBy || "?"} `, when(sb.frozenAt), `: ${sb.frozenReason || ""}.${enforced}`);
  }
  return h("div", { class: "notice bad", role: "alert", id: "quarantine" },
    h("strong", null, "Quarantined"), ": frozen for Sentry event ",
    h("code", { id: "quarantine-event" }, sb.quarantineEventId), " from ",
    h("code", { id: "quarantine-source" }, sb.quarantineSource), ` (${sb.frozenReason || "no reason given"}).`, enforced,
    " See ", link("#/incidents", "Incidents"), ".");
}

// Flags worth a person's attention in a timeline entry: a policy hash no
// proxy applied (drift), a tool call no proxy decided (unmediated).
const alarmFlags = new Set(["drift", "unmediated"]);

function timelineTable(entries) {
  const rows = entries.map((e) => {
    const flags = e.flags || [];
    const alarm = flags.some((f) => alarmFlags.has(f));
    return h("tr", { "data-kind": e.kind, class: alarm ? "alarm" : null },
      h("td", { class: "num" }, clock(e.time)),
      h("td", null, h("span", { class: `badge kind-${e.kind}` }, e.kind.replaceAll("_", " "))),
      h("td", { class: "num" }, e.policyVersion ? `v${e.policyVersion}` : "—"),
      h("td", null, h("div", null, e.summary),
        h("div", { class: "chips refs" }, Object.entries(e.refs || {}).sort(([a], [b]) => a.localeCompare(b)).map(timelineRef))),
      h("td", null, (e.links || []).length ? h("ul", { class: "links" }, e.links.map((l) => h("li", null, l))) : "—"),
      h("td", null, flags.length ? h("div", { class: "chips" }, flags.map((f) => h("span", { class: `chip flag ${alarmFlags.has(f) ? "high" : "medium"}` }, f))) : "—"));
  });
  return table(["Time", "Kind", "In force", "Summary", "Links", "Flags"], rows, "Nothing happened to this sandbox in the last 24 hours.");
}

// timelineRef shows what an entry names: a proposal as a link, a hash
// shortened.
function timelineRef([k, v]) {
  if (k === "proposal") return h("span", { class: "chip" }, "proposal: ", proposalLink(v, v));
  if (k === "call") return h("span", { class: "chip" }, "call: ", link(`#/call/${encodeURIComponent(v)}`, `#${v}`));
  if (k === "arguments_digest") return h("span", { class: "chip" }, "digest: ", short(v));
  if (k.endsWith("hash")) return h("span", { class: "chip" }, `${k}: `, short(v));
  return h("span", { class: "chip" }, `${k}: ${v}`);
}

// killSwitch freezes a sandbox (deny-all pushed to its proxies, proposals
// refused; any operator may) or unfreezes it (admins), with a reason. A
// role that may not is offered nothing, and told who can.
function killSwitch(name, frozen) {
  const method = frozen ? "UnfreezeSandbox" : "FreezeSandbox";
  if (!can("SandboxService", method)) {
    return h("span", { class: "muted", id: "kill-switch" }, frozen ? "Only an admin can unfreeze it." : "Only an operator or admin can freeze it.");
  }
  const box = h("span", { class: "row", id: "kill-switch" });
  const start = h("button", { type: "button", id: "freeze-start", class: frozen ? "" : "danger" }, frozen ? "Unfreeze…" : "Freeze…");
  start.addEventListener("click", () => {
    const reason = h("input", { type: "text", id: "freeze-reason", placeholder: "reason (recorded in the audit log)", "aria-label": "reason" });
    const go = h("button", { type: "button", id: "freeze-confirm", class: frozen ? "primary" : "danger" }, frozen ? "Unfreeze" : "Freeze now");
    const cancel = h("button", { type: "button" }, "Cancel");
    cancel.addEventListener("click", () => box.replaceChildren(start));
    go.addEventListener("click", async () => {
      const out = $("freeze-result");
      if (!reason.value.trim()) {
        out.replaceChildren(notice("bad", "A reason is required."));
        return;
      }
      go.disabled = true;
      try {
        await rpc("SandboxService", method, { name, reason: reason.value.trim() });
        await render();
        const done = $("freeze-result");
        if (done) done.replaceChildren(notice("ok", frozen ? `${name} is unfrozen: its policy before the freeze is current again.` : `${name} is frozen: its proxies deny everything.`));
      } catch (err) {
        go.disabled = false;
        out.replaceChildren(errorNotice(err));
      }
    });
    box.replaceChildren(reason, go, cancel);
    reason.focus();
  });
  box.append(start);
  return box;
}

// AUDIT_PAGE entries show at a time; "Older" pages on with before_seq.
const AUDIT_PAGE = 50;

function auditHash(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v) q.set(k, v);
  const s = q.toString();
  return s ? `#/audit?${s}` : "#/audit";
}

async function auditView(params) {
  const sandbox = params.get("sandbox") || "";
  const before = Number(params.get("before") || 0);
  const res = await rpc("AuditService", "ListAudit", { sandbox, limit: AUDIT_PAGE, beforeSeq: before || undefined });
  const entries = res.entries || [];
  const filter = h("input", { type: "text", id: "audit-sandbox", value: sandbox, placeholder: "all sandboxes", "aria-label": "sandbox" });
  const form = h("form", { class: "row" }, h("label", { for: "audit-sandbox", class: "muted" }, "Sandbox"), filter, h("button", { type: "submit" }, "Filter"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    location.hash = auditHash({ sandbox: filter.value.trim() });
  });
  const verifyOut = h("div", { id: "verify-result" });
  const verify = h("button", { type: "button", id: "verify" }, "Verify the chain");
  verify.addEventListener("click", async () => {
    verify.disabled = true;
    try {
      const v = await rpc("AuditService", "VerifyAudit", {});
      verifyOut.replaceChildren(v.ok
        ? notice("ok", `The chain holds: ${v.entries || 0} entries, head `, h("span", { class: "mono" }, v.headHash || "—"), ".")
        : notice("bad", `The chain breaks at entry ${v.firstBadSeq}: ${v.problem}`));
    } catch (err) {
      verifyOut.replaceChildren(errorNotice(err));
    } finally {
      verify.disabled = false;
    }
  });
  const change = (e) => (e.beforeHash || e.afterHash
    ? h("span", { class: "hashes" }, short(e.beforeHash), " → ", short(e.afterHash))
    : "—");
  const rows = entries.map((e) => h("tr", { "data-seq": e.seq },
    h("td", { class: "num" }, e.seq),
    h("td", { class: "num" }, absolute(e.time)),
    h("td", { class: "wrap" }, e.actor),
    h("td", null, h("code", null, e.action)),
    h("td", null, e.sandbox ? sandboxLink(e.sandbox) : "—"),
    h("td", { class: "wrap" }, e.target || "—"),
    h("td", { class: "num" }, change(e)),
    h("td", null, h("div", { class: "chips" }, Object.entries(e.detail || {}).map(([k, v]) => h("span", { class: "chip" }, `${k}: ${v}`)))),
    h("td", null, short(e.hash))));
  const oldest = entries.length ? Number(entries[entries.length - 1].seq) : 0;
  const pager = h("div", { class: "row pager", id: "audit-pager" },
    before ? link(auditHash({ sandbox }), "← Newest") : null,
    h("span", { class: "muted", id: "audit-range" }, entries.length
      ? `entries ${entries[0].seq} to ${oldest}${before ? "" : " (the newest)"}` : ""),
    h("span", { class: "spacer" }),
    entries.length === AUDIT_PAGE && oldest > 1
      ? h("a", { href: auditHash({ sandbox, before: oldest }), id: "audit-older" }, "Older →") : null);
  return h("div", { id: "audit" },
    h("div", { class: "page-head" }, h("h1", null, "Audit log"), h("span", { class: "muted" }, "newest first"),
      h("span", { class: "spacer" }), form, verify),
    verifyOut,
    table(["#", "Time", "Actor", "Action", "Sandbox", "Target", "Before → after", "Detail", "Entry hash"], rows,
      before ? "No older entries." : "No entries."),
    entries.length ? pager : null);
}

// ---------------------------------------------------------------- incidents

// What an action's status says about its sandbox: bad when it froze it,
// warn when it waits for an operator.
const actionStatusClass = { frozen: "bad", applied: "bad", failed: "bad", held: "warn" };

// incidentsView lists what the gateway did about Sentry's remediating
// events (SentryService.ListActions): held quarantines first, since they
// wait for an operator, then newest first.
async function incidentsView() {
  // Every held one, however old, and the newest of the rest; both lists
  // come newest first.
  const [heldRes, recent] = await Promise.all([
    rpc("SentryService", "ListActions", { status: ["held"], limit: 1000 }),
    rpc("SentryService", "ListActions", { limit: 200 }),
  ]);
  const actions = [...(heldRes.actions || []), ...(recent.actions || []).filter((a) => a.status !== "held")];
  const held = actions.filter((a) => a.status === "held").length;
  const rows = actions.map((a) => {
    const ackMs = a.ackedAt && a.receivedAt ? new Date(a.ackedAt) - new Date(a.receivedAt) : null;
    return h("tr", { "data-id": a.id, "data-status": a.status, class: a.status === "held" ? "held" : null },
      h("td", null, sandboxLink(a.sandbox)),
      h("td", null, h("span", { class: `badge ${actionStatusClass[a.status] || ""}` }, a.status.replaceAll("_", " "))),
      h("td", null, h("code", null, a.eventId), h("div", { class: "muted mono" }, a.source)),
      h("td", { class: "rationale" }, a.reason || "—",
        a.decidedBy ? h("div", { class: "muted" }, `decided by ${a.decidedBy} `, when(a.decidedAt)) : null),
      h("td", { class: "num" }, a.version ? `v${a.version}` : "—"),
      h("td", { class: "num" }, when(a.receivedAt)),
      h("td", { class: "num ack", title: a.ackedAt ? "from the event's arrival to the last connected proxy's ACK of the freeze" : null },
        ackMs === null ? "—" : duration(ackMs)),
      h("td", null, a.status === "held" && can("SentryService", "DecideAction") ? decideForm(a) : null));
  });
  return h("div", { id: "incidents" },
    h("div", { class: "page-head" }, h("h1", null, "Incidents"),
      h("span", { class: "muted" }, "Sentry quarantines: held ones first, then newest first"),
      held ? h("span", { class: "badge warn", id: "held-count" }, `${held} held`) : null),
    h("div", { id: "incident-result" }),
    table(["Sandbox", "Status", "Event", "Reason", "Version", "Received", "Ingest to ACK", "Decision"], rows,
      "No incidents: no Sentry quarantine has reached this gateway."));
}

// decideForm answers a held quarantine: freeze its sandbox after all, or
// dismiss it, with a reason (recorded in the audit log).
function decideForm(a) {
  const reason = h("input", { type: "text", class: "decide-reason", placeholder: "reason (recorded in the audit log)", "aria-label": `reason for incident ${a.id}` });
  const freeze = h("button", { type: "button", class: "small danger", "data-decide": "freeze" }, "Freeze");
  const dismiss = h("button", { type: "button", class: "small", "data-decide": "dismiss" }, "Dismiss");
  const decide = async (decision) => {
    const out = $("incident-result");
    const text = reason.value.trim();
    if (!text) {
      out.replaceChildren(notice("bad", `A reason is required to ${decision} the quarantine of ${a.sandbox}.`));
      reason.focus();
      return;
    }
    freeze.disabled = dismiss.disabled = true;
    try {
      const res = await rpc("SentryService", "DecideAction", { id: a.id, decision, reason: text });
      const done = res.action || {};
      await render(); // show the list as it is now
      const msg = done.status === "dismissed"
        ? `Dismissed the quarantine of ${a.sandbox} (event ${a.eventId}): the sandbox is untouched.`
        : `Froze ${a.sandbox} (event ${a.eventId}): version ${done.version} denies everything.`;
      const shown = $("incident-result");
      if (shown) shown.replaceChildren(notice("ok", msg));
    } catch (err) {
      freeze.disabled = dismiss.disabled = false;
      out.replaceChildren(errorNotice(err));
    }
  };
  freeze.addEventListener("click", () => decide("freeze"));
  dismiss.addEventListener("click", () => decide("dismiss"));
  return h("div", { class: "decide" }, reason, h("div", { class: "row" }, freeze, dismiss));
}

// ---------------------------------------------------------------- held calls

// indentJSON pretty-prints JSON text as it was written: it only adds and
// removes white space between tokens, so every number, key and string
// keeps the agent's exact spelling (parsing would round 0.1 + 0.2 and
// integers past 2^53). Text that is not a JSON object or array (a REST
// body) is shown as it is.
function indentJSON(text) {
  const t = (text || "").trim();
  if (!t.startsWith("{") && !t.startsWith("[")) return text || "";
  const space = " \t\n\r";
  let out = "";
  let depth = 0;
  const nl = () => "\n" + "  ".repeat(depth);
  for (let i = 0; i < t.length; i++) {
    const c = t[i];
    if (c === '"') {
      let j = i + 1;
      while (j < t.length && t[j] !== '"') j += t[j] === "\\" ? 2 : 1;
      out += t.slice(i, j + 1);
      i = j;
    } else if (space.includes(c)) {
      continue;
    } else if (c === "{" || c === "[") {
      let j = i + 1;
      while (j < t.length && space.includes(t[j])) j++;
      if (t[j] === (c === "{" ? "}" : "]")) {
        out += c + t[j];
        i = j;
      } else {
        depth++;
        out += c + nl();
      }
    } else if (c === "}" || c === "]") {
      depth = Math.max(0, depth - 1);
      out += nl() + c;
    } else if (c === ",") {
      out += "," + nl();
    } else if (c === ":") {
      out += ": ";
    } else {
      out += c;
    }
  }
  return out;
}

// callTarget is what a held call asks for: the MCP method and tool, or
// the HTTP method and path.
function callTarget(c) {
  return c.mcpMethod ? `${c.mcpMethod} ${c.tool || ""}`.trim() : `${c.method || "?"} ${c.path || "/"}`;
}

// countdown is the time left to decide a held call, "due" once past.
function countdown(deadline) {
  const s = Math.floor((new Date(deadline) - Date.now()) / 1000);
  if (!(s > 0)) return "due";
  return `${Math.floor(s / 60)}:${String(s % 60).padStart(2, "0")} left`;
}

// deadlineCell shows a held call's countdown, ticked every second by
// tickCountdowns, or how a decided call ended.
function deadlineCell(c) {
  if (c.status !== "held") return h("span", { class: "muted" }, `${c.status} by ${c.decidedBy || "?"} `, when(c.decidedAt));
  return h("span", { class: "countdown", "data-deadline": c.deadline, title: iso(new Date(c.deadline)) }, countdown(c.deadline));
}

function tickCountdowns(signal) {
  const timer = setInterval(() => {
    for (const el of document.querySelectorAll("#view .countdown[data-deadline]")) el.textContent = countdown(el.dataset.deadline);
  }, 1000);
  signal.addEventListener("abort", () => clearInterval(timer));
}

const callStatusClass = { held: "warn", approved: "ok", denied: "bad", expired: "bad", failed: "bad" };

function callBadge(status) {
  return h("span", { class: `badge ${callStatusClass[status] || ""}` }, status);
}

// callCard is one held call: what it calls and where, its countdown, its
// arguments pretty-printed, and (while held, for a role that may) the
// decision with a required reason, whose answer goes to show.
function callCard(c, show) {
  return h("section", { class: `card call ${c.status}`, "data-id": c.id, "data-status": c.status, id: `call-${c.id}` },
    h("div", { class: "page-head" },
      h("h2", { class: "first" }, `#${c.id} `, h("span", { class: "mono" }, callTarget(c))),
      callBadge(c.status), h("span", { class: "spacer" }), deadlineCell(c)),
    facts([
      ["Sandbox", sandboxLink(c.sandbox)],
      ["Endpoint", h("span", { class: "mono" }, c.endpoint || "—")],
      ["Proxy", h("span", { class: "mono" }, c.proxy || "—")],
      ["Binary", c.binary ? h("span", { class: "mono" }, c.binary) : null],
      ["Rule", c.entry || c.rule ? h("span", { class: "mono" }, `${c.entry || "?"} / ${c.rule || "?"}`) : null],
      ["Policy version", c.policyVersion ? `v${c.policyVersion}` : null],
      ["Requested", when(c.requestedAt)],
      ["Reason", c.status !== "held" ? c.reason || "—" : null],
      ["Proposal", c.proposalId && c.proposalId !== "0" ? proposalLink(c.proposalId) : null],
      ["Arguments digest", h("span", { class: "mono digest" }, c.argumentsDigest || "—")],
    ]),
    c.argumentsJson
      ? h("pre", { class: "arguments" }, indentJSON(c.argumentsJson))
      : h("p", { class: "muted" }, "Arguments cleared (kept until decided and the retention after); the digest stays."),
    c.status === "held" && can("CallService", "ApproveCall") ? callDecision(c, show) : null);
}

// callDecision approves (optionally remembering: a proposal allowing
// these exact arguments without review) or denies a held call, with a
// reason; the approval names the digest shown.
function callDecision(c, show) {
  const reason = h("input", { type: "text", class: "call-reason", placeholder: "reason (kept with the call)", "aria-label": `reason for call ${c.id}` });
  const out = h("div", { class: "call-result" });
  const approve = h("button", { type: "button", class: "approve", "data-decide": "approve" }, "Approve");
  const remember = h("button", { type: "button", "data-decide": "remember", title: "also propose a rule that allows these exact arguments without review" }, "Approve and remember");
  const deny = h("button", { type: "button", class: "reject", "data-decide": "deny" }, "Deny");
  const buttons = [approve, remember, deny];
  const decide = async (how) => {
    const text = reason.value.trim();
    if (!text) {
      out.replaceChildren(notice("bad", `A reason is required to ${how === "deny" ? "deny" : "approve"} call #${c.id}.`));
      reason.focus();
      return;
    }
    for (const b of buttons) b.disabled = true;
    try {
      const done = how === "deny"
        ? await rpc("CallService", "DenyCall", { id: c.id, reason: text })
        : await rpc("CallService", "ApproveCall", { id: c.id, reason: text, argumentsDigest: c.argumentsDigest, remember: how === "remember" });
      const filed = done.proposalId && done.proposalId !== "0";
      show(done, notice("ok", `Call #${c.id} ${done.status}.`,
        filed ? h("span", null, " Proposal ", proposalLink(done.proposalId), " filed to allow these arguments without review.") : ""));
    } catch (err) {
      for (const b of buttons) b.disabled = false;
      out.replaceChildren(errorNotice(err));
    }
  };
  approve.addEventListener("click", () => decide("approve"));
  remember.addEventListener("click", () => decide("remember"));
  deny.addEventListener("click", () => decide("deny"));
  return h("div", { class: "decide" }, reason, h("div", { class: "row" }, ...buttons), out);
}

// callList keeps the held calls page's cards: show(c, msg) puts c's card
// in list, newest first (ids grow with time), replacing the card it had;
// a card whose call did not change is left alone, so a reason being typed
// stays. msg, if given, shows under the new card.
function callList(list, count, empty) {
  const show = (c, msg) => {
    const old = list.querySelector(`.call[data-id="${CSS.escape(c.id)}"]`);
    if (old && old.dataset.status === c.status && !msg) return;
    const card = callCard(c, show);
    if (msg) card.append(msg);
    if (old) old.replaceWith(card);
    else {
      const after = [...list.children].find((el) => Number(el.dataset.id) < Number(c.id));
      list.insertBefore(card, after || null);
    }
    empty.hidden = true;
    const held = list.querySelectorAll(".call[data-status=held]").length;
    count.textContent = `${held} held, newest first`;
    setNavHeld(held);
  };
  return show;
}

// callsView is the Held calls page: every call WatchCalls sends, newest
// first, kept up to date by the stream; #/call/N scrolls to call N.
async function callsView(focus) {
  const list = h("div", { id: "calls-list" });
  const count = h("span", { class: "muted", id: "calls-count" }, "0 held");
  const empty = h("p", { class: "muted", id: "calls-empty" }, "No held calls. A call waits here when an allow rule with ",
    h("code", null, "review: {required: true}"), " holds it at the proxy.");
  const failed = h("div", { id: "calls-error" });
  const page = h("div", { id: "calls" },
    h("div", { class: "page-head" }, h("h1", null, "Held calls"), count,
      h("span", { class: "live muted", title: "follows the gateway (WatchCalls)" }, h("span", { class: "dot on" }), "live")),
    failed, empty, list);
  const signal = state.streams.signal;
  tickCountdowns(signal);
  const show = callList(list, count, empty);
  let focused = false;
  watch("CallService", "WatchCalls", { limit: 200 }, (c) => {
    show(c);
    if (!focused && focus && c.id === focus) {
      focused = true;
      list.querySelector(`.call[data-id="${CSS.escape(c.id)}"]`).scrollIntoView();
    }
  }, signal).catch((err) => failed.replaceChildren(errorNotice(err)));
  return page;
}

// setNavHeld shows how many calls wait for a person in the navigation.
function setNavHeld(n) {
  const el = $("nav-held");
  el.textContent = n ? String(n) : "";
  el.hidden = !n;
}

// followHeld keeps the navigation's held count (ListCalls' held) while
// signed in, polled as live pages are.
function followHeld() {
  const poll = async () => {
    if (!state.session) {
      state.followingHeld = false;
      return;
    }
    if (!document.hidden && can("CallService", "ListCalls")) {
      try {
        setNavHeld((await rpc("CallService", "ListCalls", { status: "held", limit: 1 })).held || 0);
      } catch {
        // shown again at the next poll
      }
    }
    setTimeout(poll, POLL_MS);
  };
  poll();
}

// ---------------------------------------------------------------- routing

const routes = {
  queue: (arg, params) => queueView(params),
  proposal: (arg) => proposalView(arg),
  sandboxes: () => sandboxesView(),
  sandbox: (arg) => sandboxView(arg),
  audit: (arg, params) => auditView(params),
  incidents: () => incidentsView(),
  calls: () => callsView(""),
  call: (arg) => callsView(arg),
};

async function render() {
  if (!state.session) return;
  const seq = ++state.seq;
  // The previous page's streams end with it.
  if (state.streams) state.streams.abort();
  state.streams = new AbortController();
  const hash = location.hash || "#/queue";
  const [path, query] = hash.slice(1).split("?");
  const [, view = "queue", ...rest] = path.split("/");
  const arg = rest.length ? decodeURIComponent(rest.join("/")) : "";
  const params = new URLSearchParams(query || "");
  for (const a of document.querySelectorAll("#nav a")) {
    const nav = a.dataset.nav;
    a.classList.toggle("active", nav === view || (nav === "queue" && view === "proposal") || (nav === "sandboxes" && view === "sandbox") || (nav === "calls" && view === "call"));
  }
  document.title = `${view[0].toUpperCase()}${view.slice(1)} · Portcullis`;
  document.body.dataset.view = view;
  const out = $("view");
  if (!out.firstChild) out.replaceChildren(h("p", { class: "muted" }, "Loading…"));
  let node;
  try {
    const fn = routes[view];
    node = fn ? await fn(arg, params) : notice("bad", "No such page. ", link("#/queue", "Go to the queue"), ".");
  } catch (err) {
    node = errorNotice(err);
  }
  if (seq !== state.seq || !state.session) return; // a newer render won
  out.replaceChildren(node);
}

// ---------------------------------------------------------------- session

function signedIn(session) {
  state.session = session;
  $("who-name").textContent = session.name;
  $("who-role").textContent = session.role;
  $("signin").hidden = true;
  $("nav").hidden = $("who").hidden = $("view").hidden = false;
  $("view").replaceChildren();
  render();
  if (!state.followingHeld) {
    state.followingHeld = true;
    followHeld();
  }
}

function signedOut(message) {
  state.session = null;
  state.seq++;
  if (state.streams) state.streams.abort();
  $("nav").hidden = $("who").hidden = $("view").hidden = true;
  $("view").replaceChildren();
  $("signin").hidden = false;
  $("signin-error").textContent = message || "";
  document.title = "Sign in · Portcullis";
  $("token").focus();
}

async function boot() {
  $("signin-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const button = $("signin-button");
    button.disabled = true;
    $("signin-error").textContent = "";
    try {
      const res = await sessionRequest("POST", { token: $("token").value });
      if (!res.ok) {
        $("signin-error").textContent = res.data.message || `sign-in failed (HTTP ${res.status})`;
        return;
      }
      $("token").value = "";
      signedIn(res.data);
    } catch {
      $("signin-error").textContent = "The gateway cannot be reached.";
    } finally {
      button.disabled = false;
    }
  });
  $("signout").addEventListener("click", async () => {
    await sessionRequest("DELETE").catch(() => {});
    signedOut("You are signed out.");
  });
  window.addEventListener("hashchange", render);

  const res = await sessionRequest("GET").catch(() => ({ ok: false, data: {} }));
  if (res.ok) signedIn(res.data);
  else signedOut("");
}

boot();
