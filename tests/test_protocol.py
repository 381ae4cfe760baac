"""protocol/: every message reads back what it wrote, and malformed input is refused naming the field."""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil

import pytest

import protocol
from protocol.agentapi import Dial, Manifest
from protocol.codec import Message, ProtocolError, decode_list, loads
from protocol.logs import LogLine
from protocol.provisionerd import AcquiredJob, BuildJob, BuildMetadata, JobFailure, LogBatch, NameValue
from protocol.resources import Agent, App, Healthcheck, Resource, Script
from protocol.values import parse_decimal, parse_duration, parse_int


def all_messages() -> list[type[Message]]:
    found: set[type[Message]] = set()
    for module in pkgutil.iter_modules(protocol.__path__):
        loaded = importlib.import_module(f"protocol.{module.name}")
        found |= {
            value
            for value in vars(loaded).values()
            if inspect.isclass(value) and issubclass(value, Message) and value is not Message
        }
    return sorted(found, key=lambda cls: cls.__qualname__)


@pytest.mark.parametrize("message", all_messages(), ids=lambda cls: cls.__qualname__)
def test_every_message_type_can_be_declared_and_read(message: type[Message]) -> None:
    """Each field's annotation is one the codec reads (a bad one would only fail at the first real message)."""
    try:
        instance = message.from_json({})
    except ProtocolError as exc:  # a required field: its error names it
        assert exc.problem == "this field is required"
        return
    assert message.from_json(json.loads(instance.dumps())) == instance


def test_a_build_job_round_trips_through_json() -> None:
    job = AcquiredJob(
        id="j1",
        type="workspace_build",
        tags={"scope": "organization", "owner": ""},
        access_url="http://127.0.0.1:3000",
        workspace_build=BuildJob(
            workspace_build_id="b1",
            transition="start",
            archive=b"\x00tar bytes\xff",
            state=b'{"version": 4}',
            parameters=(NameValue(name="region", value="eu"),),
            metadata=BuildMetadata(
                workspace_name="w",
                workspace_id="w1",
                workspace_build_id="b1",
                owner_name="carol",
                owner_id="u1",
                owner_email="carol@example.com",
            ),
            agent_scripts={"linux_amd64": "#!/bin/sh"},
        ),
    )
    wire = job.dumps()
    assert AcquiredJob.loads(wire) == job
    assert json.loads(wire)["workspace_build"]["archive"] == "AHRhciBieXRlc/8="  # bytes travel as base64


def test_resources_round_trip_with_their_agents() -> None:
    resource = Resource(
        name="dev",
        type="terraform_data",
        kind="computational",
        agents=(
            Agent(
                name="main",
                env={"A": "1"},
                apps=(App(slug="web", healthcheck=Healthcheck(url="http://localhost/h")),),
                scripts=(Script(display_name="Startup", run_on_start=True),),
            ),
        ),
    )
    assert Resource.loads(resource.dumps()) == resource


@pytest.mark.parametrize(
    ("message", "data", "field", "problem"),
    [
        (LogLine, {"level": "loud"}, "level", "expected one of"),
        (LogLine, {"output": 5}, "output", "expected a string, got a number"),
        (LogBatch, {"logs": [{"level": "info"}, {"stage": ["x"]}]}, "logs[1].stage", "expected a string"),
        (LogBatch, {"logs": [{}] * 1001}, "logs", "must be at most 1000 long"),
        (JobFailure, {"state": "not base64!"}, "state", "expected base64 text"),
        (Dial, {"tunnel_id": "t", "service": "tcp", "port": 70000}, "port", "must be at most 65535"),
        (Dial, {"tunnel_id": "t", "service": "telnet"}, "service", "expected one of"),
        (Dial, {"service": "ssh"}, "tunnel_id", "this field is required"),
        (Manifest, {"heartbeat_seconds": True}, "heartbeat_seconds", "expected a whole number, got a boolean"),
        (Manifest, {"apps": [{"slug": "a", "share": "world"}]}, "apps[0].share", "expected one of"),
        (Manifest, {"environment_variables": {"A": 1}}, "environment_variables.A", "expected a string"),
    ],
)
def test_malformed_input_is_refused_naming_the_field(
    message: type[Message], data: object, field: str, problem: str
) -> None:
    with pytest.raises(ProtocolError) as caught:
        message.from_json(data)
    assert caught.value.field == field
    assert problem in caught.value.problem
    assert str(caught.value).startswith(f"{field}: ")


def test_unknown_fields_are_ignored_so_either_side_may_add_some_first() -> None:
    assert LogLine.from_json({"output": "x", "added_later": {"a": 1}}) == LogLine(output="x")


def test_strict_json_refuses_nan_deep_nesting_and_bad_bytes() -> None:
    with pytest.raises(ProtocolError, match="not valid JSON"):
        loads('{"a": NaN}')
    with pytest.raises(ProtocolError, match="nested too deeply"):
        loads("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ProtocolError, match="not UTF-8"):
        loads(b'{"a": "\xff"}')
    with pytest.raises(ProtocolError, match="expected a list"):
        decode_list(LogLine, {"not": "a list"})


@pytest.mark.parametrize("text", ["²", "١٢", "8_000", " 12", "12 ", "", "1e3", "99999999999999999999999", "-1"])
def test_whole_numbers_are_ascii_digits_within_bounds(text: str) -> None:
    with pytest.raises(ValueError):
        parse_int(text)


def test_whole_numbers_within_bounds_are_read() -> None:
    assert parse_int("0") == 0 and parse_int("9223372036854775807") == 2**63 - 1
    assert parse_int("-5", minimum=-10) == -5


@pytest.mark.parametrize("text", ["nan", "NaN", "inf", "-Infinity", "8_000", "१२३४", "0x10", "1e999", "", " 1"])
def test_decimals_refuse_what_python_float_takes(text: str) -> None:
    with pytest.raises(ValueError):
        parse_decimal(text)


def test_decimals_read_ordinary_numbers() -> None:
    assert [parse_decimal(text) for text in ("12", "-1.5", "2e3", ".5", "+7.")] == [12, -1.5, 2000, 0.5, 7]


@pytest.mark.parametrize(("text", "seconds"), [("90", 90), ("90s", 90), ("5m", 300), ("24h", 86400), ("7D", 604800)])
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "m", "5x", "-5m", "²m", "5 m", "1.5h"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError, match="is not a duration"):
        parse_duration(text)
