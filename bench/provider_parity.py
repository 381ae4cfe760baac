"""Issue 21: how much of the real coder/coder provider's acceptance tests our Python provider passes.

Reads `provider/*_test.go` of an extracted terraform-provider-coder source tree, takes every test step whose HCL
config is a Go raw-string literal (a step's or a table case's `Config:`), its `ExpectError` regexp and the
attribute expectations that can be read literally from its Check code (`require.Equal(t, "v", attrs["k"])` and
`for key, value := range map[string]...{"k": "v"}` loops), and runs each one through real Terraform with Slipway's
provider from its filesystem mirror (one shared `terraform init`, copied into every case's directory).

A case whose config is built at run time (fmt.Sprintf, string builders, helpers) is counted "not extracted" — never
a pass. Steps of one upstream TestCase run independently here (upstream runs them in sequence on one state).

Run: .venv/bin/python bench/provider_parity.py --upstream DIR [-j 2] [--log parity-failures.log] [--only FILE]
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench._harness import offline_terraform_env, run_terraform  # noqa: E402
from workers.provider_install import install_coder_provider  # noqa: E402
from workers.terraform import TerraformBinary, find_terraform  # noqa: E402

REQUIRED_PROVIDERS = 'terraform {\n  required_providers {\n    coder = { source = "coder/coder" }\n  }\n}\n'
UNKNOWN_TYPE = re.compile(r"Invalid (resource|data source) type|does not support (resource|data source) type")

CAUSE_UNKNOWN = "unknown resource/data source"
CAUSE_ATTRIBUTE = "attribute missing or wrong value"
CAUSE_NOT_RAISED = "expected error not raised"
CAUSE_WORDING = "expected error, different wording"
CAUSE_REJECTED = "error where upstream accepts"


@dataclass
class Case:
    file: str
    name: str
    config: str
    expect_error: str | None
    # address -> attribute (flatmap key) -> expected string
    checks: dict[str, dict[str, str]] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class Outcome:
    case: Case
    cause: str | None  # None: passed
    detail: str = ""


# --- Go source reading -------------------------------------------------------------------------------------------


def _skip_string(source: str, index: int) -> int:
    """The index just past the Go string, rune or raw-string literal starting at `index`."""
    quote = source[index]
    index += 1
    while index < len(source):
        char = source[index]
        if quote != "`" and char == "\\":
            index += 2
            continue
        if char == quote:
            return index + 1
        index += 1
    return index


def _skip_comment(source: str, index: int) -> int:
    if source.startswith("//", index):
        end = source.find("\n", index)
        return len(source) if end < 0 else end
    end = source.find("*/", index + 2)
    return len(source) if end < 0 else end + 2


def _brace_pairs(source: str) -> dict[int, int]:
    """Matching `{`/`}` positions outside strings and comments."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    index = 0
    while index < len(source):
        char = source[index]
        if char in "\"'`":
            index = _skip_string(source, index)
            continue
        if source.startswith(("//", "/*"), index):
            index = _skip_comment(source, index)
            continue
        if char == "{":
            stack.append(index)
        elif char == "}" and stack:
            pairs[stack.pop()] = index
        index += 1
    return pairs


def _enclosing_block(pairs: Mapping[int, int], position: int) -> tuple[int, int]:
    """The innermost `{...}` around `position`."""
    best = (0, 0)
    for start, end in pairs.items():
        if start < position < end and (best == (0, 0) or start > best[0]):
            best = (start, end)
    return best


def go_string(literal: str) -> str | None:
    """The value of one Go string literal (raw or interpreted), or None when it is not one."""
    if len(literal) >= 2 and literal[0] == literal[-1] == "`":
        return literal[1:-1]
    if len(literal) >= 2 and literal[0] == literal[-1] == '"':
        try:
            value = ast.literal_eval(literal)
        except (ValueError, SyntaxError):
            return None
        return value if isinstance(value, str) else None
    return None


