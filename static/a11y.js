// Accessibility helpers for every page (tests/test_browser_csp.py checks them at 390 px). A file of its own, loaded by
// templates/base.html: the Content-Security-Policy allows no inline script.

// Tables become stacked cards at phone widths (static/slipway.css, "Tables at phone width"): each cell shows its
// column's name before it, from the attribute data-label that is filled here from the table's header row. The header
// cells stay the one source of the names (a template need not repeat them), and the table keeps its semantics for
// screen readers. A cell whose column has no visible name (the actions column's header is visually hidden) gets none.
// Rows that arrive later (htmx swaps, live updates) are named as they settle.
(function () {
  function columnNames(table) {
    var row = table.tHead && table.tHead.rows[0];
    var names = [];
    if (!row) {
      return names;
    }
    Array.prototype.forEach.call(row.cells, function (cell) {
      var copy = cell.cloneNode(true);
      copy.querySelectorAll(".visually-hidden").forEach(function (hidden) { hidden.remove(); });
      var name = copy.textContent.replace(/[↑↓]/g, "").replace(/\s+/g, " ").trim();
      for (var span = 0; span < (cell.colSpan || 1); span++) {
        names.push(name);
      }
    });
    return names;
  }
  function labelCells(root) {
    var scope = root && root.querySelectorAll ? root : document;
    var tables = Array.prototype.slice.call(scope.querySelectorAll("table.table"));
    var outer = scope.closest && scope.closest("table.table");
    if (outer) {
      tables.push(outer);  // rows swapped into a table's body
    }
    tables.forEach(function (table) {
      var names = columnNames(table);
      Array.prototype.forEach.call(table.tBodies, function (body) {
        Array.prototype.forEach.call(body.rows, function (row) {
          var column = 0;
          Array.prototype.forEach.call(row.cells, function (cell) {
            var name = names[column];
            // A cell across several columns (a list's "nothing yet" line) is no one column's value: no name.
            if (name && (cell.colSpan || 1) === 1 && !cell.hasAttribute("data-label")) {
              cell.setAttribute("data-label", name);
            }
            column += cell.colSpan || 1;
          });
        });
      });
    });
  }
  document.addEventListener("DOMContentLoaded", function () { labelCells(document); });
  document.addEventListener("htmx:afterSettle", function (event) { labelCells(event.target); });
})();

// A form refused by the server comes back with its error summary (templates/workspaces/_partials/parameter_fields.html
// error_summary, or any error flash with tabindex="-1"): focus goes there, not to the top of the page, so that a
// keyboard or screen-reader user starts at what went wrong. Each error's link then takes focus to its field (a link
// to an id only scrolls; a group's link focuses its first choice).
(function () {
  var SUMMARY = ".form-errors[tabindex], .flash-error[tabindex='-1']";
  function focusSummary(root) {
    var summary = (root && root.querySelector ? root : document).querySelector(SUMMARY);
    if (summary) {
      summary.focus();
    }
  }
  document.addEventListener("DOMContentLoaded", function () { focusSummary(document); });
  document.addEventListener("htmx:afterSettle", function (event) {
    var sent = event.detail && event.detail.requestConfig;
    if (sent && sent.verb && sent.verb !== "get") {  // a form's answer, not a live update
      focusSummary(event.target);
    }
  });
  document.addEventListener("click", function (event) {
    var link = event.target.closest && event.target.closest(".form-errors a[href^='#']");
    var target = link && document.getElementById(decodeURIComponent(link.getAttribute("href").slice(1)));
    if (!target) {
      return;
    }
    var field = target.matches("input, select, textarea, button") ? target
      : target.querySelector("input:not([type=hidden]), select, textarea");
    if (field) {
      event.preventDefault();
      (target.closest("label, fieldset") || field).scrollIntoView({block: "center"});
      field.focus({preventScroll: true});
    }
  });
})();
