// Schedule forms (the workspace's schedule, the Account page's quiet hours). Without this script they still work:
// the zone stays the server's default and the day shortcuts stay hidden.
(function () {
  // A zone never saved is preset from the browser's own, when the list has it.
  function presetZones(root) {
    var zone = "";
    try {
      zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "";
    } catch (error) {
      return;
    }
    root.querySelectorAll("select[data-browser-zone]").forEach(function (select) {
      select.removeAttribute("data-browser-zone");
      for (var i = 0; i < select.options.length; i++) {
        if (select.options[i].value === zone) {
          select.value = zone;
          return;
        }
      }
    });
  }
  function showShortcuts(root) {
    root.querySelectorAll(".day-shortcuts[hidden]").forEach(function (row) {
      row.hidden = false;
    });
  }
  function ready(root) {
    presetZones(root);
    showShortcuts(root);
  }
  // "Weekdays" and "Every day": tick exactly those days.
  document.addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest("button[data-days]") : null;
    if (!button) {
      return;
    }
    var days = button.getAttribute("data-days").split(",");
    button.closest("fieldset").querySelectorAll("input[name=day]").forEach(function (box) {
      box.checked = days.indexOf(box.value) >= 0;
    });
  });
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", function () { ready(document); });
  } else {
    ready(document);
  }
  // The workspace page refreshes its parts live: a new schedule card is made ready too.
  document.addEventListener("htmx:afterSwap", function (event) { ready(event.target); });
})();