GO_STRING = r'(?:`[^`]*`|"(?:[^"\\\n]|\\.)*")'
FUNC = re.compile(r"^func (Test\w+)\(t \*testing\.T\)", re.MULTILINE)
CONFIG = re.compile(r"\b[Cc]onfig:\s*")
EXPECT_ERROR = re.compile(
    r"\b[Ee]xpect[Ee]rror:\s*regexp\.MustCompile\(\s*(" + GO_STRING + r"(?:\s*\+\s*" + GO_STRING + r")*)\s*,?\s*\)"
)
CASE_NAME = re.compile(r"\b[Nn]ame:\s*(" + GO_STRING + ")")
RESOURCE_VARIABLE = re.compile(r"(\w+)\s*:?=\s*state\.Modules\[0\]\.Resources\[\"([^\"]+)\"\]")
RESOURCE_LITERAL = re.compile(r"Resources\[\"([^\"]+)\"\]")
ATTRIBUTES_VARIABLE = re.compile(r"(\w+)\s*:?=\s*(\w+)\.Primary\.Attributes\b")
EQUAL_LITERAL = re.compile(
    r"(?:require|assert)\.Equal\(\s*t,\s*(" + GO_STRING + r")\s*,\s*(\w+)(\.Primary\.Attributes)?\[\"([^\"]+)\"\]\s*\)"
)
EQUAL_LITERAL_REVERSED = re.compile(
    r"(?:require|assert)\.Equal\(\s*t,\s*(\w+)(\.Primary\.Attributes)?\[\"([^\"]+)\"\]\s*,\s*(" + GO_STRING + r")\s*\)"
)
MAP_LOOP = re.compile(r"for\s+\w+,\s*\w+\s*:=\s*range\s+map\[string\](?:string|interface\{\}|any)\{")
MAP_ENTRY = re.compile(r"(" + GO_STRING + r")\s*:\s*(" + GO_STRING + r")\s*,?")
LOOP_TARGET = re.compile(r"(\w+)(\.Primary\.Attributes)?\[\w+\]")
SETENV = re.compile(r"t\.Setenv\(\s*(" + GO_STRING + r")\s*,\s*(" + GO_STRING + r")\s*\)")


def _concatenation(expression: str) -> str | None:
    """The value of `"a" + "b"` made of Go string literals."""
    parts = [go_string(part) for part in re.findall(GO_STRING, expression)]
    return None if None in parts else "".join(part or "" for part in parts)


def _functions(source: str, pairs: Mapping[int, int]) -> Iterator[tuple[str, int, int]]:
    for match in FUNC.finditer(source):
        start = source.index("{", match.end())
        yield match.group(1), start, pairs.get(start, len(source))


def _resolve(name: str, direct: bool, variables: Mapping[str, str], attributes: Mapping[str, str]) -> str | None:
    """The resource address a Go expression `name[...]` / `name.Primary.Attributes[...]` reads from."""
    if direct:
        # A table case's Check gets the driver's one resource as its parameter (`state`): the fallback.
        return variables.get(name) or variables.get("")
    if name in attributes:
        return variables.get(attributes[name], "") or None
    return None


def _conditional(block: str, pairs: Mapping[int, int], position: int) -> bool:
    """Whether `position` is inside an `if`/`else` branch (an expectation that depends on the Go runtime)."""
    start, _ = _enclosing_block(pairs, position)
    line = block[block.rfind("\n", 0, start) + 1 : start].strip()
    return line.startswith(("if ", "} else", "else"))


def _checks(block: str, fallback: str | None) -> dict[str, dict[str, str]]:
    variables = dict(RESOURCE_VARIABLE.findall(block))
    attributes = {attrs: owner for attrs, owner in ATTRIBUTES_VARIABLE.findall(block)}
    # A table case's Check receives the one resource its driver looked up (`state` / `param`): the fallback.
    for owner in set(attributes.values()) - set(variables):
        if fallback:
            variables[owner] = fallback
    if fallback:
        variables[""] = fallback
    checks: dict[str, dict[str, str]] = defaultdict(dict)
    pairs = _brace_pairs(block)
    equalities = [
        (m.group(1), m.group(2), m.group(3), m.group(4))
        for m in EQUAL_LITERAL.finditer(block)
        if not _conditional(block, pairs, m.start())
    ] + [
        (m.group(4), m.group(1), m.group(2), m.group(3))
        for m in EQUAL_LITERAL_REVERSED.finditer(block)
        if not _conditional(block, pairs, m.start())
    ]
    for literal, name, direct, key in equalities:
        address, value = _resolve(name, bool(direct), variables, attributes), go_string(literal)
        if address and value is not None:
            checks[address][key] = value
    _loop_checks(block, variables, attributes, checks)
    return dict(checks)


