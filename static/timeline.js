// Boundary: buttons for the trace timeline, around the vendored viewer (speedscope) in its
// frame. Nothing inside the vendored files is changed.
//
// speedscope is driven by its own keyboard shortcuts (1, 2, 3 choose the view; n and p
// step through the threads; + and - zoom, 0 shows the whole trace, the arrows pan), which
// a phone has no keys for. Each button here sends its shortcut to the frame, which this
// server serves (same origin). In the frame, the toolbar's own tabs (cut off at a phone's
// width) and its file, colour and help buttons (the help is on another site) are hidden,
// and so are its emoji icons, which draw as empty boxes where no emoji font is installed;
// the thread's name stays. tests/browser/test_timeline_browser.py fails if a new release
// of speedscope stops answering to these keys or renames its tabs.
(function () {
  "use strict";
  var PICTOGRAPHS = /^[\p{Extended_Pictographic}\uFE0F\u200D\s]+$/u;
  var VIEW_KEYS = { "1": "time-ordered", "2": "left-heavy", "3": "sandwich" };
  var SPEEDSCOPE_TABS = ["Time Order", "Import"];  // one tab of its left group, one of its right
  var attached = new WeakSet();

  // The first element, in document order, whose own text is `text`, or null. The toolbar
  // comes before the chart and the table, so a frame of the same name is never taken.
  function byText(doc, text) {
    var walker = doc.createTreeWalker(doc.body, NodeFilter.SHOW_TEXT);
    for (var node = walker.nextNode(); node; node = walker.nextNode()) {
      if (node.nodeValue.trim() === text) return node.parentElement;
    }
    return null;
  }

  // speedscope's styles are all !important: only an !important inline style beats them.
  function hide(el) {
    el.hidden = true;
    el.style.setProperty("display", "none", "important");
  }

  // Hide what the page's own buttons replace, and every icon that is only an emoji.
  // The toolbar then holds the thread's name alone, on as many lines as it needs.
  function tidy(doc) {
    SPEEDSCOPE_TABS.forEach(function (text) {
      var tab = byText(doc, text), group = tab && tab.parentElement, toolbar = group && group.parentElement;
      if (!group || group.hidden) return;
      hide(group);
      Array.prototype.forEach.call([toolbar].concat(Array.prototype.slice.call(toolbar.children)), function (el) {
        el.style.setProperty("height", "auto", "important");
      });
    });
    Array.prototype.forEach.call(doc.querySelectorAll("span"), function (span) {
      if (!span.hidden && span.children.length === 0 && PICTOGRAPHS.test(span.textContent)) hide(span);
    });
  }

  function Controls(bar, frame) {
    this.bar = bar;
    this.frame = frame;
    this.view = new URLSearchParams((frame.getAttribute("src") || "").split("#")[1] || "").get("view") || "time-ordered";
    var self = this;
    bar.addEventListener("click", function (event) {
      var button = event.target.closest("button[data-key]");
      if (button && !button.disabled) self.send(button.getAttribute("data-event"), button.getAttribute("data-key"));
    });
    frame.addEventListener("load", function () { self.attach(); });
    if (frame.contentDocument && frame.contentDocument.readyState === "complete" &&
        frame.contentWindow.location.href !== "about:blank") this.attach();
    this.show();
    bar.hidden = false;
  }

  // Dispatch one of speedscope's shortcuts in the frame, as if typed there.
  Controls.prototype.send = function (type, key) {
    var win = this.frame.contentWindow;
    if (!win || !win.KeyboardEvent) return;
    win.dispatchEvent(new win.KeyboardEvent(type, { key: key, bubbles: true, cancelable: true }));
  };

  // Mark the view shown; zooming and panning apply to the two flame charts, not the table.
  Controls.prototype.show = function () {
    var view = this.view;
    Array.prototype.forEach.call(this.bar.querySelectorAll("button[data-view]"), function (b) {
      b.setAttribute("aria-pressed", b.getAttribute("data-view") === view ? "true" : "false");
    });
    Array.prototype.forEach.call(this.bar.querySelectorAll("[data-zoom] button"), function (b) {
      b.disabled = view === "sandwich";
    });
  };

  Controls.prototype.attach = function () {
    var doc = this.frame.contentDocument, win = this.frame.contentWindow;
    if (!doc || !doc.body || attached.has(doc)) return;
    attached.add(doc);
    var self = this;
    // The view follows the keys typed in the frame as well as the buttons.
    win.addEventListener("keypress", function (event) {
      if (VIEW_KEYS[event.key]) { self.view = VIEW_KEYS[event.key]; self.show(); }
    });
    var pending = false;
    new win.MutationObserver(function () {
      if (pending) return;
      pending = true;
      win.requestAnimationFrame(function () { pending = false; tidy(doc); });
    }).observe(doc.body, { childList: true, subtree: true });
    tidy(doc);
  };

  function start() {
    var bar = document.querySelector(".timeline-controls");
    var frame = document.querySelector("iframe.timeline");
    if (bar && frame) new Controls(bar, frame);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
