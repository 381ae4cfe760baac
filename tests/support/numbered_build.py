"""A template whose apply prints numbered lines and counts its runs, for tests that must prove, across a fault,
that a build's log holds every line exactly once and that Terraform applied exactly once."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.support.provisionerd import push_import, wait_job
from tests.support.waiting import wait_until

TERMINAL = ("succeeded", "failed", "canceled")
_NUMBERED = re.compile(r"\bline-(\d+)\b")


@dataclass(frozen=True)
class NumberedBuild:
    """``at_least`` lines, then more for as long as the file ``switch`` exists (a test ends the apply when it
    chooses); each run appends its count of lines to ``runs``."""

    runs: Path
    switch: Path
    at_least: int = 0

    def files(self) -> dict[str, str]:
        # `$i` and `$((...))` are the shell's (HCL only interpolates `${`); Terraform echoes the command with
        # `line-$i`, which is not a numbered line.
        script = (
            f"i=0; while [ $i -lt {self.at_least} ] || [ -e {self.switch} ]; do i=$((i+1)); echo line-$i; "
            f"sleep 0.05; done; echo $i >> {self.runs}"
        )
        provisioner = f'  provisioner "local-exec" {{\n    command = "{script}"\n  }}\n'
        return {"main.tf": f'resource "terraform_data" "numbered" {{\n{provisioner}}}\n'}

    def template(self, api: httpx.Client, *, timeout: float = 120.0) -> dict[str, Any]:
        """Imported (by whatever daemon serves the server) and made a template."""
        version = push_import(api, files=self.files())
        imported = wait_job(api, version["job"]["id"], TERMINAL, timeout=timeout)
        assert imported["status"] == "succeeded", imported
        created = api.post("/templates", json={"name": "numbered", "version_id": version["id"]})
        assert created.status_code == 201, created.text
        return dict(created.json())

    def start(self, api: httpx.Client, template: dict[str, Any], *, lines: int = 20) -> dict[str, Any]:
        """A workspace of ``template`` whose build applies until the switch is removed; its build, once ``lines``
        of the apply's lines have reached the server."""
        self.switch.touch()
        created = api.post("/workspaces", json={"template_id": template["id"], "name": "ws"})
        assert created.status_code == 201, created.text
        build: dict[str, Any] = created.json()["latest_build"]
        wait_until(lambda: numbered_lines(api, build["id"])[lines], timeout=120, what="the apply's lines in the log")
        return build

    def assert_ran_once_and_logged_each_line_once(self, api: httpx.Client, build_id: str) -> int:
        """The apply ran once, and the build's log holds each of its lines once; the number of lines."""
        runs = self.runs.read_text().split() if self.runs.exists() else []
        assert len(runs) == 1, f"the apply ran {len(runs)} times: {runs}"
        printed = int(runs[0])
        logged = numbered_lines(api, build_id)
        wrong = {n: logged[n] for n in range(1, printed + 1) if logged[n] != 1}
        extra = sorted(set(logged) - set(range(1, printed + 1)))
        assert not wrong and not extra, f"{printed} lines printed; logged other than once: {wrong}; unknown: {extra}"
        return printed


def numbered_lines(api: httpx.Client, build_id: str) -> Counter[int]:
    """How many times each numbered line is in the build's log (as the API serves it)."""
    reply = api.get(f"/workspacebuilds/{build_id}/logs", params={"limit": 10_000})  # every line: a few hundred
    assert reply.status_code == 200, reply.text
    assert len(reply.json()) < 10_000, "the log is longer than one read: page through it"
    return Counter(int(n) for line in reply.json() for n in _NUMBERED.findall(line["output"]))
