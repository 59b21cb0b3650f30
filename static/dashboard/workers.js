/* /dashboard/workers and /dashboard/workers/<uid>: refresh capacity, samples and active tasks while
 * visible; the drain button is posted by base.js. */
(function () {
  "use strict";
  var el = document.getElementById("live");
  if (el) JE.live(el);
})();
