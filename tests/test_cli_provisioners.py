"""`slipway provisionerd start` refusing bad usage, and `slipway provisioner …` against a real server."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import PASSWORD, run_cli, start_cli
from tests.support.http_daemon import api_client, sign_up_owner
from tests.support.net import free_port
from tests.support.provisionerd import DAEMON_PSK, DaemonProcess, push_import, user_token, wait_job
from tests.support.server import ServerProcess


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLIPWAY_")}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    env.update(extra)
    return env


@pytest.mark.parametrize(
    ("args", "extra_env", "message"),
    [
        ([], {}, "no server"),
        (["--url", "http://127.0.0.1:9"], {}, "no credential"),
        (["--url", "http://127.0.0.1:9", "--psk", "a", "--key", "b"], {}, "either --psk or --key"),
        (["--url", "http://127.0.0.1:9", "--key", "b", "--tag", "env=prod"], {}, "drop --tag"),
        (["--url", "http://127.0.0.1:9", "--psk", "a", "--tag", "nonsense"], {}, "look like key=value"),
        (["--url", "http://127.0.0.1:9", "--psk", "a", "--name", "-bad name"], {}, "--name"),
        (["--url", "http://127.0.0.1:9", "--psk", "a", "--prometheus-address", "nowhere"], {}, "HOST:PORT"),
        (["--psk", "a"], {"SLIPWAY_URL": "ftp://x"}, "no server"),
        (["--url", "http://127.0.0.1:9"], {"SLIPWAY_PROVISIONER_DAEMON_PSK": "a",
                                            "SLIPWAY_PROVISIONER_DAEMON_KEY": "b"}, "either"),
    ],
)  # fmt: skip
def test_bad_usage_is_one_clear_line(tmp_path: Path, args: list[str], extra_env: dict[str, str], message: str) -> None:
    result = run_cli("provisionerd", "start", *args, env=_env(tmp_path, **extra_env))
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    env = {"SLIPWAY_PROVISIONER_DAEMON_PSK": DAEMON_PSK, "SLIPWAY_PROVISIONER_HEARTBEAT_INTERVAL": "1s"}
    with ServerProcess(tmp_path / "data", "--provisioner-daemons", "0", env=env) as running:
        yield running


def test_provisioner_commands(server: ServerProcess, tmp_path: Path) -> None:
    token = sign_up_owner(server.url, PASSWORD)
    env = _env(tmp_path, SLIPWAY_URL=server.url, SLIPWAY_SESSION_TOKEN=token)
    created = run_cli("provisioner", "keys", "create", "gpu", "--tag", "gpu=a100", env=env)
    assert created.returncode == 0, created.stderr
    secret = created.stdout.strip()
    assert len(secret) == 43 and "not shown again" in created.stderr
    listed = run_cli("provisioner", "keys", "list", env=env)
    assert "gpu=a100" in listed.stdout and secret not in listed.stdout
    assert run_cli("provisioner", "keys", "create", "gpu", env=env).returncode == 1  # 409, said plainly

    with api_client(server.url, token) as api:
        waiting = push_import(api, {"gpu": "a100"})["job"]
        jobs = run_cli("provisioner", "jobs", "list", "-s", "pending", env=env)
        assert waiting["id"] in jobs.stdout and "gpu=a100" in jobs.stdout

        # Only SLIPWAY_URL and the key in the environment: the daemon gets the key's tags and takes the job.
        daemon_env = {"SLIPWAY_PROVISIONER_DAEMON_KEY": secret, "SLIPWAY_URL": server.url}
        with DaemonProcess(server.url, "gpu-1", tmp_path, env=daemon_env) as daemon:
            daemon.wait_registered(api)
            daemons = json.loads(run_cli("provisioner", "list", "-o", "json", env=env).stdout)
            assert [(d["name"], d["key_name"]) for d in daemons] == [("gpu-1", "gpu")]
            table = run_cli("provisioner", "list", env=env).stdout
            assert "gpu-1" in table and "gpu=a100" in table
            assert secret not in daemon.log()
            # `templates push` says who would build before it uploads anything.
            template = tmp_path / "gpu-template"
            template.mkdir()
            (template / "main.tf").write_text('resource "terraform_data" "home" {}\n')
            pushed = run_cli("templates", "push", "gpu", "-d", str(template), "--provisioner-tag", "gpu=a100", env=env)
            assert pushed.returncode == 0, pushed.stderr
            assert "Provisioner daemons online for gpu=a100: 1." in pushed.stdout
            # A Terraform no daemon runs: push says so (the tags alone match); canceled here while it waits.
            (template / "main.tf").write_text('terraform {\n  required_version = ">= 99.0"\n}\n')
            push = start_cli("templates", "push", "gpu", "-d", str(template), "--provisioner-tag", "gpu=a100", env=env)
            assert push.stderr is not None
            warning = push.stderr.readline()  # printed before the CLI follows the import's log
            assert "no online provisioner daemon can import it: it needs terraform >= 99.0; daemons have" in warning
            _cancel_the_pending_import(api)
            out, err = push.communicate(timeout=60)
            assert push.returncode == 1 and "canceled" in err, out + err
        assert run_cli("provisioner", "keys", "delete", "gpu", env=env).returncode == 0

        stuck = push_import(api, {"nobody": "serves-this"})["job"]
        canceled = run_cli("provisioner", "jobs", "cancel", stuck["id"], env=env)
        assert canceled.returncode == 0 and "canceled" in canceled.stdout
        again = run_cli("provisioner", "jobs", "cancel", stuck["id"], env=env)
        assert again.returncode == 1 and "already canceled" in again.stderr

        member = user_token(server.url, api, "carol", [], PASSWORD)
        refused = run_cli("provisioner", "jobs", "list", env={**env, "SLIPWAY_SESSION_TOKEN": member})
        assert refused.returncode == 1 and "permission" in refused.stderr


def test_metrics_from_a_daemon(server: ServerProcess, tmp_path: Path) -> None:
    port = free_port()
    with api_client(server.url, sign_up_owner(server.url, PASSWORD)) as api:
        with DaemonProcess(
            server.url,
            "metered",
            tmp_path,
            "--prometheus-address",
            f"127.0.0.1:{port}",
            env={"SLIPWAY_PROVISIONER_DAEMON_PSK": DAEMON_PSK},
        ) as daemon:
            daemon.wait_registered(api)
            job_id = push_import(api)["job"]["id"]
            assert wait_job(api, job_id, ("succeeded", "failed"), timeout=120)["status"] == "succeeded"
            text = httpx.get(f"http://127.0.0.1:{port}/metrics").text
            assert 'slipway_provisionerd_jobs_total{result="succeeded",type="template_version_import"} 1.0' in text
            assert "slipway_provisionerd_jobs_current 0.0" in text
            assert "slipway_provisionerd_job_duration_seconds_bucket" in text


def test_a_daemon_waits_for_a_server_that_is_not_up_and_ctrl_c_ends_the_wait(tmp_path: Path) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"
    daemon = DaemonProcess(nowhere, "early", tmp_path, env={"SLIPWAY_PROVISIONER_DAEMON_PSK": "x"}).start()
    try:
        time.sleep(3)
        assert daemon.process is not None and daemon.process.poll() is None, daemon.log()
        daemon.signal(signal.SIGINT)
        assert daemon.wait_exit(timeout=15) == 0
    finally:
        daemon.stop()
    assert "retrying" in daemon.log() and "Traceback" not in daemon.log()


def _cancel_the_pending_import(api: httpx.Client) -> None:
    [job] = [job for job in api.get("/provisionerjobs?status=pending").json() if job["required_terraform"] == ">= 99.0"]
    assert api.patch(f"/provisionerjobs/{job['id']}/cancel").status_code == 200
