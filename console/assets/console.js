// toolbus console: the agents page follows presence through server-sent
// events. The server says "agents" when an agent comes or goes; the list
// is fetched again, already rendered (and escaped) by the server. No
// library: EventSource and fetch are enough for this, and there is no
// third-party code to vet. Works without it: the page is complete at load.
"use strict";
(function () {
  var list = document.getElementById("agent-list");
  if (!list || !window.EventSource) { return; }
  var live = document.getElementById("live");
  var src = list.getAttribute("data-src");
  var pending = null, again = false;
  function state(s) { if (live) { live.textContent = s; live.setAttribute("data-state", s); } }
  function refresh() {
    if (pending) { again = true; return; }
    pending = fetch(src, { credentials: "same-origin", cache: "no-store" }).then(function (r) {
      if (!r.ok) { throw new Error("status " + r.status); }
      return r.text();
    }).then(function (html) {
      // Server-rendered by html/template: agent text arrives escaped, and
      // the CSP forbids inline script, so this runs nothing of theirs.
      var doc = new DOMParser().parseFromString(html, "text/html");
      list.replaceChildren.apply(list, Array.prototype.slice.call(doc.body.childNodes));
    }).catch(function () { state("list not refreshed; reload the page"); })
      .then(function () { pending = null; if (again) { again = false; refresh(); } });
  }
  var es = new EventSource(list.getAttribute("data-events"));
  es.addEventListener("ready", function () { state("live"); refresh(); });
  es.addEventListener("agents", refresh);
  es.onerror = function () { state("reconnecting"); };
})();

// The audit page's live tail: when "Live" is on, an EventSource on the
// page's data-events URL (the same filters) receives "rows", JSON arrays
// of new records, oldest first; each becomes a row at the top of the
// table, every cell set with textContent (a record's text is never
// markup). "more" says records past the stream's bound were skipped. Rows
// are kept once per ID, and the table to maxRows.
(function () {
  var body = document.getElementById("audit-rows");
  var control = document.getElementById("audit-live-control");
  var box = document.getElementById("audit-live");
  if (!body || !control || !box || !window.EventSource || !body.getAttribute("data-events")) { return; }
  var state = document.getElementById("audit-live-state");
  var maxRows = 1000;
  var cols = ["time", "kind", "outcome", "user", "agent", "tool", "source", "what", "status", "duration", "reason", "requestId"];
  var mono = { time: true, tool: true, requestId: true };
  var seen = {};
  Array.prototype.forEach.call(body.querySelectorAll("tr[data-id]"), function (tr) { seen[tr.getAttribute("data-id")] = true; });
  var es = null;
  function say(s) { state.textContent = s; state.setAttribute("data-state", s); }
  function str(v) { return typeof v === "string" ? v : ""; }
  function add(rec) {
    var id = str(rec.id);
    if (!id || seen[id]) { return; }
    seen[id] = true;
    var tr = document.createElement("tr");
    tr.setAttribute("data-id", id);
    tr.setAttribute("data-kind", str(rec.kind));
    tr.setAttribute("data-outcome", str(rec.outcome));
    tr.className = "audit-new";
    cols.forEach(function (c) {
      var td = document.createElement("td");
      td.textContent = str(rec[c]);
      if (mono[c]) { td.className = "mono"; }
      tr.appendChild(td);
    });
    var empty = document.getElementById("audit-empty");
    if (empty) { empty.remove(); }
    body.insertBefore(tr, body.firstChild);
  }
  function trim() {
    var rows = body.querySelectorAll("tr");
    for (var i = rows.length - 1; i >= maxRows; i--) { rows[i].remove(); }
  }
  function more(n) {
    var tr = document.createElement("tr"), td = document.createElement("td");
    tr.className = "audit-more";
    td.colSpan = cols.length;
    td.textContent = "More than " + n + " records were written at once; only the first " + n + " are shown here. Reload the page to see them all.";
    tr.appendChild(td);
    body.insertBefore(tr, body.firstChild);
  }
  function start() {
    say("connecting");
    es = new EventSource(body.getAttribute("data-events"));
    es.addEventListener("ready", function () { say("live"); });
    es.addEventListener("rows", function (ev) {
      var recs;
      try { recs = JSON.parse(ev.data); } catch (e) { return; }
      if (!Array.isArray(recs)) { return; }
      recs.forEach(add);
      trim();
    });
    es.addEventListener("more", function (ev) { more(parseInt(ev.data, 10) || 100); });
    es.onerror = function () { say(es && es.readyState === EventSource.CLOSED ? "stopped; reload the page" : "reconnecting"); };
  }
  function stop() {
    if (es) { es.close(); es = null; }
    say("off");
  }
  control.hidden = false;
  box.addEventListener("change", function () { if (box.checked) { start(); } else { stop(); } });
  if (box.checked) { start(); } // kept checked by the browser across a reload
})();