def _loop_checks(
    block: str, variables: Mapping[str, str], attributes: Mapping[str, str], checks: dict[str, dict[str, str]]
) -> None:
    """Expectations of `for key, value := range map[string]string{"k": "v"} { ...Attributes[key]... }` loops."""
    for loop in MAP_LOOP.finditer(block):
        depth, index = 1, loop.end()
        while index < len(block) and depth:
            if block[index] in '"`':
                index = _skip_string(block, index)
                continue
            depth += {"{": 1, "}": -1}.get(block[index], 0)
            index += 1
        body = block[loop.end() : index - 1]
        target = LOOP_TARGET.search(block, index, index + 400)
        if not target:
            continue
        address = _resolve(target.group(1), bool(target.group(2)), variables, attributes)
        if not address:
            continue
        for key_literal, value_literal in MAP_ENTRY.findall(body):
            key, value = go_string(key_literal), go_string(value_literal)
            if key is not None and value is not None:
                checks.setdefault(address, {})[key] = value


def _environment(source: str, pairs: Mapping[int, int], position: int, start: int, end: int) -> dict[str, str] | None:
    """The `t.Setenv` calls in force at `position` (made before it in a block around it), or None if one of them
    is not literal."""
    env: dict[str, str] = {}
    for call in SETENV.finditer(source, start, position):
        block_start, block_end = _enclosing_block(pairs, call.start())
        if not block_start < position < block_end:
            continue
        key, value = go_string(call.group(1)), go_string(call.group(2))
        if key is None or value is None:
            return None
        env[key] = value
    for call in re.finditer(r"t\.Setenv\(", source[start:position]):
        block_start, block_end = _enclosing_block(pairs, start + call.start())
        if block_start < position < block_end and not SETENV.match(source, start + call.start()):
            return None  # a variable set from a Go expression
    return env


def extract(path: Path) -> tuple[list[Case], int]:
    """The runnable cases of one test file and the number of cases that could not be extracted."""
    source = path.read_text()
    pairs = _brace_pairs(source)
    cases: list[Case] = []
    not_extracted = 0
    for function, start, end in _functions(source, pairs):
        body = source[start:end]
        addresses = set(RESOURCE_LITERAL.findall(body))
        fallback = next(iter(addresses)) if len(addresses) == 1 else None
        dynamic = False
        for number, match in enumerate(CONFIG.finditer(body)):
            literal_start = match.end()
            if body[literal_start] != "`":
                dynamic = True
                continue
            literal_end = _skip_string(body, literal_start)
            if body[literal_end:].lstrip().startswith("+"):
                dynamic = True  # a literal concatenated with run-time values
                continue
            config = body[literal_start + 1 : literal_end - 1]
            env = _environment(source, pairs, start + match.start(), start, end)
            if env is None:
                not_extracted += 1
                continue
            block_start, block_end = _enclosing_block(pairs, start + match.start())
            block = source[block_start : block_end + 1]
            error = EXPECT_ERROR.search(block)
            name_match = CASE_NAME.search(block)
            name = go_string(name_match.group(1)) if name_match else None
            cases.append(
                Case(
                    file=path.name,
                    name=f"{function}/{name or number}",
                    config=config,
                    expect_error=_concatenation(error.group(1)) if error else None,
                    checks=_checks(block, fallback),
                    env=env,
                )
            )
        if dynamic:
            expanded = _table_cases(path.name, function, source, pairs, start, end)
            cases += expanded
            # Cases filled in at run time: count the table's named entries (at least the one test).
            done = sum(1 for case in cases if case.name.startswith(function + "/"))
            not_extracted += max(0 if expanded else 1, len(CASE_NAME.findall(body)) - done)
    return cases, not_extracted


