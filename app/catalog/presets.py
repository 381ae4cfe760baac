"""A template version's presets as Coder's API shows them (codersdk.Preset, which Coder serialises without JSON
tags, hence the PascalCase keys), and the lookup of one by the id that API gives it."""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from app.catalog.models import TemplateVersion
from app.core.errors import InvalidInput
from protocol.codec import JsonObject
from protocol.provisionerd import Preset

# Presets have no rows of their own: an id made from the version and the preset's name stays the same across
# requests and releases, and names are unique within a version (the import checks it).
_PRESET_NAMESPACE = uuid.UUID("8d6c5f0e-3f1b-5b7a-9c2e-5e7d1a4b9c30")


def preset_id(version_id: str, name: str) -> str:
    return str(uuid.uuid5(_PRESET_NAMESPACE, f"{version_id}/{name}"))


def preset_json(version: TemplateVersion, preset: Preset) -> JsonObject:
    return {
        "ID": preset_id(version.id, preset.name),
        "Name": preset.name,
        "Parameters": [{"Name": item.name, "Value": item.value} for item in preset.parameters],
        "Default": preset.default,
        "Description": preset.description,
        "Icon": preset.icon,
        "DesiredPrebuildInstances": preset.desired_prebuild_instances,
    }


def find_preset(version: TemplateVersion, wanted_id: str) -> Preset | None:
    return next((p for p in version.presets if preset_id(version.id, p.name) == wanted_id.strip().lower()), None)


def default_preset(version: TemplateVersion) -> Preset | None:
    return next((preset for preset in version.presets if preset.default), None)


PRESET_FIELD = "template_version_preset_id"


def with_preset(version: TemplateVersion, wanted_id: str | None, values: Mapping[str, str]) -> dict[str, str]:
    """The parameter values of a build made with the preset ``wanted_id`` (None: none): the preset's values win
    over what a person gave for the same parameters (Coder locks them), the person's others stay."""
    if not wanted_id:
        return dict(values)
    preset = find_preset(version, wanted_id)
    if preset is None:
        names = ", ".join(p.name for p in version.presets) or "none"
        raise InvalidInput(
            f"Template version {version.name} has no preset with id {wanted_id!r} (its presets: {names}).",
            validations=[{"field": PRESET_FIELD, "detail": "No such preset in this template version."}],
        )
    return {**values, **{item.name: item.value for item in preset.parameters}}
