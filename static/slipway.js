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

// A failed job's log opens at its first error (the line the cause at the top links to), not at its top or tail:
// on load, and when the cause arrives live with the stream's end. Each cause scrolls the log once, so reading
// elsewhere afterwards is left alone.
(function () {
  var shown = null;
  function openAtFirstError() {
    var link = document.querySelector("#job-failure .failure-link");
    var log = document.getElementById("log");
    if (!link || !log) {
      return;
    }
    var target = link.getAttribute("href").split("#")[1];
    var line = target && document.getElementById(target);
    if (!line || !log.contains(line) || shown === target) {
      return;
    }
    shown = target;
    line.classList.add("first-error");
    log.scrollTop += line.getBoundingClientRect().top - log.getBoundingClientRect().top - 24;
  }
  document.addEventListener("DOMContentLoaded", openAtFirstError);
  document.addEventListener("htmx:afterSettle", openAtFirstError);
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

// Copy buttons (templates/_copy.html): copy the <code> beside the button, say so on the button for a moment and in
// the page's status region for screen readers. Without the clipboard API (plain http on another host, or permission
// refused) the text is selected instead, for Ctrl+C.
(function () {
  function announce(message) {
    var status = document.getElementById("copy-status");
    if (status) {
      status.textContent = "";
      // A fresh text node each time, so that saying "Copied" twice is still announced twice.
      window.setTimeout(function () { status.textContent = message; }, 50);
    }
  }
  // The last feedback given, so that a live refresh (the workspace page swaps its body in whenever the workspace
  // changes) that replaces the button within those two seconds shows the same word on the button that took its place.
  var shown = null;
  function paint(button, label, milliseconds) {
    window.clearTimeout(button.slipwayCopyTimer);
    button.textContent = label;
    button.slipwayCopyTimer = window.setTimeout(function () { button.textContent = "Copy"; }, milliseconds);
  }
  function repaintSuccessor(root) {
    var left = shown ? shown.until - Date.now() : 0;
    if (left <= 0 || !root.querySelectorAll) {
      return;
    }
    root.querySelectorAll("button[data-copy]").forEach(function (button) {
      if (button.getAttribute("aria-label") === shown.name) {
        paint(button, shown.label, left);
      }
    });
  }
  function showOnButton(button, label) {
    shown = {name: button.getAttribute("aria-label"), label: label, until: Date.now() + 2000};
    paint(button, label, 2000);
    if (!button.isConnected) {  // swapped out while the clipboard answered
      repaintSuccessor(document);
    }
  }
  document.addEventListener("htmx:load", function (event) { repaintSuccessor(event.target); });
  function selectText(code) {
    var range = document.createRange();
    range.selectNodeContents(code);
    var selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
  }
  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("button[data-copy]");
    var holder = button && button.closest(".copyable");
    var code = holder && holder.querySelector("code");
    if (!code) {
      return;
    }
    var text = code.textContent;
    function fallback() {
      selectText(code);
      showOnButton(button, "Press Ctrl+C");
      announce("Selected: press Ctrl+C to copy.");
    }
    if (!navigator.clipboard || !window.isSecureContext) {
      fallback();
      return;
    }
    navigator.clipboard.writeText(text).then(function () {
      showOnButton(button, "Copied");
      announce("Copied to the clipboard.");
    }, fallback);
  });

  // A secret shown once must not sit unnoticed below the fold: bring it into view with its Copy button focused.
  var once = document.querySelector(".secret-once");
  var copy = once && once.querySelector("button[data-copy]");
  if (once) {
    once.scrollIntoView({block: "center"});
    if (copy) {
      copy.focus({preventScroll: true});
    }
  }
})();