# --- table cases: `for _, c := range cases { config := fmt.Sprintf(`...`, c.field) ... }` ---------------------

LOOP = re.compile(r"for\s+_,\s*(\w+)\s*:=\s*range\s+(\w+)\s*\{")
FIELD = re.compile(
    r"(\w+):\s*(" + GO_STRING + r"|true|false|-?\d+(?:\.\d+)?|nil"
    r"|regexp\.MustCompile\(\s*" + GO_STRING + r"(?:\s*\+\s*" + GO_STRING + r")*\s*,?\s*\))\s*,?\s*(?=\w+:|$)"
)
SPRINTF_CONFIG = re.compile(r"(?:Config:\s*|config\s*:=\s*)fmt\.Sprintf\(\s*(`[^`]*`)\s*((?:,\s*\w+\.\w+\s*)*),?\s*\)")
VERB = re.compile(r"%([sqdtv%])")


def _without_comments(text: str) -> str:
    """Go source lines without their trailing `// ...` comments (a `//` inside a string, as in URLs, stays)."""
    kept = []
    for line in text.splitlines():
        for found in re.finditer(r"(?:^|\s)//", line):
            if line[: found.start()].count('"') % 2 == 0 and "`" not in line[: found.start()]:
                line = line[: found.start()]
                break
        kept.append(line)
    return "\n".join(kept)


UNREADABLE = ("unreadable", None)  # a tuple, which no config expression accepts


def _table_entries(source: str, pairs: Mapping[int, int], table: str, start: int, end: int) -> list[dict[str, Any]]:
    """The entries of `table := []struct{...}{{...}, ...}` in source[start:end]; a field whose value is not a
    literal is left out (a config using it is then not extracted)."""
    definitions = list(re.compile(r"\b" + re.escape(table) + r"\s*:?=\s*\[\]struct\s*\{").finditer(source, start, end))
    if not definitions:
        return []
    definition = definitions[-1]  # the nearest before the loop (subtests reuse the name `cases`)
    struct_end = pairs.get(definition.end() - 1, end)
    list_start = source.find("{", struct_end + 1)
    list_end = pairs.get(list_start, end)
    entries = []
    index = list_start + 1
    while index < list_end:
        if source[index] == "{":
            closing = pairs.get(index, list_end)
            text = " ".join(_without_comments(source[index + 1 : closing]).split())
            # A field set from a Go expression (strings.Repeat, a variable) cannot be read: marked, not dropped.
            entry: dict[str, Any] = dict.fromkeys(re.findall(r"(?:^|,\s*)(\w+):", text), UNREADABLE)
            for name, literal in FIELD.findall(text):
                entry[name] = _literal(literal)
            entries.append(entry)
            index = closing
        index += 1
    return entries


def _literal(text: str) -> Any:
    if text.startswith("regexp."):
        return ("regexp", _concatenation(text))
    if text in ("true", "false"):
        return text == "true"
    if text == "nil":
        return None
    if text[0] in '`"':
        return go_string(text)
    return float(text) if "." in text else int(text)


def _sprintf(template: str, arguments: list[Any]) -> str | None:
    """Go's fmt.Sprintf for the verbs table configs use (%s %q %d %t %v), or None."""
    values = iter(arguments)
    missing = object()

    def verb(match: re.Match[str]) -> str:
        if match.group(1) == "%":
            return "%"
        value = next(values, missing)
        if value is missing or value is None or isinstance(value, tuple):
            raise ValueError(match.group(0))
        if match.group(1) == "q":
            return json.dumps(str(value))
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)

    try:
        text = VERB.sub(verb, template)
    except ValueError:
        return None
    return text if next(values, missing) is missing else None


