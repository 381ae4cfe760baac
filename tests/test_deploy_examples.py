"""examples/deploy/systemd: no systemd runs here, so these check what can be checked without one — the units parse,
have the sections and keys systemd needs, and every Slipway command, flag and variable they name is one this code
base really has. (The Kubernetes deployment is the Helm charts: tests/test_helm_charts.py.)"""

from __future__ import annotations

import configparser
import shlex
from pathlib import Path

import pytest

from tests.support.slipway_commands import command, known_variables

DEPLOY = Path(__file__).resolve().parent.parent / "examples" / "deploy"


@pytest.mark.parametrize("unit", ["slipway.service", "slipway-provisionerd@.service"])
def test_the_systemd_units_have_their_sections_and_run_real_commands(unit: str) -> None:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # systemd keys are case-sensitive
    parser.read_string((DEPLOY / "systemd" / unit).read_text())
    assert parser.sections() == ["Unit", "Service", "Install"]
    service = parser["Service"]
    assert {"ExecStart", "User", "EnvironmentFile", "Restart"} <= set(service)
    assert parser["Install"]["WantedBy"] == "multi-user.target"
    cmd = command(shlex.split(service["ExecStart"]))
    for assignment in service.get("Environment", "").split():
        name = assignment.partition("=")[0]
        assert name in known_variables(cmd), name
