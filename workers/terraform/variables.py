"""What a template declares, read statically at import time: its `variable` blocks and its README."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import hcl2
from hcl2.utils import SerializationOptions
from lark.exceptions import LarkError

from protocol.provisionerd import TemplateVariable

README_FILE = "README.md"
_README_LIMIT = 1024 * 1024  # a version's readme is shown on a page, not a place for megabytes

HCL_OPTIONS = SerializationOptions(
    with_comments=False,
    explicit_blocks=False,
    # Plain Python strings ("eu-west", not '"eu-west"'), escapes resolved, heredocs as their text.
    strip_string_quotes=True,
    preserve_heredocs=False,
)


class TemplateSyntaxError(ValueError):
    """A template file cannot be parsed; the message names the file and the position."""


def read_variables(workdir: Path) -> list[TemplateVariable]:
    """The `variable` blocks of the *.tf files in `workdir` (not subdirectories: those are modules), by file name.

    As Coder does (terraform-config-inspect): a variable is required when it has no default (or `null`); the
    default is kept as is when it is a string and JSON-encoded otherwise.
    """
    variables: list[TemplateVariable] = []
    for path in sorted(workdir.glob("*.tf")):
        for block in _variable_blocks(path):
            for name, body in block.items():
                variables.append(_variable(name, body if isinstance(body, dict) else {}))
    return variables


def _variable_blocks(path: Path) -> list[dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
        if "variable" not in text:  # parsing a large file takes seconds; one without the word declares none
            return []
        document = hcl2.loads(text, serialization_options=HCL_OPTIONS)
    except UnicodeDecodeError as exc:
        raise TemplateSyntaxError(f"{path.name}: not UTF-8 text ({exc.reason})") from exc
    except (LarkError, ValueError) as exc:
        # Lark's messages end with a long list of expected tokens; the first line has the position.
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TemplateSyntaxError(f"{path.name}: syntax error: {first_line}") from exc
    blocks = document.get("variable", [])
    return [block for block in blocks if isinstance(block, dict)] if isinstance(blocks, list) else []


def _variable(name: str, body: Mapping[str, Any]) -> TemplateVariable:
    default = body.get("default")
    if default is None:
        default_value = ""
    elif isinstance(default, str):
        default_value = default
    else:
        default_value = json.dumps(default, separators=(",", ":"))
    return TemplateVariable(
        name=name,
        type=_type_expression(body.get("type")),
        description=str(body.get("description") or ""),
        default_value=default_value,
        required=default is None,
        sensitive=body.get("sensitive") is True,
    )


def _type_expression(value: Any) -> str:
    """`string` stays `string`; python-hcl2 writes complex type expressions as "${map(string)}"."""
    if value is None:
        return ""
    text = str(value)
    if text.startswith("${") and text.endswith("}"):
        return text[2:-1]
    return text


def required_variables_missing(variables: Sequence[TemplateVariable], values: Mapping[str, str]) -> list[str]:
    """Names of the required variables that `values` does not set, in declaration order."""
    return [variable.name for variable in variables if variable.required and variable.name not in values]


def read_readme(workdir: Path) -> str:
    """The template's README.md (the version's readme), or "" when there is none."""
    path = workdir / README_FILE
    if not path.is_file():
        return ""
    with path.open("rb") as readme:
        return readme.read(_README_LIMIT).decode("utf-8", errors="replace")
