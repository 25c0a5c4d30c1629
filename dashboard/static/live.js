// live.js: a session page's progress as it goes (server-sent events from
// /sessions/{id}/events). Every value is set as text (textContent), never
// as markup; without it the page shows the progress it was rendered with.
"use strict";
(function () {
  var box = document.getElementById("live");
  if (!box || box.dataset.running !== "true" || typeof EventSource === "undefined") {
    return;
  }
  function set(id, v) {
    var el = document.getElementById(id);
    if (el) {
      el.textContent = String(v);
    }
  }
  var fields = { states: "live-states", unique: "live-unique", depth: "live-depth", findings: "live-findings", seq: "live-seq", line: "live-line", part: "live-part" };
  var src = new EventSource(box.dataset.events);
  set("live-state", "running (live)");
  src.onmessage = function (e) {
    var u;
    try {
      u = JSON.parse(e.data);
    } catch (err) {
      return;
    }
    Object.keys(fields).forEach(function (k) {
      if (u[k] !== undefined) {
        set(fields[k], u[k]);
      }
    });
    if (typeof u.rate === "number") {
      set("live-rate", u.rate.toFixed(1));
    }
    if (typeof u.elapsed_s === "number") {
      set("live-elapsed", u.elapsed_s.toFixed(0));
    }
    if (u.done) {
      set("live-state", "ended (reload for the findings)");
    }
  };
  src.addEventListener("end", function () {
    src.close();
    set("live-state", "ended (reload for the findings)");
  });
  src.onerror = function () {
    if (src.readyState === EventSource.CLOSED) {
      set("live-state", "disconnected (reload)");
    }
  };
})();
