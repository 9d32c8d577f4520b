// Tell the embedding page how tall this card is, so it can size the iframe (the host
// script /static/embed-host.js does that). The page may ask again ("iframe.height?") when
// its script loaded after this card.
(function () {
  "use strict";
  var last = -1;
  function post(force) {
    var height = Math.ceil(document.documentElement.getBoundingClientRect().height);
    if ((force || height !== last) && window.parent && window.parent !== window) {
      last = height;
      window.parent.postMessage({ context: "iframe.resize", height: height }, "*");
    }
  }
  window.addEventListener("load", function () { post(false); });
  window.addEventListener("message", function (event) {
    if (event.source === window.parent && event.data && event.data.context === "iframe.height?") post(true);
  });
  if (window.ResizeObserver) new ResizeObserver(function () { post(false); }).observe(document.documentElement);
  else window.addEventListener("resize", function () { post(false); });
})();