// Relative times (the `ago` and `duration` filters in app/core/templating.py) keep counting while the page stays
// open. The wording here must stay the server's. Swapped-in fragments arrive with fresh text from the server.
window.slipwayRefreshTimes = (function () {
  function ago(seconds) {
    var future = seconds < 0;
    var units = [["day", 86400], ["hour", 3600], ["minute", 60]];
    seconds = Math.abs(seconds);
    for (var i = 0; i < units.length; i++) {
      if (seconds >= units[i][1]) {
        var count = Math.floor(seconds / units[i][1]);
        var amount = count + " " + units[i][0] + (count !== 1 ? "s" : "");
        return future ? "in " + amount : amount + " ago";
      }
    }
    return "just now";
  }
  function duration(seconds) {
    if (seconds < 60) {
      return seconds + "s";
    }
    var rest = seconds % 60;
    return Math.floor(seconds / 60) + "m " + (rest < 10 ? "0" : "") + rest + "s";
  }
  function secondsSince(iso, now) {
    return Math.floor((now - Date.parse(iso)) / 1000);
  }
  function refresh() {
    var now = Date.now();
    document.querySelectorAll("time[data-ago]").forEach(function (element) {
      element.textContent = ago(secondsSince(element.getAttribute("datetime"), now));
    });
    document.querySelectorAll("time[data-since]").forEach(function (element) {
      var seconds = Math.max(0, secondsSince(element.getAttribute("data-since"), now));
      element.textContent = duration(seconds);
      element.setAttribute("datetime", "PT" + seconds + "S");
    });
    document.dispatchEvent(new CustomEvent("slipway:times-refreshed"));
  }
  window.setInterval(refresh, 30000);
  return refresh;
})();
// The top bar's menu button (shown at narrow widths only) opens and closes the navigation.
document.addEventListener("click", function (event) {
  var toggle = event.target.closest && event.target.closest(".nav-toggle");
  if (toggle) {
    var open = toggle.getAttribute("aria-expanded") !== "true";
    toggle.setAttribute("aria-expanded", String(open));
    toggle.closest(".topbar").classList.toggle("menu-open", open);
  }
});

// The create form's preset select: the parameters the chosen preset sets show its values, locked (the server applies
// them whatever is sent), and the others are the person's to choose again.
(function () {
  function applyPreset(select) {
    var option = select.options[select.selectedIndex];
    var values = JSON.parse((option && option.getAttribute("data-parameters")) || "{}");
    var presetName = option ? option.getAttribute("data-name") : "";
    select.form.querySelectorAll("[data-preset-param]").forEach(function (field) {
      var name = field.getAttribute("data-preset-param");
      var set = Object.prototype.hasOwnProperty.call(values, name);
      var holder = field.closest(".parameter-field");
      if (set) { showValue(field, holder ? holder.getAttribute("data-control") : "", values[name]); }
      field.disabled = set;
      var note = holder && holder.querySelector("[data-preset-note]");
      if (note) {
        note.hidden = !set;
        note.textContent = set ? "Set by preset " + presetName + "." : "";
      }
    });
  }
  // A parameter's value (a list's is a JSON array) shown in its control: one of a group's boxes, a tag list's lines.
  function showValue(field, control, value) {
    if (control === "multi-select") { field.checked = listItems(value).indexOf(field.value) >= 0; }
    else if (field.type === "radio") { field.checked = field.value === value; }
    else if (field.type === "checkbox") { field.checked = value === "true"; }
    else if (control === "tag-select") { field.value = listItems(value).join("\n"); }
    else { field.value = value; showSliderValue(field); }
  }
  function listItems(value) {
    try { var items = JSON.parse(value); return Array.isArray(items) ? items.map(String) : []; }
    catch (error) { return []; }
  }
  document.addEventListener("change", function (event) {
    var target = event.target;
    if (target.matches && target.matches("select[data-preset-select]")) { applyPreset(target); }
  });
})();

// A slider (a number parameter's form_type "slider") says its value beside it as it moves.
function showSliderValue(input) {
  var output = input.getAttribute && input.getAttribute("data-shows") && document.getElementById(input.getAttribute("data-shows"));
  if (output) { output.textContent = input.value; }
}
document.addEventListener("input", function (event) { showSliderValue(event.target); });

// A table too wide for the screen scrolls in its box: a box that scrolls is reachable from the keyboard (Tab to it,
// then the arrow keys), named by its table's caption or the heading above it. Checked again as the width or the
// page's content changes.
(function () {
  function markScrollable() {
    document.querySelectorAll(".table-scroll").forEach(function (box) {
      var scrolls = box.scrollWidth > box.clientWidth + 1;
      if (scrolls && !box.hasAttribute("tabindex")) {
        var heading = box.closest("section, .card");
        heading = heading && heading.querySelector("h1, h2, h3");
        box.setAttribute("tabindex", "0");
        box.setAttribute("role", "region");
        box.setAttribute("aria-label", (heading ? heading.textContent.trim() + ": " : "") + "table, scroll with the arrow keys");
      } else if (!scrolls && box.getAttribute("role") === "region") {
        box.removeAttribute("tabindex");
        box.removeAttribute("role");
        box.removeAttribute("aria-label");
      }
    });
  }
  document.addEventListener("DOMContentLoaded", markScrollable);
  document.addEventListener("htmx:afterSettle", markScrollable);
  window.addEventListener("resize", markScrollable);
})();