def _table_cases(file: str, function: str, source: str, pairs: Mapping[int, int], start: int, end: int) -> list[Case]:
    cases: list[Case] = []
    for loop in LOOP.finditer(source, start, end):
        variable, table = loop.groups()
        body_end = pairs.get(loop.end() - 1, end)
        body = source[loop.end() : body_end]
        config_at = re.search(r"\bConfig:\s*", body)
        env = _environment(source, pairs, loop.start(), start, end)
        if config_at is None or env is None or body.startswith(variable + ".", config_at.end()):
            continue  # (a table of literal configs was read as literals above)
        fixed_error = EXPECT_ERROR.search(body)
        error_field = re.search(r"ExpectError:\s*" + re.escape(variable) + r"\.(\w+)", body)
        for number, entry in enumerate(_table_entries(source, pairs, table, start, loop.start())):
            scope = _GoScope(body, variable, entry)
            scope.run()
            config = scope.expression(config_at.end())
            if not isinstance(config, str):
                continue
            error = _concatenation(fixed_error.group(1)) if fixed_error else None
            if error_field:
                value = entry.get(error_field.group(1))
                if value is UNREADABLE:
                    continue
                error = value[1] if isinstance(value, tuple) else None
            name = entry.get("name") or entry.get("Name") or number
            checks = _entry_checks(body, variable, entry) if error is None else {}
            case = Case(file=file, name=f"{function}/{name}", config=config, expect_error=error, env=env, checks=checks)
            cases.append(case)
    return cases


class _GoScope:
    """Just enough Go to build a table case's config: string assignments (`:=`, `=`, `+=`) of literals,
    `fmt.Sprintf` and table fields, under `if c.field != ""`-style conditions, read until the first statement it
    does not understand. A value it cannot work out is None (the case is then not extracted)."""

    STATEMENT = re.compile(r"\s*(?://[^\n]*\n\s*)*")
    ASSIGN = re.compile(r"(\w+)\s*(:=|\+=|=)\s*")
    CONDITION = re.compile(r"if\s+(!?)(\w+)\.(\w+)\s*(?:(==|!=)\s*(\"\"|nil|true|false))?\s*\{")

    def __init__(self, body: str, variable: str, entry: Mapping[str, Any]) -> None:
        self.body, self.variable, self.entry = body, variable, entry
        self.values: dict[str, Any] = {}
        self.pairs = _brace_pairs(body)

    def run(self) -> None:
        index = 0
        while index < len(self.body):
            index = self.STATEMENT.match(self.body, index).end()  # type: ignore[union-attr]
            if self.body.startswith("}", index):
                index += 1
                continue
            simple = re.match(r"(\w+ := \w+\n|t\.Parallel\(\)|t\.Run\([^{]*\{)", self.body[index:])
            if simple:
                index += simple.end()
                continue
            condition = self.CONDITION.match(self.body, index)
            if condition:
                block_end = self.pairs.get(condition.end() - 1, len(self.body))
                holds = self._holds(condition)
                if holds is None:
                    return
                index = condition.end() if holds else block_end + 1
                continue
            assign = self.ASSIGN.match(self.body, index)
            if not assign or assign.group(1) in ("checkFn",):
                return
            value, index = self._expression(assign.end())
            name, operator = assign.group(1), assign.group(2)
            if operator == "+=":
                before = self.values.get(name)
                value = before + value if isinstance(before, str) and isinstance(value, str) else None
            self.values[name] = value
            if index < 0:
                return

    def _holds(self, condition: re.Match[str]) -> bool | None:
        negate, owner, field, operator, literal = condition.groups()
        if owner != self.variable:
            return None
        value = self.entry.get(field, "" if literal == '""' else None)
        if value is UNREADABLE:
            return None
        if operator is None:
            truth = bool(value)
            return not truth if negate else truth
        target = {'""': "", "nil": None, "true": True, "false": False}[literal]
        if isinstance(value, tuple):
            value = value[1]
        return bool((value == target) == (operator == "=="))

    def expression(self, index: int) -> Any:
        return self._expression(index)[0]

    def _expression(self, index: int) -> tuple[Any, int]:
        """The value of the expression at `index` and where it ends (-1: not understood)."""
        literal = re.compile(GO_STRING).match(self.body, index)
        if literal:
            return go_string(literal.group(0)), literal.end()
        sprintf = re.compile(r"fmt\.Sprintf\(\s*(" + GO_STRING + r")((?:\s*,\s*[\w.]+)*)\s*,?\s*\)").match(
            self.body, index
        )
        if sprintf:
            arguments = [self._name(part.strip()) for part in sprintf.group(2).split(",") if part.strip()]
            return _sprintf(go_string(sprintf.group(1)) or "", arguments), sprintf.end()
        name = re.compile(r"[\w.]+").match(self.body, index)
        if name:
            return self._name(name.group(0)), name.end()
        return None, -1

    def _name(self, name: str) -> Any:
        if name.startswith(self.variable + "."):
            return self.entry.get(name.split(".", 1)[1], "")  # a left-out field is Go's zero value
        return self.values.get(name)


