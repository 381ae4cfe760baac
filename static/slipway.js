// Live logs follow their tail, unless the reader has scrolled up to read something.
(function () {
  var pinned = true;
  document.addEventListener("scroll", function (event) {
    var log = event.target;
    if (log && log.id === "log") {
      pinned = log.scrollHeight - log.scrollTop - log.clientHeight < 40;
    }
  }, true);
  document.addEventListener("htmx:sseMessage", function () {
    var log = document.getElementById("log");
    if (log && pinned) {
      log.scrollTop = log.scrollHeight;
    }
  });
})();

// A form (or the button that submits it) with data-confirm asks before it goes: deleting a key, signing out
// everywhere. (Deleting a workspace has its own page, where its name is typed out.)
// Inline handlers (onclick="return confirm(…)") would need 'unsafe-inline' in the Content-Security-Policy.
document.addEventListener("submit", function (event) {
  var submitter = event.submitter;
  var asker = submitter && submitter.hasAttribute("data-confirm") ? submitter : event.target;
  var question = asker.getAttribute && asker.getAttribute("data-confirm");
  if (question && !window.confirm(question)) {
    event.preventDefault();
  }
});
