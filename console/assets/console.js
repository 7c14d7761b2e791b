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
