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
