"""Which parameters a template's resource uses, read from the version's own HCL: its block's references to
``data.coder_parameter.<label>``, through the ``locals`` it reads, by the parameter's ``name``.

Read only to explain a failure (app/workspaces/failure_hints.py), so it is an honest approximation: a resource in a
module, or one that also reads other resources, data sources or modules (through which a parameter may reach it),
is reported as not fully known.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from app.catalog.source import version_source
from app.core.errors import DomainError

# A resource's address as Terraform names it in an error: "terraform_data.dotfiles[0]", "docker_container.main".
_ADDRESS = re.compile(r"^(?P<type>[A-Za-z0-9_-]+)\.(?P<name>[A-Za-z0-9_-]+)(\[[^\]]*\])?$")
_PARAMETER = re.compile(r"\bdata\.coder_parameter\.([A-Za-z0-9_-]+)")
_LOCAL = re.compile(r"\blocal\.([A-Za-z0-9_-]+)")
# References through which a parameter's value could also arrive: other resources and data sources, modules.
_OTHER = re.compile(
    r"\b(module\.[A-Za-z0-9_-]+"
    r"|data\.(?!coder_parameter\b|coder_workspace\b|coder_workspace_owner\b)[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+"
    r"|(?<![.\w])[a-z][a-z0-9]*_[a-z0-9_]+\.[A-Za-z0-9_-]+\.)"
)


@dataclass(frozen=True)
class ResourceParameters:
    """The parameter names a resource's block reads; ``complete`` when nothing else it reads could carry one."""

    names: frozenset[str]
    complete: bool


def resource_parameters(file_id: str, address: str) -> ResourceParameters | None:
    """What the resource at ``address`` reads of the version's parameters, or None when its block is not found in
    the root module (a module's resource, an archive that cannot be read or parsed)."""
    match = _ADDRESS.match(address)
    if match is None:
        return None
    documents = _root_documents(file_id)
    blocks = [group.get(match["type"]) for group in _groups(documents, "resource")]
    block = next((found[match["name"]] for found in blocks if isinstance(found, dict) and match["name"] in found), None)
    if not isinstance(block, dict):
        return None
    locals_ = {name: json.dumps(value) for group in _groups(documents, "locals") for name, value in group.items()}
    parameter_names: dict[str, str] = {}
    for group in _groups(documents, "data"):
        declared = group.get("coder_parameter")
        for label, body in (declared if isinstance(declared, dict) else {}).items():
            parameter_names[label] = str(body.get("name") or label) if isinstance(body, dict) else label
    texts, seen, pending = [json.dumps(block)], set[str](), [json.dumps(block)]
    while pending:  # the locals it reads, and theirs
        for name in _LOCAL.findall(pending.pop()):
            if name not in seen and name in locals_:
                seen.add(name)
                texts.append(locals_[name])
                pending.append(locals_[name])
    labels = {label for text in texts for label in _PARAMETER.findall(text)}
    complete = not any(_OTHER.search(text) for text in texts)
    return ResourceParameters(frozenset(parameter_names.get(label, label) for label in labels), complete)


def _groups(documents: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """The blocks of one kind across the documents (python-hcl2 gives each kind as a list of objects)."""
    found = [document.get(key) for document in documents]
    return [group for groups in found if isinstance(groups, list) for group in groups if isinstance(group, dict)]


def _root_documents(file_id: str) -> list[dict[str, Any]]:
    # Imported here: the HCL parser is a tenth of the web server's load time, and only failures need it.
    import hcl2
    from hcl2.utils import SerializationOptions
    from lark.exceptions import LarkError

    options = SerializationOptions(with_comments=False, explicit_blocks=False, strip_string_quotes=True)
    documents = []
    try:
        files = version_source(file_id)
    except DomainError:  # an archive that cannot be read (or is gone) explains nothing
        return []
    for path, source in files.items():
        if "/" in path or not path.endswith(".tf") or source.text is None:
            continue
        try:
            documents.append(hcl2.loads(source.text, serialization_options=options))
        except (LarkError, ValueError, TypeError, AttributeError):
            continue
    return documents
