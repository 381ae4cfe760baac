"""``data "coder_workspace_tags"`` (Coder's dynamic workspace tags), read by the import: the tags each build's job
gets from the workspace's parameter values.

A tag's value may use literals, parameters (``data.coder_parameter.<label>.value``), variables (``var.<name>``)
and locals (``local.<name>``, themselves made of the same), in HCL string templates. The import substitutes
variables and locals and hands the server a template over parameter names (protocol.tags), which the server fills
in for every build before it queues it: no daemon is needed to decide where a build goes. Anything else — a
resource, another data source, a function or a conditional — would need a plan to evaluate: the import fails
naming the tag and the expression.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import hcl2
from lark.exceptions import LarkError

from protocol.tags import literal_tag_part, parameter_tag_part
from workers.terraform.variables import HCL_OPTIONS

_INTERPOLATION = re.compile(r"\$\{([^{}]*)\}")
_PARAMETER = re.compile(r"^data\.coder_parameter\.([A-Za-z_][\w-]*)\.value$")
_VARIABLE = re.compile(r"^var\.([A-Za-z_][\w-]*)$")
_LOCAL = re.compile(r"^local\.([A-Za-z_][\w-]*)$")
ALLOWED = "only parameters (data.coder_parameter.<name>.value), variables, locals and literals may be used"


class WorkspaceTagsError(ValueError):
    pass


def read_workspace_tags(workdir: Path, variables: Mapping[str, str]) -> dict[str, str]:
    """Every ``coder_workspace_tags`` block of the root module, merged (later files win), as tag templates."""
    texts = []
    for path in sorted(workdir.glob("*.tf")):
        try:
            texts.append(path.read_text())
        except (OSError, UnicodeDecodeError):
            continue  # Terraform reports unreadable files itself
    if not any("coder_workspace_tags" in text for text in texts):  # most templates: no need to parse them
        return {}
    documents = []
    for text in texts:
        try:
            documents.append(hcl2.loads(text, serialization_options=HCL_OPTIONS))
        except (LarkError, ValueError):
            continue  # Terraform reports syntax errors itself, with file and line
    blocks = _data_blocks(documents, "coder_workspace_tags")
    if not blocks:
        return {}
    parameters = {label: str(body.get("name", label)) for label, body in _data_blocks(documents, "coder_parameter")}
    locals_ = {name: value for document in documents for block in document.get("locals") or [] for name, value in
               block.items()}  # fmt: skip
    resolver = _Resolver(parameters, dict(variables), locals_)
    tags: dict[str, str] = {}
    for label, body in blocks:
        declared = body.get("tags") or {}
        if not isinstance(declared, dict):
            raise WorkspaceTagsError(f'data "coder_workspace_tags" "{label}": tags must be a map of strings.')
        for key, value in declared.items():
            where = f'data "coder_workspace_tags" "{label}": tag {key!r}'
            tags[str(key)] = resolver.template(value, where)
    return tags


def _data_blocks(documents: list[dict[str, Any]], kind: str) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for document in documents:
        for block in document.get("data") or []:
            for label, body in (block.get(kind) or {}).items():
                found.append((str(label), body if isinstance(body, dict) else {}))
    return found


class _Resolver:
    def __init__(self, parameters: dict[str, str], variables: dict[str, str], locals_: dict[str, Any]) -> None:
        self.parameters, self.variables, self.locals = parameters, variables, locals_

    def template(self, value: object, where: str, depth: int = 0) -> str:
        if isinstance(value, bool | int | float):
            return literal_tag_part(str(value).lower() if isinstance(value, bool) else str(value))
        if not isinstance(value, str):
            raise WorkspaceTagsError(f"{where} = {value!r}: a tag's value must be a string; {ALLOWED}.")
        parts, position = [], 0
        for match in _INTERPOLATION.finditer(value):
            parts.append(literal_tag_part(value[position : match.start()]))
            parts.append(self._reference(match.group(1).strip(), value, where, depth))
            position = match.end()
        rest = value[position:]
        if "${" in rest:
            raise WorkspaceTagsError(
                f"{where} = {value}: functions and nested expressions are not supported; {ALLOWED}."
            )
        parts.append(literal_tag_part(rest))
        return "".join(parts)

    def _reference(self, expression: str, whole: str, where: str, depth: int) -> str:
        if (match := _PARAMETER.match(expression)) is not None:
            label = match.group(1)
            if label not in self.parameters:
                raise WorkspaceTagsError(f'{where} = {whole}: there is no data "coder_parameter" "{label}".')
            return parameter_tag_part(self.parameters[label])
        if (match := _VARIABLE.match(expression)) is not None:
            name = match.group(1)
            if name not in self.variables:
                raise WorkspaceTagsError(f"{where} = {whole}: variable {name!r} has no value.")
            return literal_tag_part(self.variables[name])
        if (match := _LOCAL.match(expression)) is not None:
            name = match.group(1)
            if name not in self.locals or depth > 10:
                raise WorkspaceTagsError(f"{where} = {whole}: there is no local {name!r}.")
            return self.template(self.locals[name], f"{where} (through local.{name})", depth + 1)
        raise WorkspaceTagsError(f"{where} = {whole}: {expression} cannot be used; {ALLOWED}.")
