"""URL rules whose URL builders are compiled on first use rather than when the app is made.

Werkzeug compiles two Python functions per rule (``url_for``'s builders, through ``ast`` and ``compile``) when a rule
joins the app's URL map: for our ~1,200 rules that is most of :func:`app.factory.create_app`'s time, paid by every
process start and every test's app, while a request or a page builds a handful of them. Matching is unaffected.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from werkzeug.routing import Rule

Builder = Callable[..., tuple[str, str]]


class LazyBuilderRule(Rule):
    def _compile_builder(self, append_unknown: bool = True) -> Builder:
        compile_builder = super()._compile_builder
        compiled: list[Builder] = []

        # Werkzeug binds what this returns to the rule and calls it with the URL's values as keywords.
        def build(rule: Rule, **values: Any) -> tuple[str, str]:
            if not compiled:  # two threads may both compile it once: the same function, harmlessly
                compiled.append(compile_builder(append_unknown).__get__(rule, None))
            return compiled[0](**values)

        return build
