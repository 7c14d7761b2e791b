// toolbus console: the Copy button of a secret shown once (a new token, a
// generated password). Without script the secret is still on the page,
// to select and copy by hand; the button stays hidden.
"use strict";
(function () {
  if (!navigator.clipboard || !window.isSecureContext) { return; }
  document.querySelectorAll("button[data-copy]").forEach(function (b) {
    var src = document.getElementById(b.getAttribute("data-copy"));
    var state = document.getElementById(b.getAttribute("data-state") || "copy-state");
    if (!src) { return; }
    b.hidden = false;
    b.addEventListener("click", function () {
      navigator.clipboard.writeText(src.textContent.trim()).then(function () {
        if (state) { state.textContent = "Copied."; }
      }, function () {
        if (state) { state.textContent = "Not copied: select the text and copy it."; }
      });
    });
  });
})();
