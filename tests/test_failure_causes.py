"""A failed build explains itself: Terraform's diagnostics read as Terraform prints them, the cause (first line,
resource, log line) is derived from the stored log and shown on the build page, the workspace page, the list and
the API; Retry and "Retry with debug logging" rebuild the same transition and parameters, for those who may."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.core.extensions import db
from app.provisioning.failures import cause_from_lines, failure_causes
from app.provisioning.models import ProvisionerJob
from cli.follow import failure_message
from protocol.logs import FailureCause, LogLine
from tests.conftest import PASSWORD, Persona
from tests.support.archives import tar_of
from tests.support.daemon import PARAMETERS, RESOURCES
from tests.support.web import post_form, sign_in
from tests.test_workspace_updates import World
from workers.terraform.executor import _StepOutput
from workers.terraform.logs import event_lines, render_diagnostic, tf_log_level

pytestmark = pytest.mark.databases("sqlite")

# What `terraform apply -json` prints for a local-exec provisioner that exits 1.
PROVISIONER_ERROR = {
    "@level": "error",
    "@message": "Error: local-exec provisioner error",
    "type": "diagnostic",
    "diagnostic": {
        "severity": "error",
        "summary": "local-exec provisioner error",
        "detail": "Error running command 'exit 1': exit status 1. Output: ",
        "address": "terraform_data.setup",
        "range": {"filename": "main.tf", "start": {"line": 3, "column": 28}, "end": {"line": 3, "column": 29}},
        "snippet": {
            "context": 'resource "terraform_data" "setup"',
            "code": '  provisioner "local-exec" {',
            "start_line": 3,
            "highlight_start_offset": 27,
            "highlight_end_offset": 28,
            "values": [],
        },
    },
}


def test_a_diagnostic_reads_as_terraform_prints_it() -> None:
    assert render_diagnostic(PROVISIONER_ERROR["diagnostic"]) == [  # type: ignore[arg-type]
        "Error: local-exec provisioner error",
        "",
        "  with terraform_data.setup,",
        '  on main.tf line 3, in resource "terraform_data" "setup":',
        '    3:   provisioner "local-exec" {',
        "",
        "Error running command 'exit 1': exit status 1. Output: ",
    ]
    assert {level for level, _ in event_lines(PROVISIONER_ERROR)} == {"error"}
    syntax = {
        "severity": "error",
        "summary": "Argument or block definition required",
        "detail": "An argument or block definition is required here.",
        "range": {"filename": "main.tf", "start": {"line": 2, "column": 1}},
        "snippet": {"context": None, "code": "this is not hcl", "start_line": 2},
    }
    assert render_diagnostic(syntax) == [
        "Error: Argument or block definition required",
        "",
        "  on main.tf line 2:",
        "    2: this is not hcl",
        "",
        "An argument or block definition is required here.",
    ]


def test_the_cause_is_the_first_error_with_its_resource() -> None:
    lines = [(7, "warning-free preamble"), (8, ""), (9, "Error: local-exec provisioner error"), (10, "")]
    lines += [(11, "  with terraform_data.setup,"), (12, '  on main.tf line 3, in resource "terraform_data":')]
    cause = cause_from_lines("local-exec provisioner error", lines)
    assert (cause.message, cause.resource, cause.log_line_id) == (
        "local-exec provisioner error",
        "terraform_data.setup",
        9,
    )
    # Terraform's hook line names the resource too; without an error of its own the first error line says why.
    hooked = cause_from_lines("", [(3, "docker_container.main: Creation errored after 2s"), (4, "Error: boom")])
    assert (hooked.message, hooked.resource, hooked.log_line_id) == ("boom", "docker_container.main", 4)
    # `terraform init`'s generic preamble is not the cause: the configuration's own error after it is.
    init = [(20, "Error: Terraform encountered problems during initialisation, including problems"), (21, "")]
    init += [
        (22, "Error: Invalid expression"),
        (23, ""),
        (24, '  on main.tf line 2, in resource "terraform_data" "a":'),
    ]
    syntax = cause_from_lines("Invalid expression; Unsupported block type", init)
    assert (syntax.message, syntax.resource, syntax.log_line_id) == (
        "Invalid expression; Unsupported block type",
        "",
        22,
    )
    # A daemon that went away leaves no log line to point at.
    lost = cause_from_lines("The provisioner daemon stopped responding.\nmore", [])
    assert (lost.message, lost.resource, lost.log_line_id) == ("The provisioner daemon stopped responding.", "", None)


RECORDED = Path(__file__).parent / "fixtures" / "terraform_failures"


def recorded_cause(name: str) -> tuple[FailureCause, dict[int, str]]:
    """The cause of a recorded real Terraform failure, its diagnostics logged as the daemon logs them (line ids from
    100, after a few lines of plan output), with the logged lines by id."""
    events = [json.loads(line) for line in (RECORDED / f"{name}.jsonl").read_text().splitlines()]
    logged = [(level, text) for event in events for level, text in event_lines(event)]
    lines = {100 + index: text for index, (level, text) in enumerate(logged) if level == "error"}
    output = _StepOutput("Starting workspace", "json", lambda line: None)
    output.diagnostics.extend(events)
    return cause_from_lines(output.error_message(1), list(lines.items())), lines


@pytest.mark.parametrize(
    ("name", "message", "resource"),
    [
        (
            "git_clone",
            "fatal: unable to access 'http://127.0.0.1:9/nothing.git/': Failed to connect to 127.0.0.1 port 9"
            " after 0 ms: Couldn't connect to server",
            "terraform_data.dotfiles[0]",
        ),
        (
            "script_stderr",
            "ls: cannot access '/nonexistent/tools': No such file or directory",
            "terraform_data.install",
        ),
        ("exit_silent", "The command 'exit 3' failed: exit status 3.", "terraform_data.setup"),
        (
            "missing_file",
            'Invalid function argument: Invalid value for "path" parameter: no file exists at "./settings.json"; this'
            " function works only with files that are distributed as part of the configuration source code, so if"
            " this file will be created by a resource in this configuration you must instead obtain this result from"
            " an attribute of that resource.",
            "",
        ),
        (
            "bad_value",
            'Invalid function argument: Invalid value for "v" parameter: cannot convert "large" to number; given'
            " string must be a decimal representation of a number.",
            "",
        ),
    ],
)
def test_the_message_quotes_the_real_cause_of_a_real_failure(name: str, message: str, resource: str) -> None:
    """Recorded from real Terraform runs (tests/fixtures/terraform_failures): the wrapper a provisioner's failure
    comes in is not the message, the command's own error is; a plain diagnostic reads as its heading and detail. The
    link goes to the line that holds the cause."""
    cause, lines = recorded_cause(name)
    assert (cause.message, cause.resource) == (message, resource)
    assert cause.log_line_id is not None and cause.message.split(": ")[-1][:20] in lines[cause.log_line_id]
    wrapped = name in ("git_clone", "script_stderr", "exit_silent")
    assert cause.summary == ("local-exec provisioner error" if wrapped else "Invalid function argument")


def test_a_commands_error_line_is_preferred_to_its_last_and_older_wordings_are_read() -> None:
    heading = [(1, "Error: local-exec provisioner error"), (2, ""), (3, "  with terraform_data.a,")]
    heading += [(4, '  on main.tf line 3, in resource "terraform_data" "a":')]
    heading += [(5, '    3:   provisioner "local-exec" {')]
    older = heading + [(6, ""), (7, "Error running command 'make': exit status 2: make: *** No rule to make target.")]
    cause = cause_from_lines("local-exec provisioner error", older)
    assert (cause.message, cause.log_line_id) == ("make: *** No rule to make target.", 7)
    # No line reads as an error: the output's last line is the nearest to why.
    quiet = heading + [(6, "Error running command 'x': exit status 1. Output: step one"), (7, "step two"), (8, "")]
    assert cause_from_lines("local-exec provisioner error", quiet).message == "step two"
    # A command of several lines that printed nothing: its exit status, linked to the line that says it.
    silent = heading + [(6, "Error running command 'set -e"), (7, "false': exit status 1. Output: "), (8, "")]
    assert cause_from_lines("local-exec provisioner error", silent) == FailureCause(
        message="The command 'set -e\\nfalse' failed: exit status 1.",
        resource="terraform_data.a",
        log_line_id=7,
        summary="local-exec provisioner error",
    )
    # An error of the daemon's own is not replaced by the log's words.
    lost = cause_from_lines("The provisioner daemon stopped responding.", older)
    assert (lost.message, lost.summary) == ("The provisioner daemon stopped responding.", "")


@pytest.fixture
def world(app: Flask, client: FlaskClient, personas: dict[str, Persona]) -> World:
    return World(client, personas)


def browser(app: Flask, who: str) -> FlaskClient:
    pages = app.test_client()
    sign_in(pages, f"{who}@example.com", PASSWORD)
    return pages


def fail_start(world: World, workspace_id: str) -> dict[str, Any]:
    """Stop, then a start whose Terraform fails the way a local-exec that exits 1 does."""
    world.stop(workspace_id)
    build = world.start(workspace_id).json
    job_id = build["job"]["id"]
    assert world.daemon.call(f"/jobs/{job_id}/acquire").status_code == 200
    lines = [{"level": "info", "stage": "Planning infrastructure", "output": "terraform_data.setup: Creating..."}]
    lines += [{"level": level, "stage": "Starting workspace", "output": text} for level, text in
              event_lines(PROVISIONER_ERROR)]  # fmt: skip
    assert world.daemon.call(f"/jobs/{job_id}/logs", {"logs": lines}).status_code == 200
    failure = {"error": "local-exec provisioner error"}
    assert world.daemon.call(f"/jobs/{job_id}/fail", failure).status_code == 204
    return dict(build)


def test_a_failed_build_shows_its_cause_on_its_pages_and_in_the_api(app: Flask, world: World) -> None:
    workspace = world.create()
    build = fail_start(world, workspace["id"])
    job = world.get(workspace["id"])["latest_build"]["job"]
    failure = job["failure"]
    assert failure["message"] == "The command 'exit 1' failed: exit status 1."
    assert (failure["resource"], failure["summary"]) == ("terraform_data.setup", "local-exec provisioner error")
    line_id = failure["log_line_id"]
    with app.app_context():
        # Read for a whole list at once: each failed job gets its own cause, the others none.
        listed = [
            db.session.get(ProvisionerJob, job_id) for job_id in (job["id"], workspace["latest_build"]["job"]["id"])
        ]
        causes = failure_causes([found for found in listed if found is not None])
        assert causes[job["id"]] is not None and causes[job["id"]].log_line_id == line_id
        assert causes[workspace["latest_build"]["job"]["id"]] is None
    carol = browser(app, "carol")
    page = carol.get(f"/builds/{build['id']}").get_data(as_text=True)
    # At the top, before the log; the link's anchor is the log line's id.
    assert page.index('id="job-failure"') < page.index('id="log"')
    assert f'href="#log-line-{line_id}"' in page and f'id="log-line-{line_id}"' in page
    assert "<code>terraform_data.setup</code>" in page and 'id="retry-build-debug"' in page
    shown = carol.get(f"/workspaces/{workspace['id']}").get_data(as_text=True)
    assert "failed: exit status 1." in shown and f"/builds/{build['id']}#log-line-{line_id}" in shown
    listed = carol.get("/workspaces").get_data(as_text=True)
    assert 'data-failure="ws"' in listed and f"#log-line-{line_id}" in listed
    # A succeeded job has none.
    assert world.get(workspace["id"])["latest_build"]["job"]["status"] == "failed"
    first = carol.get(f"/builds/{workspace['latest_build']['id']}").get_data(as_text=True)
    assert 'class="flash flash-error failure"' not in first


@pytest.mark.parametrize(
    ("who", "allowed"),
    [("carol", True), ("alice", True), ("bob", False), ("dave", False)],
)
def test_retry_rebuilds_the_same_transition_for_who_may_build(
    app: Flask, world: World, who: str, allowed: bool
) -> None:
    workspace = world.create()
    failed = fail_start(world, workspace["id"])
    path = f"/builds/{failed['id']}/retry"
    person = browser(app, who)
    page = person.get(f"/builds/{failed['id']}")
    if page.status_code == 404:  # another member's workspace is not theirs to see
        assert not allowed
        assert person.post(path, data={}).status_code in (400, 404)
        assert world.get(workspace["id"])["latest_build"]["id"] == failed["id"]
        return
    assert ('id="retry-build"' in page.get_data(as_text=True)) is allowed
    # Without its CSRF token the form is refused.
    assert person.post(path, data={}).status_code == 400
    retried = post_form(person, path, {"debug": "1"}, token_from=f"/builds/{failed['id']}")
    assert retried.status_code == 302
    latest = world.get(workspace["id"])["latest_build"]
    if not allowed:
        assert latest["id"] == failed["id"]
        return
    assert latest["build_number"] == failed["build_number"] + 1 and latest["transition"] == "start"
    assert latest["template_version_id"] == failed["template_version_id"]
    auth = world.personas["carol"].auth
    parameters = [world.client.get(f"/api/v2/workspacebuilds/{b['id']}/parameters", headers=auth).json
                  for b in (failed, latest)]  # fmt: skip
    assert parameters[0] == parameters[1] and {item["name"] for item in parameters[0]} == {"region", "size"}
    # The daemon is asked for Terraform's debug log for this build only.
    acquired = world.daemon.call(f"/jobs/{latest['job']['id']}/acquire").json
    assert acquired["workspace_build"]["debug_logging"] is True


def test_retry_without_debug_and_only_of_a_failed_latest_build(app: Flask, world: World) -> None:
    workspace = world.create()
    failed = fail_start(world, workspace["id"])
    carol = browser(app, "carol")
    token_from = f"/builds/{failed['id']}"
    assert post_form(carol, f"/builds/{failed['id']}/retry", {}, token_from=token_from).status_code == 302
    latest = world.get(workspace["id"])["latest_build"]
    acquired = world.daemon.call(f"/jobs/{latest['job']['id']}/acquire").json
    assert acquired["workspace_build"]["debug_logging"] is False
    # The failed build is no longer the latest: retrying it again says so and builds nothing.
    again = post_form(carol, f"/builds/{failed['id']}/retry", {}, token_from=token_from)
    assert again.status_code == 302
    assert world.get(workspace["id"])["latest_build"]["id"] == latest["id"]
    follow = carol.get(again.headers["Location"]).get_data(as_text=True)
    assert "newer build" in follow or "already active" in follow


def test_the_cli_says_why_and_where_to_look() -> None:
    cause = FailureCause(message="local-exec provisioner error", resource="terraform_data.setup", log_line_id=42)
    assert failure_message(cause, "Starting ws", page_url="https://slipway.example/builds/b1") == (
        "Starting ws failed: local-exec provisioner error (in terraform_data.setup)\n"
        "hint: the error in the log: https://slipway.example/builds/b1#log-line-42"
    )
    lost = FailureCause(message="The provisioner daemon stopped responding.")
    assert failure_message(lost, "Import of t (v)", page_url="https://s/templates/versions/v") == (
        "Import of t (v) failed: The provisioner daemon stopped responding.\n"
        "hint: the error in the log: https://s/templates/versions/v"
    )


def test_terraform_debug_output_keeps_its_level_and_is_not_an_error() -> None:
    """TF_LOG=debug writes Terraform's own log to stderr: those lines are debug (or whatever level they say), not
    errors, so the cause and the job's error still come from Terraform's diagnostics."""
    debug = "2026-11-27T03:00:00.123Z [DEBUG] provider.terraform-provider-coder: starting plugin"
    assert tf_log_level(debug) == "debug"
    assert tf_log_level("2026-11-27T03:00:00.123Z [WARN]  unexpected data") == "warn"
    assert tf_log_level("Error: local-exec provisioner error") is None
    logged: list[LogLine] = []
    output = _StepOutput("Starting workspace", "json", logged.append)
    output.on_line("stderr", debug)
    output.on_line("stderr", "Error: Invalid expression")
    assert [(line.level, line.output) for line in logged] == [("debug", debug), ("error", "Error: Invalid expression")]
    assert output.error_message(1) == "Invalid expression"


# A template whose dotfiles resource clones the repository a mutable parameter names (through a local), and whose
# "size" it does not read.
DOTFILES_TEMPLATE = """
data "coder_parameter" "repo" {
  name         = "repo_url"
  display_name = "Dotfiles repository"
  mutable      = true
  default      = ""
}
locals {
  clone_from = data.coder_parameter.repo.value
}
resource "terraform_data" "dotfiles" {
  count = local.clone_from == "" ? 0 : 1
  provisioner "local-exec" {
    command = "git clone ${local.clone_from} /tmp/dotfiles"
  }
}
"""
DOTFILES_PARAMETERS = [
    {"name": "repo_url", "display_name": "Dotfiles repository", "type": "string", "mutable": True,
     "required": False, "default_value": "", "options": []},
    {**PARAMETERS[0]},  # size: mutable, read by nothing here
    {"name": "token", "type": "string", "mutable": True, "ephemeral": True, "required": False,
     "default_value": "", "options": []},
]  # fmt: skip


def dotfiles_workspace(world: World) -> dict[str, Any]:
    """A workspace of the dotfiles template, built once with a repository that worked."""
    bob = world.personas["bob"]
    headers = {**bob.auth, "Content-Type": "application/x-tar"}
    file_id = world.client.post("/api/v2/files", data=tar_of({"main.tf": DOTFILES_TEMPLATE}), headers=headers).json
    body = {"file_id": file_id["id"], "template_id": world.template["id"]}
    version = world.client.post("/api/v2/templateversions", json=body, headers=bob.auth).json
    assert world.daemon.call(f"/jobs/{version['job']['id']}/acquire").status_code == 200
    done = {"template_import": {"parameters": DOTFILES_PARAMETERS, "resources": RESOURCES}}
    assert world.daemon.call(f"/jobs/{version['job']['id']}/complete", done).status_code == 204
    world.promote(version["id"])
    values = [{"name": "repo_url", "value": "/srv/git/dotfiles.git"}, {"name": "size", "value": "2"}]
    body = {"template_id": world.template["id"], "name": "dots", "rich_parameter_values": values}
    created = world.client.post("/api/v2/workspaces", json=body, headers=world.personas["carol"].auth)
    assert created.status_code == 201, created.json
    world.finish(created.json["latest_build"])
    return dict(created.json)


def fail_clone(
    world: World, workspace_id: str, values: list[dict[str, str]], recorded: str = "git_clone"
) -> dict[str, Any]:
    """Stop, then a start with ``values`` that fails as the recorded real `git clone` of an unreachable URL did (or
    as another ``recorded`` failure)."""
    world.stop(workspace_id)
    started = world.start(workspace_id, rich_parameter_values=values)
    assert started.status_code == 201, started.json
    job_id = started.json["job"]["id"]
    assert world.daemon.call(f"/jobs/{job_id}/acquire").status_code == 200
    events = [json.loads(line) for line in (RECORDED / f"{recorded}.jsonl").read_text().splitlines()]
    lines = [{"level": level, "stage": "Starting workspace", "output": text}
             for event in events for level, text in event_lines(event)]  # fmt: skip
    assert world.daemon.call(f"/jobs/{job_id}/logs", {"logs": lines}).status_code == 200
    failed = world.daemon.call(f"/jobs/{job_id}/fail", {"error": "local-exec provisioner error"})
    assert failed.status_code == 204
    return dict(started.json)


def test_a_failure_names_the_changed_parameter_its_resource_uses_and_offers_to_change_it(
    app: Flask, world: World
) -> None:
    workspace = dotfiles_workspace(world)
    unreachable = "http://127.0.0.1:9/nothing.git"
    build = fail_clone(
        world, workspace["id"], [{"name": "repo_url", "value": unreachable}, {"name": "size", "value": "3"}]
    )
    carol = browser(app, "carol")
    change_url = f"/workspaces/{workspace['id']}/parameters"
    for path in (f"/workspaces/{workspace['id']}", f"/builds/{build['id']}"):
        page = carol.get(path).get_data(as_text=True)
        failure = page[page.index('id="job-failure"') :]
        assert "fatal: unable to access" in failure and "provisioner error" not in failure.split("</strong>")[0]
        # The resource reads repo_url (through a local), not size: only repo_url is named, values and all.
        assert "<code>terraform_data.dotfiles[0]</code> uses a parameter changed since the last good build" in failure
        assert 'data-parameter="repo_url"' in failure and 'data-parameter="size"' not in failure
        assert "<strong>Dotfiles repository</strong> from <code>/srv/git/dotfiles.git</code>" in failure
        assert f"to <code>{unreachable}</code>" in failure
        # Change parameters is the main action; Retry is still there, second.
        assert f'class="btn btn-small btn-primary" id="change-parameters" href="{change_url}"' in failure
        assert failure.index('id="change-parameters"') < failure.index('id="retry-build"')
        assert 'class="btn btn-small" type="submit" id="retry-build"' in failure
    # The change-parameters page it links to is there for her.
    assert carol.get(change_url).status_code == 200
    # The API says the same of this build (lists leave it out).
    auth = world.personas["carol"].auth
    failure = world.client.get(f"/api/v2/workspacebuilds/{build['id']}", headers=auth).json["job"]["failure"]
    assert failure["message"].startswith("fatal: unable to access") and failure["likely_fix"] == "change_parameters"
    assert failure["parameters_used"] is True and failure["changed_parameters"] == [
        {"name": "repo_url", "label": "Dotfiles repository", "previous": "/srv/git/dotfiles.git",
         "value": unreachable, "mutable": True}
    ]  # fmt: skip
    # An owner may build it too, and is offered the same.
    alice = browser(app, "alice").get(f"/builds/{build['id']}").get_data(as_text=True)
    assert 'id="change-parameters"' in alice


def test_a_failure_whose_resource_reads_no_changed_parameter_offers_retry_first(app: Flask, world: World) -> None:
    workspace = dotfiles_workspace(world)
    same_repo = [{"name": "repo_url", "value": "/srv/git/dotfiles.git"}, {"name": "size", "value": "3"}]
    build = fail_clone(world, workspace["id"], same_repo)
    page = browser(app, "carol").get(f"/builds/{build['id']}").get_data(as_text=True)
    failure = page[page.index('id="job-failure"') :]
    assert "fatal: unable to access" in failure and "failure-parameter" not in failure
    assert 'id="change-parameters"' not in failure
    assert 'class="btn btn-small btn-primary" type="submit" id="retry-build"' in failure
    auth = world.personas["carol"].auth
    api = world.client.get(f"/api/v2/workspacebuilds/{build['id']}", headers=auth).json["job"]["failure"]
    assert (api["likely_fix"], api["changed_parameters"], api["parameters_used"]) == ("retry", [], True)


def test_when_what_the_resource_reads_is_unknown_every_change_is_named_as_such(app: Flask, world: World) -> None:
    """terraform_data.install is not in the template's HCL (as a module's resource would not be): the changed
    parameters are all named, as changed since the last good build, not as ones it uses."""
    workspace = dotfiles_workspace(world)
    values = [{"name": "repo_url", "value": "/srv/git/other.git"}, {"name": "size", "value": "3"}]
    values += [{"name": "token", "value": "s3cr3t-for-this-build"}]
    build = fail_clone(world, workspace["id"], values, recorded="script_stderr")
    page = browser(app, "carol").get(f"/builds/{build['id']}").get_data(as_text=True)
    failure = page[page.index('id="job-failure"') :]
    assert "No such file or directory" in failure and "Changed since the last good build (the likely cause)" in failure
    assert 'data-parameter="repo_url"' in failure and 'data-parameter="size"' in failure
    assert 'data-parameter="token"' not in failure and "s3cr3t" not in failure  # ephemeral: never named or shown
    assert "from <code>2</code> to <code>3</code>" in failure and 'id="change-parameters"' in failure


def test_a_command_that_printed_hundreds_of_lines_is_quoted_from_its_end(app: Flask, world: World) -> None:
    """Its whole output is one diagnostic's detail, past the first lines read: the last ones are read too."""
    workspace = world.create()
    world.stop(workspace["id"])
    build = world.start(workspace["id"]).json
    job_id = build["job"]["id"]
    assert world.daemon.call(f"/jobs/{job_id}/acquire").status_code == 200
    output = "\n".join(f"filler-{number}" for number in range(400)) + "\nfatal: the real reason\nbye"
    detail = f"Error running command 'make': exit status 2. Output: {output}\n"
    event = {**PROVISIONER_ERROR, "diagnostic": {**PROVISIONER_ERROR["diagnostic"], "detail": detail}}  # type: ignore[dict-item]
    lines = [{"level": level, "stage": "Starting workspace", "output": text} for level, text in event_lines(event)]
    assert world.daemon.call(f"/jobs/{job_id}/logs", {"logs": lines}).status_code == 200
    assert world.daemon.call(f"/jobs/{job_id}/fail", {"error": "local-exec provisioner error"}).status_code == 204
    failure = world.get(workspace["id"])["latest_build"]["job"]["failure"]
    assert (failure["message"], failure["resource"]) == ("fatal: the real reason", "terraform_data.setup")
