/* The job page: refresh status, progress, stages, logs and outputs every 2 s until the job has
 * finished; keep each log pane scrolled to its end unless the reader scrolled up. */
(function () {
  "use strict";
  var el = document.getElementById("live");
  if (!el) return;
  var pinned = {};

  function remember() {
    el.querySelectorAll("pre[data-log]").forEach(function (pre, i) {
      pinned[i] = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 8;
    });
  }
  function scroll() {
    el.querySelectorAll("pre[data-log]").forEach(function (pre, i) {
      if (pinned[i] !== false) pre.scrollTop = pre.scrollHeight;
    });
  }
  el.addEventListener("scroll", remember, true);
  scroll();
  JE.live(el, { onUpdate: scroll });
})();
