"""A template version's presets as Coder's API shows them (codersdk.Preset, which Coder serialises without JSON
tags, hence the PascalCase keys), and the lookup of one by the id that API gives it."""

from __future__ import annotations

import uuid

from app.catalog.models import TemplateVersion
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
