"""URL rules that cost little to add to an app: their URL builders compiled on first use, and their parsing done
once per process for all the apps it makes.

Werkzeug compiles two Python functions per rule (``url_for``'s builders, through ``ast`` and ``compile``) when a rule
joins the app's URL map: for our ~1,200 rules that was most of :func:`app.factory.create_app`'s time, paid by every
process start and every test's app, while a request or a page builds a handful of them. Matching is unaffected.

Then it parses each rule's text into the regular expressions it matches with, one regex match per part of the
path: the rest of ``create_app``'s time. A process that makes many apps (the test suite makes one per test, the
benchmarks several) parses the same texts again each time, so the parsed parts are kept per process, keyed by
everything they depend on; each app still gets converters of its own (they belong to its URL map).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from werkzeug.routing import BaseConverter, Map, Rule
from werkzeug.routing.rules import RulePart

Builder = Callable[..., tuple[str, str]]
# (converter name, its positional arguments, its keyword arguments), as the rule's text gives them.
ConverterCall = tuple[str, tuple[Any, ...], Mapping[str, Any]]


@dataclass(frozen=True)
class _Parsed:
    parts: tuple[RulePart, ...]
    trace: tuple[tuple[bool, str], ...]
    converters: tuple[tuple[str, ConverterCall], ...]


_PARSED: dict[tuple[object, ...], _Parsed] = {}


class LazyBuilderRule(Rule):
    def compile(self) -> None:
        if self.map is None:
            raise RuntimeError(f"url rule {self.rule!r} is not bound to a map")
        key = self._parse_key(self.map)
        parsed = _PARSED.get(key)
        if parsed is None:
            calls: dict[str, ConverterCall] = {}
            self._converter_calls = calls
            super().compile()
            del self._converter_calls
            _PARSED[key] = _Parsed(tuple(self._parts), tuple(self._trace), tuple(calls.items()))
            return
        self._parts = list(parsed.parts)
        self._trace = list(parsed.trace)
        self._converters = {
            variable: self.get_converter(variable, name, args, kwargs)
            for variable, (name, args, kwargs) in parsed.converters
        }
        self.arguments.update(self._converters)
        self._build = self._compile_builder(False).__get__(self, None)
        self._build_unknown = self._compile_builder(True).__get__(self, None)

    def _parse_key(self, url_map: Map) -> tuple[object, ...]:
        """All that the parsed parts depend on: the texts, how slashes and hosts are read, which converter class
        each name stands for (an app may register its own)."""
        return (
            self.rule, self.host, self.subdomain, self.merge_slashes, url_map.host_matching,
            tuple(url_map.converters.items()),
        )  # fmt: skip

    def get_converter(
        self, variable_name: str, converter_name: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]
    ) -> BaseConverter:
        calls: dict[str, ConverterCall] | None = getattr(self, "_converter_calls", None)
        if calls is not None:  # parsing for the first time: remember how to make this converter again
            calls[variable_name] = (converter_name, args, kwargs)
        return super().get_converter(variable_name, converter_name, args, kwargs)

    def _compile_builder(self, append_unknown: bool = True) -> Builder:
        compile_builder = super()._compile_builder
        compiled: list[Builder] = []

        # Werkzeug binds what this returns to the rule and calls it with the URL's values as keywords.
        def build(rule: Rule, **values: Any) -> tuple[str, str]:
            if not compiled:  # two threads may both compile it once: the same function, harmlessly
                compiled.append(compile_builder(append_unknown).__get__(rule, None))
            return compiled[0](**values)

        return build
