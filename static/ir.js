// IR view: select a source line or an IR line and see its counterpart, in place.
// Without JavaScript the same links reload the page with ?src=..., marked by the server.
(function () {
  "use strict";
  if (window.boundaryIrView) return;
  window.boundaryIrView = true;

  function quote(key) { return window.CSS && CSS.escape ? CSS.escape(key) : key.replace(/"/g, '\\"'); }

  function select(view, key) {
    view.querySelectorAll(".sel").forEach(function (el) { el.classList.remove("sel"); });
    view.setAttribute("data-selected", key || "");
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
    if (!count) return " " + what + ": loading the page of the IR that holds it…";
    return " " + what + ": " + count + " line" + (count === 1 ? "" : "s") + " on this page.";
  }

  // Insert server HTML before `marker` (or at the end of `container`) one chunk per task,
  // so that parsing and styling a long answer never blocks the page for long.
  function insertInSteps(container, marker, html, done) {
    var parts = html.split("<!--chunk-->");
    var i = 0;
    function step() {
      if (i >= parts.length) { if (done) done(); return; }
      if (marker) marker.insertAdjacentHTML("beforebegin", parts[i]);
      else container.insertAdjacentHTML("beforeend", parts[i]);
      i += 1;
      window.setTimeout(step, 0);
    }
    step();
  }

  // The next page of a long artifact loads as its link nears the pane's visible part, in
  // a fetch of its own: only the new lines are parsed, nothing else is re-processed.
  var watching = typeof WeakSet === "function" ? new WeakSet() : null;
  function loadMore(link) {
    if (link.getAttribute("data-loading")) return;
    link.setAttribute("data-loading", "true");
    fetch(link.getAttribute("data-more"), { headers: { "HX-Request": "true" } })
      .then(function (r) { if (!r.ok) throw new Error(r.status); return r.text(); })
      .then(function (html) {
        var view = link.closest(".ir-view");
        insertInSteps(null, link, html, function () {
          link.remove();
          var key = view && view.getAttribute("data-selected");
          if (key) select(view, key);
          watchMore();
        });
      })
      .catch(function () { link.removeAttribute("data-loading"); });  // the link still works
  }
  function watchMore() {
    if (!("IntersectionObserver" in window)) return;
    document.querySelectorAll(".ir-more[data-more]").forEach(function (link) {
      if (watching && watching.has(link)) return;
      if (watching) watching.add(link);
      var pane = link.closest(".ir-scroll");
      var seen = new IntersectionObserver(function (entries) {
        if (entries.some(function (e) { return e.isIntersecting; })) { seen.disconnect(); loadMore(link); }
      }, { root: pane, rootMargin: "600px" });
      seen.observe(link);
    });
  }
  // Search in place: the server filters (the whole text, not just the loaded pages) and
  // only the lines and the status line are replaced. Without JavaScript the form is a GET.
  var searchTimer = null, searchSeq = 0;
  function search(form) {
    var view = form.closest(".ir-view");
    var base = view.getAttribute("data-base");
    var params = new URLSearchParams(new FormData(form));
    if (!params.get("q")) params.delete("q");
    var shown = params.toString();
    params.set("part", "lines");
    var seq = ++searchSeq;
    fetch(base + "?" + params.toString(), { headers: { "HX-Request": "true" } })
      .then(function (r) { if (!r.ok) throw new Error(r.status); return r.text(); })
      .then(function (html) {
        if (seq !== searchSeq) return;  // a later search has been sent: this answer is stale
        var old = view.querySelector(".ir-lines");
        var lines = old.cloneNode(false);
        old.replaceWith(lines);
        view.querySelector(".ir-text .ir-scroll").scrollTop = 0;
        insertInSteps(lines, null, html, function () {
          var fresh = lines.querySelector("template.ir-status-new");
          if (fresh) {
            view.querySelector(".ir-status").replaceChildren(fresh.content.cloneNode(true));
            fresh.remove();
          }
          if (location.pathname === base) history.replaceState(history.state, "", base + (shown ? "?" + shown : ""));
          watchMore();
        });
      })
      .catch(function () { if (seq === searchSeq) form.submit(); });
  }
  document.addEventListener("input", function (event) {
    var box = event.target;
    if (!box.classList || !box.classList.contains("ir-q")) return;
    window.clearTimeout(searchTimer);
    searchTimer = window.setTimeout(function () { search(box.form); }, 250);
  });
  document.addEventListener("submit", function (event) {
    if (!event.target.classList || !event.target.classList.contains("ir-find")) return;
    event.preventDefault();
    window.clearTimeout(searchTimer);
    search(event.target);
  });

  // A page opened on one of its IR lines (#L…, the source links' fragment) shows that line,
  // inside the view's own scrolling pane as well as the page.
  function landOnLine() {
    var id = location.hash.slice(1);
    var line = /^L\d+$/.test(id) ? document.getElementById(id) : null;
    if (line && line.closest(".ir-view")) line.scrollIntoView({ block: "center" });
  }

  document.addEventListener("DOMContentLoaded", landOnLine);
  document.addEventListener("DOMContentLoaded", watchMore);
  document.addEventListener("htmx:after:swap", watchMore);
  if (document.readyState !== "loading") watchMore();

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
      } else if (link) {
        // Not on the pages loaded: the link's page of the IR holds it. `select` has just put
        // the same ?src= in the address, so following the link would only change the
        // fragment and load nothing: load that page outright.
        event.preventDefault();
        var to = new URL(link.href, location.href);
        if (to.pathname + to.search === location.pathname + location.search) {
          history.replaceState(history.state, "", to.href);
          // A reload puts back the old scroll position, away from the line: not this one.
          if ("scrollRestoration" in history) history.scrollRestoration = "manual";
          location.reload();
        } else {
          location.assign(to.href);
        }
      }
    } else {
      if (link) event.preventDefault();
      if (found.source) found.source.scrollIntoView({ block: "nearest" });
    }
  });
})();
