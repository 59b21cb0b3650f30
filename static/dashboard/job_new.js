/* The create-job form: choosing another type reloads the form generated from that type's schema. */
(function () {
  "use strict";
  var select = document.getElementById("job-type");
  if (!select) return;
  select.addEventListener("change", function () {
    window.location.search = "?type=" + encodeURIComponent(select.value);
  });
})();
