/* The create-job form (plain JS, no framework):
 * - choosing another type reloads the form generated from that type's schema;
 * - the library picker and the input path exclude each other (picking a video clears the path);
 * - the ladder editor: rows of rungs (height, codec, bitrate) with presets, written as JSON into
 *   the ladder textarea the form posts (the textarea is the form without JavaScript). */
(function () {
  "use strict";
  var CODECS = [["", "job's codec"], ["h264", "H.264"], ["hevc", "HEVC"], ["av1", "AV1"]];
  var PRESETS = {
    "Source-capped default": [],
    "HD 1080/720/480": [{ height: 1080 }, { height: 720 }, { height: 480 }],
    "Mobile 480/360/240": [{ height: 480 }, { height: 360 }, { height: 240 }],
    "Mixed codecs 720 HEVC/480/360": [{ height: 720, codec: "hevc" }, { height: 480 }, { height: 360 }],
  };

  var select = document.getElementById("job-type");
  if (!select) return;
  select.addEventListener("change", function () {
    window.location.search = "?type=" + encodeURIComponent(select.value);
  });

  var picker = document.querySelector("[data-picker]");
  var path = document.getElementById("f-input");
  if (picker && path) {
    picker.addEventListener("change", function (event) {
      if (event.target.value) path.value = "";
    });
    path.addEventListener("input", function () {
      if (!path.value) return;
      var none = picker.querySelector('input[value=""]');
      if (none) none.checked = true;
    });
  }

  var json = document.querySelector("[data-ladder-json]");
  var editor = document.querySelector("[data-ladder-editor]");
  if (json && editor) ladderEditor(json, editor);

  function ladderEditor(textarea, box) {
    var rungs = parse(textarea.value);
    if (rungs === null) return; // text that is not a ladder: leave the textarea to show it as typed
    textarea.hidden = true;
    box.hidden = false;
    var table = el("table", "grid compact ladder-rows");
    var empty = el("p", "muted ladder-empty", "No rungs: the default ladder (1080/720/480/360, capped at the source's resolution).");
    var add = button("+ Add rung", function () {
      var last = rungs.length ? rungs[rungs.length - 1].height : 720;
      rungs.push({ height: Math.max(144, Math.round(last / 1.5)) });
      render();
    });
    add.dataset.addRung = "";
    box.append(presetBar(function (preset) { rungs = preset; render(); }), table, empty, add);
    render();

    function render() {
      table.innerHTML = "<thead><tr><th>Height (lines)</th><th>Codec</th><th>Peak bitrate (kbit/s)</th><th></th></tr></thead>";
      var body = el("tbody");
      rungs.forEach(function (rung, i) {
        body.appendChild(rungRow(rung, i, write, function () { rungs.splice(i, 1); render(); }));
      });
      table.appendChild(body);
      table.hidden = !rungs.length;
      empty.hidden = !!rungs.length;
      write();
    }

    function write() {
      textarea.value = rungs.length ? JSON.stringify(rungs.map(clean)) : "";
    }
  }

  // The preset buttons; choosing one hands a fresh copy of its rungs to `choose`.
  function presetBar(choose) {
    var bar = el("div", "ladder-presets");
    bar.appendChild(el("span", "muted", "Presets: "));
    Object.keys(PRESETS).forEach(function (name) {
      var b = button(name, function () {
        choose(PRESETS[name].map(function (r) { return Object.assign({}, r); }));
      });
      b.dataset.preset = name;
      bar.appendChild(b);
    });
    return bar;
  }

  // One rung's row: height, codec and bitrate edit `rung` in place (then `changed`), Remove removes it.
  function rungRow(rung, i, changed, remove) {
    var tr = el("tr");
    tr.dataset.rung = i;
    var label = "Rung " + (i + 1);
    var height = input("number", rung.height, { min: 144, max: 4320, step: 1, "aria-label": label + " height" });
    height.addEventListener("input", function () { rung.height = number(height.value); changed(); });
    var codec = el("select");
    codec.setAttribute("aria-label", label + " codec");
    CODECS.forEach(function (c) {
      var o = el("option", "", c[1]);
      o.value = c[0];
      o.selected = (rung.codec || "") === c[0];
      codec.appendChild(o);
    });
    codec.addEventListener("change", function () { rung.codec = codec.value || undefined; changed(); });
    var rate = input("number", rung.video_bitrate_kbps, { min: 100, max: 100000, step: 1, placeholder: "by height", "aria-label": label + " bitrate" });
    rate.addEventListener("input", function () { rung.video_bitrate_kbps = number(rate.value); changed(); });
    [height, codec, rate, button("Remove", remove)].forEach(function (control) {
      var td = el("td");
      td.appendChild(control);
      tr.appendChild(td);
    });
    return tr;
  }

  // A rung as the params schema takes it: height, and codec and bitrate only when set.
  function clean(r) {
    var out = { height: r.height };
    if (r.codec) out.codec = r.codec;
    if (r.video_bitrate_kbps !== undefined && r.video_bitrate_kbps !== null) out.video_bitrate_kbps = r.video_bitrate_kbps;
    return out;
  }

  function button(text, onClick) {
    var b = el("button", "btn", text);
    b.type = "button";
    b.addEventListener("click", onClick);
    return b;
  }
  function parse(text) {
    if (!text.trim()) return [];
    try {
      var value = JSON.parse(text);
      return Array.isArray(value) && value.every(function (r) { return r && typeof r === "object"; }) ? value : null;
    } catch (e) {
      return null;
    }
  }
  function number(text) {
    return text === "" ? undefined : Number(text);
  }
  function input(type, value, attrs) {
    var i = el("input");
    i.type = type;
    if (value !== undefined && value !== null) i.value = value;
    Object.keys(attrs).forEach(function (k) { i.setAttribute(k, attrs[k]); });
    return i;
  }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text) e.textContent = text;
    return e;
  }
})();
