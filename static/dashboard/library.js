/* /dashboard/library: select-all and a count of the selected assets for the bulk action. The table
 * refreshes slowly (validation and thumbnails land in the background) but never while assets are
 * selected, so a selection is not lost. Action forms are plain posts that lead to the new jobs. */
(function () {
  "use strict";
  var form = document.getElementById("library-form");
  var el = document.getElementById("live");

  function boxes() { return el ? el.querySelectorAll('input[name="asset"]') : []; }
  function selected() { return Array.prototype.filter.call(boxes(), function (b) { return b.checked; }).length; }
  function showCount() {
    var out = document.querySelector("[data-selected-count]");
    if (out) out.textContent = selected() ? selected() + " selected" : "";
  }

  if (form) {
    var all = document.getElementById("select-all");
    if (all) all.addEventListener("change", function () {
      boxes().forEach(function (b) { b.checked = all.checked; });
      showCount();
    });
    form.addEventListener("change", function (e) { if (e.target.name === "asset") showCount(); });
    form.addEventListener("submit", function (e) {
      var bulk = e.submitter && e.submitter.id === "bulk-go";
      if (bulk && !selected()) { e.preventDefault(); JE.flash("Select at least one asset.", "error"); }
    });
  }
  if (el) JE.live(el, { hold: function () { return selected() > 0; } });
})();
