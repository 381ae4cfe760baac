"""A Terraform state file read as `terraform show -json` would present it, without running Terraform.

After an apply we need the state as JSON to find the workspace's resources and agents. `terraform show -json`
would start Terraform and every provider once more (a third of a small build's time); the state file already
holds the same facts: each instance's address parts, attributes and recorded dependencies.
"""

from __future__ import annotations

import json
from typing import Any


class StateFormatError(ValueError):
    pass


def state_to_show_json(state: bytes) -> dict[str, Any]:
    """``{"values": {"root_module": {"resources": [...]}}}`` with the fields `terraform show -json` gives."""
    if not state.strip():
        return {}
    try:
        document = json.loads(state)
    except ValueError as exc:
        raise StateFormatError(f"the state file is not JSON: {exc}") from exc
    if not isinstance(document, dict) or document.get("version") != 4:
        raise StateFormatError("only Terraform state format version 4 is understood")
    resources = []
    for resource in document.get("resources") or []:
        module = resource.get("module", "")
        mode = resource.get("mode", "managed")
        base = (
            f"{module + '.' if module else ''}{'data.' if mode == 'data' else ''}{resource['type']}.{resource['name']}"
        )
        for instance in resource.get("instances") or []:
            index = instance.get("index_key")
            resources.append(
                {
                    "address": base + _index_suffix(index),
                    "mode": mode,
                    "type": resource["type"],
                    "name": resource["name"],
                    **({"index": index} if index is not None else {}),
                    "values": instance.get("attributes") or {},
                    "depends_on": instance.get("dependencies") or [],
                }
            )
    return {"values": {"root_module": {"resources": resources}}}


def _index_suffix(index: int | str | None) -> str:
    if index is None:
        return ""
    return f"[{index}]" if isinstance(index, int) else f"[{json.dumps(index)}]"
