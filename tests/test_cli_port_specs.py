"""`slipway port-forward` specs: [BIND_IP:]LOCAL[:REMOTE], and the usage errors a user sees for bad ones."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.port_forward import PortForward, parse_port_spec, port_forward

ALL_INTERFACES = "0.0.0.0"  # noqa: S104 - only parsed here, never bound


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("8080", [PortForward("127.0.0.1", 8080, 8080)]),
        ("8080:80", [PortForward("127.0.0.1", 8080, 80)]),
        (f"{ALL_INTERFACES}:8080", [PortForward(ALL_INTERFACES, 8080, 8080)]),
        (f"{ALL_INTERFACES}:8080:80", [PortForward(ALL_INTERFACES, 8080, 80)]),
        ("[::1]:8080:80", [PortForward("::1", 8080, 80)]),
        ("[::]:5432", [PortForward("::", 5432, 5432)]),
        ("8000-8002", [PortForward("127.0.0.1", port, port) for port in (8000, 8001, 8002)]),
        ("8000-8001:9000-9001", [PortForward("127.0.0.1", 8000, 9000), PortForward("127.0.0.1", 8001, 9001)]),
        ("8080, 9090:90", [PortForward("127.0.0.1", 8080, 8080), PortForward("127.0.0.1", 9090, 90)]),
        ("1:65535", [PortForward("127.0.0.1", 1, 65535)]),
    ],
)
def test_specs_parse_with_remote_defaulting_to_local(spec: str, expected: list[PortForward]) -> None:
    assert parse_port_spec(spec) == expected


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "an empty field is not a port number"),
        ("0", "0 is not a port number (1-65535)"),
        ("70000", "70000 is not a port number (1-65535)"),
        ("http", "http is not a port number"),
        ("8080:web", "web is not a port number"),
        ("8080:", "an empty field is not a port number"),
        ("localhost:8080:80", "localhost is not an IP address"),
        ("1.2.3.4:8080:80:90", "too many parts"),
        ("::1:8080", "is not an IP address"),
        ("[::1]8080", "write an IPv6 bind address as [ADDRESS]"),
        ("9000-8000", "the range 9000-8000 runs backwards"),
        ("8000-8002:9000-9001", "the local and remote ranges differ in length"),
        ("8080,abc:80", "'abc:80': abc is not an IP address"),
    ],
)
def test_bad_specs_say_what_is_wrong(spec: str, message: str) -> None:
    with pytest.raises(ValueError) as raised:
        parse_port_spec(spec)
    assert message in str(raised.value)


def test_ipv6_bind_address_prints_in_brackets() -> None:
    assert parse_port_spec("[::1]:8080")[0].local_address == "[::1]:8080"


@pytest.fixture
def signed_out_env(tmp_path: Path) -> dict[str, str | None]:
    # Bad specs must fail before any login or network is needed.
    return {"SLIPWAY_URL": None, "SLIPWAY_SESSION_TOKEN": None, "XDG_CONFIG_HOME": str(tmp_path / "config")}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ws1", "--tcp", "70000"], "Invalid value for '--tcp' / '-p': '70000': 70000 is not a port number"),
        (["ws1", "-p", "nowhere:80"], "nowhere is not an IP address"),
        (["ws1"], "Give at least one --tcp [BIND_IP:]LOCAL[:REMOTE]."),
        (["ws1", "-p", "8080", "-p", "127.0.0.1:8080:81"], "repeated: 127.0.0.1:8080"),
    ],
)
def test_bad_usage_exits_2_with_one_clear_error(
    args: list[str], message: str, signed_out_env: dict[str, str | None]
) -> None:
    result = CliRunner().invoke(port_forward, args, env=signed_out_env)
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


def test_a_port_in_use_is_one_line(taken_port: int, signed_out_env: dict[str, str | None]) -> None:
    result = CliRunner().invoke(port_forward, ["ws1", "--tcp", str(taken_port)], env=signed_out_env)
    assert result.exit_code == 1
    assert result.output == f"Error: cannot listen on 127.0.0.1:{taken_port}: Address already in use\n"
