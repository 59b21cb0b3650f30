/* The overview: refresh counts and charts every 10 s while visible (a minute while hidden). */
(function () {
  "use strict";
  var el = document.getElementById("live");
  if (el) JE.live(el);
})();
