"""examples/deploy: no cluster or systemd runs here, so these check what can be checked without one — the files
parse, have the fields Kubernetes, KEDA and systemd need, and every Slipway command, flag, variable and queue
they name is one this code base really has."""

from __future__ import annotations

import configparser
import shlex
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from cli.main import cli as slipway
from cli.server import SERVER_FLAGS
from protocol.tags import normalise_tags, queue_name

DEPLOY = Path(__file__).resolve().parent.parent / "examples" / "deploy"


def documents(name: str) -> list[dict[str, Any]]:
    loaded = list(yaml.safe_load_all((DEPLOY / "kubernetes" / name).read_text()))
    assert loaded and all(isinstance(document, dict) for document in loaded)
    for document in loaded:
        assert {"apiVersion", "kind", "metadata"} <= set(document), document
        assert document["metadata"]["name"] and document["metadata"]["namespace"] == "slipway"
    return loaded


def command(args: list[str]) -> click.Command:
    """The click command a `slipway …` command line runs (its sub-commands resolved), checking its flags exist."""
    assert args[0].endswith("slipway"), args
    current: click.Command = slipway
    words = args[1:]
    while isinstance(current, click.Group) and words and not words[0].startswith("-"):
        found = current.get_command(click.Context(current), words[0])
        assert found is not None, f"no command {words[0]!r} in {args}"
        current, words = found, words[1:]
    options = {opt for parameter in current.params for opt in getattr(parameter, "opts", [])}
    flags = [word for word in words if word.startswith("--")]
    assert set(flags) <= options, f"{args}: unknown flags {set(flags) - options}"
    return current


def known_variables(cmd: click.Command) -> set[str]:
    server = {envvar for _, envvar, _ in SERVER_FLAGS}
    own = {parameter.envvar for parameter in cmd.params if isinstance(getattr(parameter, "envvar", None), str)}
    return server | own | {f"{name}_FILE" for name in server}


def container_env(container: dict[str, Any]) -> set[str]:
    return {item["name"] for item in container.get("env", []) if item["name"].startswith("SLIPWAY_")}


def test_the_server_deployment_selects_its_pods_and_runs_a_real_command() -> None:
    by_kind = {document["kind"]: document for document in documents("slipway-server.yaml")}
    assert set(by_kind) == {"Secret", "Deployment", "Service"}
    deployment = by_kind["Deployment"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert by_kind["Service"]["spec"]["selector"].items() <= labels.items()
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    server = command(container["args"])
    assert container_env(container) <= known_variables(server), container_env(container) - known_variables(server)
    secrets = set(by_kind["Secret"]["stringData"])
    for item in container["env"]:
        reference = item.get("valueFrom", {}).get("secretKeyRef")
        assert reference is None or (reference["name"] == "slipway" and reference["key"] in secrets), item


def test_keda_runs_one_run_once_daemon_per_pending_build_of_the_queue_it_reads() -> None:
    (scaled,) = documents("provisionerd-scaledjob.yaml")
    assert scaled["apiVersion"] == "keda.sh/v1alpha1" and scaled["kind"] == "ScaledJob"
    template = scaled["spec"]["jobTargetRef"]["template"]["spec"]
    assert template["restartPolicy"] == "Never"
    (container,) = template["containers"]
    daemon = command(container["args"])
    assert "--once" in container["args"]
    assert container_env(container) <= known_variables(daemon) | {"SLIPWAY_URL"}
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "prometheus"
    # The series the server exports for untagged organisation jobs (app/metrics.py).
    untagged = queue_name(normalise_tags({}))
    assert trigger["metadata"]["query"] == f'sum(slipway_provisioner_queue_depth{{queue="{untagged}"}})'


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
