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
