"""Issue 21 benchmark: Slipway's coder provider on a large template (50 parameters, 10 agents, 30 apps).

- The provider plugin's start-up: from exec to the go-plugin handshake line Terraform waits for (it starts once per
  Terraform command), median of --starts runs (target <= 300 ms).
- A template import as Slipway's daemon runs it (the code `slipway templates validate` and every daemon run: the
  prepared init reused, then a plan and `show -json` of the start and the stop transitions, their resources and
  parameters parsed) against the same Terraform commands run bare in an initialised copy of the template, with the
  same Terraform and provider, interleaved: medians and the ratio (target <= 1.2). A single bare `terraform plan` is
  printed beside them for scale.

Run: .venv/bin/python bench/provider.py [--imports 5] [--starts 10]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
from _harness import median  # noqa: E402

from cli.template_validate import validate_template  # noqa: E402
from workers.provider_install import MIRRORED_VERSIONS, PROVIDER_SOURCE, host_target, install_coder_provider  # noqa: E402
from workers.terraform import build_coder_env, find_terraform, terraform_environment  # noqa: E402

PARAMETERS, AGENTS, APPS = 50, 10, 30


def large_template() -> str:
    """50 parameters of every type, 10 agents on their own resources, 3 apps each."""
    blocks = ['terraform {\n  required_providers {\n    coder = { source = "coder/coder" }\n  }\n}\n',
              'data "coder_workspace" "me" {}\n']  # fmt: skip
    for number in range(PARAMETERS):
        kind = ("string", "number", "bool", "list(string)", "options")[number % 5]
        name = f"p{number:02d}"
        if kind == "options":
            options = "".join(f'  option {{\n    name  = "Choice {n}"\n    value = "c{n}"\n  }}\n' for n in range(4))
            blocks.append(
                f'data "coder_parameter" "{name}" {{\n  name = "{name}"\n  display_name = "Parameter {number}"\n'
                f'  type = "string"\n  default = "c1"\n  mutable = true\n{options}}}\n'
            )
            continue
        default = {"string": '"text"', "number": '"4"', "bool": '"true"', "list(string)": '"[\\"a\\",\\"b\\"]"'}[kind]
        validation = "  validation {\n    min = 1\n    max = 64\n  }\n" if kind == "number" else ""
        blocks.append(
            f'data "coder_parameter" "{name}" {{\n  name = "{name}"\n  display_name = "Parameter {number}"\n'
            f'  type = "{kind}"\n  default = {default}\n  mutable = true\n{validation}}}\n'
        )
    for agent in range(AGENTS):
        blocks.append(
            f'resource "coder_agent" "a{agent}" {{\n  os = "linux"\n  arch = "amd64"\n'
            f'  startup_script = "echo {agent}"\n  metadata {{\n    key = "load"\n    display_name = "Load"\n'
            f'    script = "cat /proc/loadavg"\n    interval = 10\n    timeout = 1\n  }}\n}}\n'
            f'resource "terraform_data" "host{agent}" {{\n  count = data.coder_workspace.me.start_count\n'
            f"  input = coder_agent.a{agent}.token\n}}\n"
        )
        for app in range(APPS // AGENTS):
            blocks.append(
                f'resource "coder_app" "a{agent}_app{app}" {{\n  agent_id = coder_agent.a{agent}.id\n'
                f'  slug = "app{agent}-{app}"\n  display_name = "App {agent}.{app}"\n'
                f'  url = "http://localhost:{8000 + app}"\n  share = "owner"\n'
                f'  healthcheck {{\n    url = "http://localhost:{8000 + app}/healthz"\n    interval = 5\n'
                f"    threshold = 6\n  }}\n}}\n"
            )
    return "".join(blocks)


def provider_startup(cache: Path, starts: int) -> list[float]:
    """Seconds from exec to the handshake line, as Terraform starts the plugin."""
    install_coder_provider(cache)
    version = MIRRORED_VERSIONS[-1]
    plugin = cache / "coder-provider" / "mirror" / PROVIDER_SOURCE / version / host_target()
    executable = plugin / f"terraform-provider-coder_v{version}"
    times = []
    for _ in range(starts):
        began = time.perf_counter()
        process = subprocess.Popen([str(executable)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert process.stdout is not None
        line = process.stdout.readline()
        times.append(time.perf_counter() - began)
        process.kill()
        process.wait()
        assert line.startswith("1|6|"), f"not a handshake: {line!r}"
    return times


class BareTerraform:
    """The import's Terraform commands, run directly in an initialised copy of the template."""

    def __init__(self, template: Path, cache: Path, workdir: Path) -> None:
        self.binary = find_terraform(None)
        self.workdir = workdir
        shutil.copytree(template, workdir)
        cli_config = install_coder_provider(cache)
        self.env = {
            transition: terraform_environment(
                os.environ,
                build_coder_env(
                    access_url="http://127.0.0.1:3000",
                    transition=transition,
                    workspace_name="bench",
                    workspace_id="00000000-0000-0000-0000-000000000000",
                    build_id="",
                    owner_name="bench",
                    owner_id="00000000-0000-0000-0000-000000000000",
                    owner_email="bench@example.com",
                ),
                plugin_cache=cache / "plugins",
                cli_config_file=cli_config,
            )  # fmt: skip
            for transition in ("start", "stop")
        }
        self.run("start", "init", "-input=false", "-no-color")

    def run(self, transition: str, *arguments: str) -> None:
        subprocess.run(
            self.binary.argv(*arguments), cwd=self.workdir, env=self.env[transition], check=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip

    def plan(self, transition: str) -> None:
        self.run(transition, "plan", "-input=false", "-no-color", "-refresh=true", f"-out={transition}.tfplan")

    def import_equivalent(self) -> None:
        for transition in ("start", "stop"):
            self.plan(transition)
            self.run(transition, "show", "-json", f"{transition}.tfplan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--imports", type=int, default=5, help="timed imports of each kind")
    parser.add_argument("--starts", type=int, default=10, help="timed provider start-ups")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="slipway-bench-provider-") as scratch:
        root = Path(scratch)
        template = root / "template"
        template.mkdir()
        (template / "main.tf").write_text(large_template())
        cache = root / "cache"

        startups = provider_startup(cache, args.starts)
        print(f"provider start-up to handshake: median {median(startups) * 1000:.0f} ms over {args.starts} "
              f"(min {min(startups) * 1000:.0f}, max {max(startups) * 1000:.0f}); target <= 300 ms")  # fmt: skip

        first = validate_template(template, {}, cache=cache)  # installs, initialises, fills the init cache
        assert first.ok, first.problems
        assert first.result is not None
        found = first.result
        agents = sum(len(resource.agents) for resource in found.resources.start)
        apps = sum(len(agent.apps) for resource in found.resources.start for agent in resource.agents)
        print(f"template: {len(found.parameters)} parameters, {agents} agents, {apps} apps")
        bare = BareTerraform(template, cache, root / "bare")

        slipway_times, bare_times, plan_times = [], [], []
        for _ in range(args.imports):  # interleaved: the machine's noise falls on both alike
            began = time.perf_counter()
            assert validate_template(template, {}, cache=cache).ok
            slipway_times.append(time.perf_counter() - began)
            began = time.perf_counter()
            bare.import_equivalent()
            bare_times.append(time.perf_counter() - began)
            began = time.perf_counter()
            bare.plan("start")
            plan_times.append(time.perf_counter() - began)
        ours, theirs = median(slipway_times), median(bare_times)
        print(f"import through Slipway's daemon flow: median {ours:.2f} s over {args.imports}")
        print(f"the same Terraform commands bare (plan + show -json, start and stop): median {theirs:.2f} s")
        print(f"ratio: {ours / theirs:.2f} (target <= 1.2)")
        print(f"one bare terraform plan, for scale: median {median(plan_times):.2f} s")


if __name__ == "__main__":
    main()
