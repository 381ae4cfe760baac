"""axe-core (installed from npm by `make axe-deps`) run in a real browser page: its serious and critical findings."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from playwright.sync_api import Page

AXE = Path(__file__).resolve().parent.parent / "axe" / "node_modules" / "axe-core" / "axe.min.js"
SEVERE = ("serious", "critical")

# WCAG 2.1 A and AA plus axe's best practices (empty table headers are one), over the whole document.
RUN_AXE = """async () => {
  const results = await axe.run(document, {
    runOnly: { type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "best-practice"] },
    resultTypes: ["violations"],
  });
  return results.violations.map((violation) => ({
    id: violation.id,
    impact: violation.impact,
    help: violation.help,
    nodes: violation.nodes.map((node) => ({
      target: node.target.join(" "),
      summary: (node.failureSummary || "").replace(/\\s+/g, " ").slice(0, 300),
    })),
  }));
}"""


@cache
def axe_source() -> str:
    assert AXE.exists(), "make test installs axe-core (make axe-deps)"
    return AXE.read_text()


def severe_violations(page: Page) -> list[str]:
    """Each serious or critical axe-core violation on the page as it is now: rule, what it asks, and where.

    The script is evaluated over the DevTools protocol rather than added as a <script>: the dashboard's strict
    Content-Security-Policy would (rightly) block an inline one, and the page is tested under that very policy."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.evaluate(axe_source() + "\n;0")
    found = []
    for violation in page.evaluate(RUN_AXE):
        if violation["impact"] not in SEVERE:
            continue
        where = "; ".join(f"{node['target']} ({node['summary']})" for node in violation["nodes"][:6])
        more = len(violation["nodes"]) - 6
        found.append(
            f"{violation['impact']} {violation['id']}: {violation['help']} — {where}"
            + (f" and {more} more" if more > 0 else "")
        )
    return found


# What a person can tap or reach with Tab, and when each counts as visible (rendered, with a box).
INTERACTIVE = """
const INTERACTIVE = "a[href], button, input:not([type=hidden]), select, textarea, summary, [tabindex]";
const shown = (element) => {
  const box = element.getBoundingClientRect();
  return box.width > 0 && box.height > 0 && element.checkVisibility({visibilityProperty: true});
};
const describe = (element) => element.tagName.toLowerCase() + (element.id ? "#" + element.id : "")
  + (typeof element.className === "string" && element.className
    ? "." + element.className.trim().replace(/ +/g, ".") : "")
  + ` "${(element.innerText || element.value || element.getAttribute("aria-label") || "").trim().slice(0, 30)}"`;
"""

# Tap targets under 24 by 24 px (WCAG 2.2 target size minimum, 2.5.8), as "what WxH". Exempt, as WCAG exempts them: a
# link inside running text (an inline link with words beside it in its line: text of its own parent, or of the
# nearest block it sits in through inline elements only) and an element that is only focusable by script
# (tabindex -1: the error summary, <main>). A form control is measured together with its label, which toggles or
# focuses it too: a checkbox's target is the box and its words.
SMALL_TARGETS = (
    "() => {"
    + INTERACTIVE
    + """
  const inRunningText = (element) => {
    let node = element;
    for (; getComputedStyle(node).display === "inline" && node.parentElement; node = node.parentElement) {
      const words = [...node.parentElement.childNodes].some(
        (sibling) => sibling !== node && sibling.nodeType === Node.TEXT_NODE && sibling.textContent.trim());
      if (words) return true;
    }
    return false;
  };
  const size = (element) => {
    const boxes = [element, ...(element.labels || [])].filter(shown).map((each) => each.getBoundingClientRect());
    return [Math.max(...boxes.map((box) => box.width)), Math.max(...boxes.map((box) => box.height))];
  };
  return [...document.querySelectorAll(INTERACTIVE)]
    .filter((element) => shown(element) && element.tabIndex >= 0)
    .filter((element) => !(element.tagName === "A" && inRunningText(element)))
    .map((element) => [element, size(element)])
    .filter(([, [width, height]]) => width < 23.5 || height < 23.5)
    .map(([element, [width, height]]) => `${describe(element)} ${Math.round(width)}x${Math.round(height)}`);
}"""
)

# Primary actions (.btn-primary) and status badges that are cut off: outside the window sideways, or outside a box
# that scrolls or hides its overflow (a table scrolling in its card), where nothing says they are there.
CLIPPED_ACTIONS = (
    "() => {"
    + INTERACTIVE
    + """
  const clipped = (element) => {
    const box = element.getBoundingClientRect();
    if (box.left < -0.5 || box.right > window.innerWidth + 0.5) return true;
    for (let outer = element.parentElement; outer && outer !== document.body; outer = outer.parentElement) {
      if (getComputedStyle(outer).overflowX !== "visible") {
        const frame = outer.getBoundingClientRect();
        if (box.left < frame.left - 0.5 || box.right > frame.right + 0.5) return true;
      }
    }
    return false;
  };
  return [...document.querySelectorAll(".btn-primary, .badge")].filter(shown).filter(clipped).map(describe);
}"""
)

# The first stop of Tab in the document's order (no positive tabindex is used): must be the skip link to <main>.
FIRST_TAB_STOP = (
    "() => {"
    + INTERACTIVE
    + """
  const first = [...document.querySelectorAll(INTERACTIVE)].find(
    (element) => element.tabIndex >= 0 && !element.disabled && element.getClientRects().length > 0);
  return first ? describe(first) + " " + (first.getAttribute("href") || "") : "nothing";
}"""
)


# Placeholders that read like values someone typed: as bold as typed text would be, or in its colour.
VALUE_LIKE_PLACEHOLDERS = (
    "() => {"
    + INTERACTIVE
    + """
  return [...document.querySelectorAll("input[placeholder], textarea[placeholder]")].filter(shown).filter((field) => {
    const hint = getComputedStyle(field, "::placeholder");
    return parseFloat(hint.fontWeight) > 400 || hint.color === getComputedStyle(field).color;
  }).map(describe);
}"""
)


def tap_target_problems(page: Page) -> list[str]:
    """What is wrong at the page's width: targets too small, primary actions or badges cut off, no skip link first,
    placeholders that look like values."""
    found = [f"tap target under 24x24 px: {small}" for small in page.evaluate(SMALL_TARGETS)]
    found += [f"placeholder looks like a value: {field}" for field in page.evaluate(VALUE_LIKE_PLACEHOLDERS)]
    found += [f"cut off: {clipped}" for clipped in page.evaluate(CLIPPED_ACTIONS)]
    first = page.evaluate(FIRST_TAB_STOP)
    if first != 'a.skip-link "Skip to content" #main':
        found.append(f"the first Tab stop is {first}, not the skip link")
    return found
