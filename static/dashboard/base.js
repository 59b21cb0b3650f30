/* JetEncode dashboard: what every page shares. Plain JavaScript, no build step.
 *
 * - JE.live(el): refetch el's data-src (a server-rendered partial) every data-refresh ms while the
 *   tab is visible (six times slower while hidden) and swap each [data-live] section whose data-sig
 *   changed. A refresh waits while the user is typing in the section (or options.hold() says so).
 * - form[data-action]: operator actions are plain forms; here they are posted with fetch
 *   (Accept: application/json), the answer is flashed and the live sections refresh at once.
 * - [data-count-up] / [data-count-down]: seconds that keep ticking between refreshes.
 */
(function () {
  "use strict";

  function fmtDuration(seconds) {
    if (seconds > 0 && seconds < 1) return Math.max(0.1, seconds).toFixed(1) + "s";  // tenths, never "0s"
    seconds = Math.max(0, Math.floor(seconds));
    if (seconds < 60) return seconds + "s";
    var m = Math.floor(seconds / 60), s = seconds % 60;
    if (m < 60) return m + "m " + (s < 10 ? "0" : "") + s + "s";
    var h = Math.floor(m / 60);
    m = m % 60;
    if (h < 48) return h + "h " + (m < 10 ? "0" : "") + m + "m";
    return Math.floor(h / 24) + "d " + (h % 24) + "h";
  }

  function flash(message, kind) {
    var box = document.getElementById("flash");
    if (!box) return;
    var p = document.createElement("p");
    p.className = "msg msg-" + (kind || "success");
    p.textContent = message;
    box.appendChild(p);
    while (box.children.length > 3) box.removeChild(box.firstChild);
    var wait = kind === "error" ? 15000 : 6000;
    setTimeout(function () { p.classList.add("fade"); }, wait);
    setTimeout(function () { if (p.parentNode) p.parentNode.removeChild(p); }, wait + 1000);
  }

  var lives = [];

  function live(el, options) {
    options = options || {};
    var interval = parseInt(el.getAttribute("data-refresh") || "5000", 10);
    var src = el.getAttribute("data-src");
    var timer = null, inflight = false, stopped = false;

    function editing() {
      var a = document.activeElement;
      return a && el.contains(a) && (a.tagName === "INPUT" || a.tagName === "SELECT" || a.tagName === "TEXTAREA");
    }

    function mode() {
      var marker = el.querySelector("[data-poll]");
      return marker ? marker.getAttribute("data-poll") : "fast";
    }

    function schedule() {
      clearTimeout(timer);
      if (stopped) return;
      var m = mode();
      if (m === "stop") { stopped = true; return; }
      var wait = interval * (document.hidden ? 6 : 1) * (m === "slow" ? 6 : 1);
      timer = setTimeout(refresh, wait);
    }

    function swap(html) {
      var doc = new DOMParser().parseFromString(html, "text/html");
      doc.querySelectorAll("[data-live]").forEach(function (fresh) {
        var name = fresh.getAttribute("data-live");
        var current = el.querySelector('[data-live="' + name + '"]');
        if (!current) return;
        var sig = fresh.getAttribute("data-sig");
        if (sig && sig === current.getAttribute("data-sig")) return;
        current.replaceWith(document.importNode(fresh, true));
      });
      if (options.onUpdate) options.onUpdate(el);
    }

    function refresh(force) {
      if (inflight) return Promise.resolve();
      if (!force && (editing() || (options.hold && options.hold()))) { schedule(); return Promise.resolve(); }
      inflight = true;
      return fetch(src, { headers: { "X-Requested-With": "fetch" }, credentials: "same-origin" })
        .then(function (r) {
          if (r.redirected && /\/accounts\/login\//.test(r.url)) { window.location.reload(); return null; }
          return r.ok ? r.text() : null;
        })
        .then(function (html) { if (html) swap(html); })
        .catch(function () { /* the next tick tries again */ })
        .then(function () { inflight = false; schedule(); });
    }

    document.addEventListener("visibilitychange", function () {
      if (!document.hidden && !stopped) refresh();
      else schedule();
    });
    var handle = { refresh: function () { stopped = false; return refresh(true); }, el: el };
    lives.push(handle);
    schedule();
    return handle;
  }

  function refreshAll() {
    return Promise.all(lives.map(function (l) { return l.refresh(); }));
  }

  function post(form, submitter) {
    var body = new FormData(form, submitter || undefined);
    return fetch(form.action, {
      method: "POST",
      body: body,
      credentials: "same-origin",
      headers: { "Accept": "application/json", "X-Requested-With": "fetch" },
    }).then(function (r) {
      if (r.redirected && /\/accounts\/login\//.test(r.url)) {
        window.location.reload();  // the session ended: log in again
        return { ok: false, status: 401, data: { detail: "Your session has ended; log in again." } };
      }
      return r.json().catch(function () { return { detail: "HTTP " + r.status }; })
        .then(function (data) { return { ok: r.ok, status: r.status, data: data }; });
    });
  }

  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!form.matches("form[data-action]")) return;
    event.preventDefault();
    var question = form.getAttribute("data-confirm");
    if (question && !window.confirm(question)) return;
    var submitter = event.submitter;
    form.classList.add("busy");
    post(form, submitter).then(function (res) {
      form.classList.remove("busy");
      flash(res.data.detail || (res.ok ? "Done" : "Failed"), res.ok ? "success" : "error");
      if (res.ok && res.data.redirect) { window.location = res.data.redirect; return; }
      return refreshAll();
    }, function () {
      form.classList.remove("busy");
      flash("The server did not answer; nothing was changed on this page.", "error");
    });
  });

  // Messages the server flashed with the page fade like the ones added here (errors stay longer).
  document.querySelectorAll("#flash .msg").forEach(function (p) {
    var wait = p.classList.contains("msg-error") ? 15000 : 8000;
    setTimeout(function () { p.classList.add("fade"); }, wait);
    setTimeout(function () { if (p.parentNode) p.parentNode.removeChild(p); }, wait + 1000);
  });

  var started = Date.now();
  function tick() {
    var now = Date.now();
    document.querySelectorAll("[data-count-up],[data-count-down]").forEach(function (el) {
      if (!el._t0) el._t0 = now;
      var up = el.hasAttribute("data-count-up");
      var base = parseFloat(el.getAttribute(up ? "data-count-up" : "data-count-down"));
      if (isNaN(base)) return;
      var delta = (now - el._t0) / 1000;
      var value = up ? base + delta : base - delta;
      el.textContent = !up && value <= 0 ? "now" : fmtDuration(value);
    });
  }
  setInterval(tick, 1000);

  window.JE = { live: live, flash: flash, post: post, refreshAll: refreshAll, fmtDuration: fmtDuration, started: started };
})();
