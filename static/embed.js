// Tell the embedding page how tall this card is, so it can size the iframe.
(function () {
  "use strict";
  var last = -1;
  function post() {
    var height = Math.ceil(document.documentElement.getBoundingClientRect().height);
    if (height !== last && window.parent && window.parent !== window) {
      last = height;
      window.parent.postMessage({ context: "iframe.resize", height: height }, "*");
    }
  }
  window.addEventListener("load", post);
  if (window.ResizeObserver) new ResizeObserver(post).observe(document.documentElement);
  else window.addEventListener("resize", post);
})();
