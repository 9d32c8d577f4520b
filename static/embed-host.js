// Boundary embed host script: paste it beside a Boundary card's <iframe> on your own page.
// It does one thing: each Boundary card in a frame reports how tall it is, and this sets
// that frame's height to match, so the card shows whole without a scroll bar. It listens
// only to frames served from the origin this script came from, sets no cookies and makes
// no requests of its own.
(function () {
  "use strict";
  if (window.__boundaryEmbedHost) return;  // pasted twice: one listener is enough
  window.__boundaryEmbedHost = true;
  var script = document.currentScript;
  var origin = script && script.src ? new URL(script.src, window.location.href).origin : null;

  function frameOf(source) {
    var frames = document.getElementsByTagName("iframe");
    for (var i = 0; i < frames.length; i++) {
      if (frames[i].contentWindow === source) return frames[i];
    }
    return null;
  }

  window.addEventListener("message", function (event) {
    if (origin && event.origin !== origin) return;
    var data = event.data;
    if (!data || data.context !== "iframe.resize" || typeof data.height !== "number") return;
    var frame = frameOf(event.source);
    if (!frame) return;
    var height = Math.max(50, Math.min(50000, Math.ceil(data.height)));
    frame.style.height = height + "px";
    frame.setAttribute("height", String(height));
  });

  // A card that loaded before this script has already reported its height: ask again.
  function ask() {
    var frames = document.getElementsByTagName("iframe");
    for (var i = 0; i < frames.length; i++) {
      var src = frames[i].getAttribute("src") || "";
      if (origin && src.indexOf(origin + "/embed/") === 0 && frames[i].contentWindow) {
        frames[i].contentWindow.postMessage({ context: "iframe.height?" }, "*");  // a question, no data
      }
    }
  }
  ask();
  window.addEventListener("load", ask);
})();
