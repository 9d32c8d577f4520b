// IR view: select a source line or an IR line and see its counterpart, in place.
// Without JavaScript the same links reload the page with ?src=..., marked by the server.
(function () {
  "use strict";
  if (window.boundaryIrView) return;
  window.boundaryIrView = true;

  function quote(key) { return window.CSS && CSS.escape ? CSS.escape(key) : key.replace(/"/g, '\\"'); }

  function select(view, key) {
    view.querySelectorAll(".sel").forEach(function (el) { el.classList.remove("sel"); });
    if (!key) return { ir: null, source: null };
    var matches = view.querySelectorAll('[data-src="' + quote(key) + '"]');
    var ir = null, source = null;
    for (var i = 0; i < matches.length; i++) {
      matches[i].classList.add("sel");
      if (!ir && matches[i].classList.contains("l")) ir = matches[i];
      if (!source && matches[i].classList.contains("sl")) source = matches[i];
    }
    var picked = view.querySelector(".ir-picked");
    if (picked) picked.textContent = describe(key, view.querySelectorAll('.l[data-src="' + quote(key) + '"]').length);
    if (location.pathname === view.getAttribute("data-base")) {
      var url = new URL(location.href);
      url.searchParams.set("src", key);
      history.replaceState(history.state, "", url.pathname + url.search);
    }
    return { ir: ir, source: source };
  }

  function describe(key, count) {
    var what = key.indexOf(":") === -1 ? "Source line " + key : key;
    return " " + what + ": " + count + " line" + (count === 1 ? "" : "s") + " on this page.";
  }

  document.addEventListener("click", function (event) {
    if (event.defaultPrevented || event.button !== 0 || event.ctrlKey || event.metaKey || event.shiftKey || event.altKey) return;
    var target = event.target;
    if (!target.closest) return;
    var row = target.closest(".ir-view [data-src]");
    if (!row) return;
    var link = target.closest("a");
    if (link && link.classList.contains("n") && row.classList.contains("l")) return;  // a line's own anchor
    var view = row.closest(".ir-view");
    var key = row.getAttribute("data-src");
    var found = select(view, key);
    if (row.classList.contains("sl")) {
      if (found.ir) {
        event.preventDefault();
        found.ir.scrollIntoView({ block: "nearest" });
      }  // else: the link opens the page of the IR that holds it
    } else {
      if (link) event.preventDefault();
      if (found.source) found.source.scrollIntoView({ block: "nearest" });
    }
  });
})();
