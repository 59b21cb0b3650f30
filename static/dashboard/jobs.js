/* /dashboard/jobs: refresh the table every 2 s while it shows unfinished jobs (six times slower once
 * everything shown has finished, and while the tab is hidden); actions are posted by base.js. */
(function () {
  "use strict";
  var el = document.getElementById("live");
  if (el) JE.live(el);
})();
