// Boundary: the reader's autoplay sequence and small enhancements. htmx does the rest.
// Without JavaScript every view is a plain link; nothing here is needed to read.
(function () {
  "use strict";
  var STEP_MS = 1600;
  var reduced = window.matchMedia && window.matchMedia("(prefers-reduced-motion: reduce)").matches;

  function Sequence(figure) {
    this.figure = figure;
    this.svgs = figure.querySelectorAll("svg.diagram");  // the wide and the tall drawing
    this.button = figure.querySelector(".seq-toggle");
    this.caption = figure.querySelector(".seq-caption");
    var tpl = figure.querySelector("template.seq-steps");
    this.steps = tpl ? Array.prototype.map.call(tpl.content.querySelectorAll("span"), function (s) {
      return { stage: s.getAttribute("data-stage"), text: s.textContent };
    }) : [];
    this.selected = figure.getAttribute("data-selected");
    this.index = 0;
    this.timer = null;
    this.button.hidden = false;
    var self = this;
    this.button.addEventListener("click", function () { self.playing() ? self.stop() : self.play(false); });
  }
  Sequence.prototype.playing = function () { return this.timer !== null; };
  Sequence.prototype.show = function (stage, text) {
    Array.prototype.forEach.call(this.svgs, function (svg) { svg.setAttribute("data-stage", stage); });
    this.caption.textContent = text;
  };
  // From the first stage when the user asks; on page load, from the selected stage on, so
  // the diagram never highlights a stage other than the one the page is about first.
  Sequence.prototype.play = function (fromSelected) {
    if (this.playing() || !this.steps.length) return;
    var self = this;
    this.index = 0;
    if (fromSelected) {
      for (var i = 0; i < this.steps.length; i++) if (this.steps[i].stage === this.selected) this.index = i;
    }
    this.show(this.steps[this.index].stage, this.steps[this.index].text);
    this.timer = window.setInterval(function () {
      self.index += 1;
      if (self.index >= self.steps.length) { self.stop(); return; }  // brief: one pass, then rest
      self.show(self.steps[self.index].stage, self.steps[self.index].text);
    }, STEP_MS);
    this.sync();
  };
  Sequence.prototype.stop = function () {
    if (this.timer !== null) window.clearInterval(this.timer);
    this.timer = null;
    this.show(this.selected, this.caption.getAttribute("data-default"));
    this.sync();
  };
  Sequence.prototype.sync = function () {
    var on = this.playing();
    this.figure.setAttribute("data-playing", on ? "true" : "false");
    this.button.textContent = on ? "Pause" : "Play";
    this.button.setAttribute("aria-pressed", on ? "true" : "false");
    this.button.setAttribute("aria-label", on ? "Pause the stage sequence" : "Play the stage sequence");
  };

  var current = null;
  function stopOnInteraction(event) {
    if (current && current.playing() && !(event.target && event.target.closest && event.target.closest(".seq-toggle"))) {
      current.stop();
    }
  }
  ["pointerdown", "keydown", "wheel", "touchstart"].forEach(function (type) {
    document.addEventListener(type, stopOnInteraction, { capture: true, passive: true });
  });

  function setUp(autoplay) {
    var figure = document.querySelector("[data-sequence]");
    if (!figure || figure.hasAttribute("data-ready")) return;
    figure.setAttribute("data-ready", "");
    current = new Sequence(figure);
    current.sync();
    if (autoplay && !reduced) current.play(true);
  }

  // The run form under the reader follows the reader's path: when the user picks another
  // path above, the form asks for itself again for that path, keeping what was typed.
  var followed = null;
  function followReader() {
    var reader = document.getElementById("reader");
    var form = document.getElementById("run-form");
    if (!reader) return;
    var path = reader.getAttribute("data-path");
    if (followed === null || followed === path) { followed = path; return; }
    followed = path;
    if (!form || !window.htmx) return;
    var params = new URLSearchParams(new FormData(form));
    params.set("path", path);
    params.delete("shown_path");  // the reader asks; the server may start on a runnable path
    params.delete("target");  // another path's target does not carry over: the server
    params.delete("shown_target");  // starts on one a worker compiles for, if any
    params.delete("token");
    window.htmx.ajax("GET", "/runs/new?" + params.toString(), { target: "#run-form", swap: "outerHTML" });
  }

  // After a swap of the reader, focus moves to the new card's heading (it would otherwise
  // fall to <body>, and the next Tab would start again at the top of the page), and the
  // live region says what is now shown. The first card of a page load is left alone.
  function announceReader(swapped) {
    var reader = document.getElementById("reader");
    if (!reader || reader.hasAttribute("data-seen")) return;
    reader.setAttribute("data-seen", "");
    if (!swapped) return;
    var heading = document.getElementById("card-title");
    var status = document.getElementById("reader-status");
    if (heading) heading.focus({ preventScroll: true });
    if (status && heading) {
      var stage = reader.querySelector('.selector a[aria-current="page"][data-stage]');
      var path = reader.querySelector('.selector a[aria-current="page"][data-path]');
      status.textContent = "Showing " + (path ? path.textContent : "") + ", " +
        (stage ? stage.textContent : "") + " stage: " + heading.textContent;
    }
  }

  document.addEventListener("DOMContentLoaded", function () { setUp(true); followReader(); announceReader(false); });
  document.addEventListener("htmx:after:swap", function () { announceReader(true); });
  // After htmx swaps the reader, the user chose a view: wire the new controls, no autoplay.
  document.addEventListener("htmx:after:swap", function () { setUp(false); followReader(); });
  // A refused submission swaps the form back with each bad field marked: focus goes to the
  // first, where a keyboard or screen-reader user can fix it (else it stays on the gone button).
  document.addEventListener("htmx:after:swap", function () {
    var bad = document.querySelector("#run-form [aria-invalid='true']");
    if (bad && !bad.hasAttribute("data-focused")) {
      bad.setAttribute("data-focused", "");
      bad.focus();
    }
  });
  // A finished run's stream has ended on purpose: do not reconnect to it.
  document.addEventListener("htmx:sse:before:connection", function (event) {
    var el = event.target;
    if (el && el.querySelector && el.querySelector(".progress-panel[data-final]")) event.preventDefault();
  });
})();
// IR view: mark the active artifact tab after a swap (searching is static/ir.js's).
(function () {
  "use strict";
  document.addEventListener("htmx:after:swap", function () {
    var view = document.querySelector(".ir-view");
    if (!view) return;
    var name = view.getAttribute("data-artifact");
    document.querySelectorAll(".tabs a[data-artifact]").forEach(function (a) {
      a.setAttribute("aria-current", a.getAttribute("data-artifact") === name ? "true" : "false");
    });
  });
})();
// Copy buttons (the embed snippet): hidden in the markup, shown only where this script runs,
// so a reader without JavaScript never meets a button that does nothing.
(function () {
  "use strict";
  function reveal() {
    document.querySelectorAll("button[data-copy][hidden]").forEach(function (b) { b.hidden = false; });
  }
  document.addEventListener("DOMContentLoaded", reveal);
  document.addEventListener("htmx:after:swap", reveal);
  document.addEventListener("click", function (event) {
    var button = event.target && event.target.closest ? event.target.closest("button[data-copy]") : null;
    if (!button) return;
    var box = document.getElementById(button.getAttribute("data-copy"));
    var status = document.getElementById(button.getAttribute("data-copy") + "-status");
    if (!box) return;
    function said(text) { if (status) status.textContent = text; }
    var copied = navigator.clipboard && navigator.clipboard.writeText
      ? navigator.clipboard.writeText(box.value)
      : Promise.reject(new Error("no clipboard"));
    copied.then(function () { said("Copied."); }, function () {
      box.focus(); box.select(); said("Selected: press Ctrl+C (or ⌘C) to copy.");
    });
  });
})();
