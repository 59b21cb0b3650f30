/* /dashboard/queue: refresh the grouped job list every 5 s (30 s while the tab is hidden) and right
 * after each action (base.js posts the action forms and calls JE.refreshAll). */
(function () {
  "use strict";
  var el = document.getElementById("live");
  if (el) JE.live(el);
})();
