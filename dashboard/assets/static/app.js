// The live overview: fetches api/overview every data-refresh milliseconds and updates
// the figures in place. Text goes in with textContent only, never as markup.
"use strict";
(function () {
  var body = document.body;
  if (body.dataset.page !== "overview") return;
  var every = parseInt(body.dataset.refresh, 10) || 5000;

  function count(n) { return Number(n).toLocaleString("en-US"); }
  function age(sec) {
    sec = Math.max(0, Math.floor(sec));
    if (sec < 60) return sec + "s";
    var m = Math.floor(sec / 60), h = Math.floor(m / 60), d = Math.floor(h / 24);
    if (sec < 3600) return m + "m" + String(sec % 60).padStart(2, "0") + "s";
    if (h < 48) return h + "h" + String(m % 60).padStart(2, "0") + "m";
    return d + "d" + String(h % 24).padStart(2, "0") + "h";
  }
  function stamp(s) {
    var m = /^(\d{4}-\d\d-\d\d)T(\d\d:\d\d:\d\d)(\.\d+)?Z$/.exec(s || "");
    if (!m || m[1] === "0001-01-01") return "-";
    return m[1] + " " + m[2] + ((m[3] || ".") + "000").slice(0, 4) + "Z";
  }
  function set(id, text) { var el = document.getElementById(id); if (el) el.textContent = text; }
  function cell(tr, text, cls) {
    var td = document.createElement("td");
    td.textContent = text;
    if (cls) td.className = cls;
    tr.appendChild(td);
  }
  function instances(list) {
    var tbody = document.querySelector("#instances tbody");
    if (!tbody) return;
    while (tbody.firstChild) tbody.removeChild(tbody.firstChild);
    if (!list.length) {
      var tr = document.createElement("tr");
      tr.className = "none";
      cell(tr, "no live forwarder");
      tr.firstChild.colSpan = 4;
      tbody.appendChild(tr);
      return;
    }
    list.forEach(function (i) {
      var tr = document.createElement("tr");
      cell(tr, i.owner);
      cell(tr, i.member ? "live" : "none");
      cell(tr, String(i.live_lanes), "n");
      cell(tr, stamp(i.lease_until));
      tbody.appendChild(tr);
    });
  }
  // problems lists the parts the last refresh could not read (its own texts, never a
  // database error), in place of the ones the page was rendered with.
  function problems(list) {
    var main = document.querySelector("main");
    document.querySelectorAll("main > p.problem").forEach(function (p) { p.remove(); });
    list.slice().reverse().forEach(function (text) {
      var p = document.createElement("p");
      p.className = "problem";
      p.textContent = text;
      main.insertBefore(p, main.firstChild);
    });
  }
  function apply(o) {
    set("ordered", count(o.ordered));
    set("unordered", count(o.unordered));
    set("waiting", count(o.waiting));
    set("oldest", age(o.oldest_age_seconds));
    var parked = document.querySelector("#parked a");
    if (parked) parked.textContent = count(o.parked);
    set("rate", o.rate.valid ? Math.round(o.rate.drain_per_min) + "/min" : "measuring…");
    instances(o.instances || []);
    problems(o.problems || []);
    set("updated", stamp(o.now));
    set("took", Number(o.read_seconds).toFixed(2));
    body.dataset.refreshed = String((parseInt(body.dataset.refreshed, 10) || 0) + 1);
  }
  function tick() {
    fetch("api/overview", { cache: "no-store", credentials: "same-origin" })
      .then(function (r) { if (!r.ok) throw new Error(r.status); return r.json(); })
      .then(apply)
      .catch(function () { set("updated", "refresh failed; retrying"); })
      .finally(function () { setTimeout(tick, every); });
  }
  setTimeout(tick, every);
})();