def _entry_checks(body: str, variable: str, entry: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """`value := resource.Primary.Attributes["k"]; require.Equal(t, c.expectValue, value)` in a table loop."""
    addresses = set(RESOURCE_LITERAL.findall(body))
    if len(addresses) != 1:
        return {}
    locals_ = dict(re.findall(r"(\w+)\s*:=\s*\w+\.Primary\.Attributes\[\"([^\"]+)\"\]", body))
    expected: dict[str, str] = {}
    pattern = r"require\.Equal\(\s*t,\s*" + re.escape(variable) + r"\.(\w+),\s*(\w+)\s*\)"
    for field_name, local in re.findall(pattern, body):
        value = entry.get(field_name, "")
        if local in locals_ and isinstance(value, str):
            expected[locals_[local]] = value
    return {next(iter(addresses)): expected} if expected else {}


# --- running ---------------------------------------------------------------------------------------------------


def flatmap(values: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """A resource's `show -json` values as the SDK's flat state attributes (`option.0.name`, `option.#`)."""
    flat: dict[str, str] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if value is None:
            continue
        if isinstance(value, bool):
            flat[name] = "true" if value else "false"
        elif isinstance(value, int | float):
            flat[name] = str(int(value)) if float(value).is_integer() else repr(value)
        elif isinstance(value, str):
            flat[name] = value
        elif isinstance(value, list):
            flat[f"{name}.#"] = str(len(value))
            for index, item in enumerate(value):
                if isinstance(item, dict):
                    flat.update(flatmap(item, f"{name}.{index}."))
                else:
                    flat.update(flatmap({str(index): item}, f"{name}."))
        elif isinstance(value, dict):
            flat[f"{name}.%"] = str(len(value))
            flat.update(flatmap(value, f"{name}."))
    return flat


def state_resources(document: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    found: dict[str, dict[str, str]] = {}
    module = document.get("values", {}).get("root_module", {})
    for resource in module.get("resources", []):
        found[resource["address"]] = flatmap(resource.get("values", {}))
    return found


def _go_regexp(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern.replace("(?s)", "").replace("\\z", "\\Z"), re.DOTALL)


class Runner:
    def __init__(self, terraform: TerraformBinary, cli_config: Path, work: Path) -> None:
        self.terraform = terraform
        self.work = work
        self.env = offline_terraform_env(cli_config)
        self.shared = work / "shared-init"
        self.shared.mkdir()
        (self.shared / "main.tf").write_text(REQUIRED_PROVIDERS)
        result = self._run(self.shared, self.env, "init", "-input=false")
        if result.returncode:
            raise SystemExit(f"terraform init failed:\n{result.stdout}{result.stderr}")

    def _run(self, directory: Path, env: dict[str, str], *arguments: str) -> subprocess.CompletedProcess[str]:
        return run_terraform(self.terraform, directory, env, *arguments, timeout=300)

    def run(self, number: int, case: Case) -> Outcome:
        directory = self.work / f"case-{number:04d}"
        directory.mkdir()
        try:
            return self._run_case(directory, case)
        finally:
            shutil.rmtree(directory, ignore_errors=True)

    def _run_case(self, directory: Path, case: Case) -> Outcome:
        shutil.copytree(self.shared / ".terraform", directory / ".terraform", symlinks=True)
        shutil.copy(self.shared / ".terraform.lock.hcl", directory / ".terraform.lock.hcl")
        has_terraform_block = re.search(r"^\s*terraform\s*\{", case.config, re.MULTILINE)
        (directory / "main.tf").write_text(("" if has_terraform_block else REQUIRED_PROVIDERS) + case.config)
        env = {**self.env, **case.env}
        output = ""
        failed = False
        for arguments in (("plan", "-input=false", "-out=tfplan"), ("apply", "-input=false", "tfplan")):
            result = self._run(directory, env, *arguments)
            output += result.stdout + result.stderr
            if result.returncode:
                failed = True
                break
        if case.expect_error is not None:
            if not failed:
                return Outcome(case, CAUSE_NOT_RAISED, f"expected /{case.expect_error}/; terraform succeeded")
            pattern = _go_regexp(case.expect_error)
            folded = " ".join(output.split())
            if pattern.search(output) or _go_regexp(" ".join(case.expect_error.split())).search(folded):
                return Outcome(case, None)
            cause = CAUSE_UNKNOWN if UNKNOWN_TYPE.search(output) else CAUSE_WORDING
            return Outcome(case, cause, f"expected /{case.expect_error}/; got:\n{_errors(output)}")
        if failed:
            cause = CAUSE_UNKNOWN if UNKNOWN_TYPE.search(output) else CAUSE_REJECTED
            return Outcome(case, cause, _errors(output))
        shown = self._run(directory, env, "show", "-json")
        resources = state_resources(json.loads(shown.stdout or "{}"))
        wrong = []
        for address, expected in case.checks.items():
            got = resources.get(address, {})
            for key, value in expected.items():
                if got.get(key, "") != value:
                    wrong.append(f"{address}.{key}: expected {value!r}, got {got.get(key)!r}")
        if wrong:
            return Outcome(case, CAUSE_ATTRIBUTE, "\n".join(wrong))
        return Outcome(case, None)


def _errors(output: str) -> str:
    start = output.find("Error:")
    return (output[start:] if start >= 0 else output)[-3000:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--upstream", type=Path, required=True, help="extracted terraform-provider-coder source")
    parser.add_argument("-j", "--jobs", type=int, default=2)
    parser.add_argument("--log", type=Path, default=Path("parity-failures.log"))
    parser.add_argument("--only", action="append", default=[], help="test file name(s) to run, e.g. app_test.go")
    parser.add_argument("--terraform", default=shutil.which("terraform"))
    options = parser.parse_args()

    cases: list[Case] = []
    not_extracted: Counter[str] = Counter()
    for path in sorted((options.upstream / "provider").glob("*_test.go")):
        if options.only and path.name not in options.only:
            continue
        found, skipped = extract(path)
        cases += found
        not_extracted[path.name] += skipped

    with tempfile.TemporaryDirectory(prefix="parity-") as temporary:
        work = Path(temporary)
        runner = Runner(find_terraform(options.terraform), install_coder_provider(work / "cache"), work)
        with ThreadPoolExecutor(max_workers=options.jobs) as pool:
            outcomes = list(pool.map(runner.run, range(len(cases)), cases))

    per_file: dict[str, Counter[str]] = defaultdict(Counter)
    causes: Counter[str] = Counter()
    for outcome in outcomes:
        per_file[outcome.case.file]["passed" if outcome.cause is None else "failed"] += 1
        if outcome.cause:
            causes[outcome.cause] += 1
    passed = sum(1 for outcome in outcomes if outcome.cause is None)
    unchecked = sum(1 for o in outcomes if o.cause is None and o.case.expect_error is None and not o.case.checks)
    total = len(outcomes) + sum(not_extracted.values())
    print(
        f"passed {passed} / failed {len(outcomes) - passed} / not extracted {sum(not_extracted.values())}"
        f" (of {total}; {unchecked} passes had no readable attribute check: apply succeeded)"
    )
    for name in sorted(set(per_file) | set(not_extracted)):
        counts = per_file[name]
        tally = f"passed {counts['passed']:3}  failed {counts['failed']:3}  not extracted {not_extracted[name]:3}"
        print(f"  {name:28} {tally}")
    print("failures by cause:")
    for cause, count in causes.most_common():
        print(f"  {cause:36} {count}")
    with options.log.open("w") as log:
        for outcome in outcomes:
            if outcome.cause:
                log.write(f"=== {outcome.case.file} {outcome.case.name} [{outcome.cause}]\n{outcome.detail}\n\n")
    print(f"failures written to {options.log}")


if __name__ == "__main__":
    main()
