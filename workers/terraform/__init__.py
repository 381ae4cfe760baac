"""The Terraform executor the provisioner daemon uses (see DESIGN.md, "Terraform")."""

from workers.terraform.binary import TerraformBinary, TerraformNotFoundError, bundled_terraform, find_terraform
from workers.terraform.environment import build_coder_env, parameter_env_name, terraform_environment
from workers.terraform.executor import (
    NOTHING_TO_DO,
    ApplyResult,
    PlanResult,
    TerraformCanceledError,
    TerraformError,
    TerraformExecutor,
    Transition,
    job_workdir,
)
from workers.terraform.logs import APPLY_STAGES, LogCallback
from workers.terraform.variables import (
    TemplateSyntaxError,
    read_readme,
    read_variables,
    required_variables_missing,
)

__all__ = [
    "APPLY_STAGES",
    "NOTHING_TO_DO",
    "ApplyResult",
    "LogCallback",
    "PlanResult",
    "TemplateSyntaxError",
    "TerraformBinary",
    "TerraformCanceledError",
    "TerraformError",
    "TerraformExecutor",
    "TerraformNotFoundError",
    "Transition",
    "build_coder_env",
    "bundled_terraform",
    "find_terraform",
    "job_workdir",
    "parameter_env_name",
    "read_readme",
    "read_variables",
    "required_variables_missing",
    "terraform_environment",
]
