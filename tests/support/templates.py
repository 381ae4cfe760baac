"""Templates several end-to-end tests build."""

# A start build whose log comes in two parts 4 s apart: what live log streaming is checked against.
SLOW_TEMPLATE = """
terraform {
  required_providers {
    coder = { source = "coder/coder" }
  }
}
data "coder_workspace" "me" {}
resource "terraform_data" "slow" {
  count = data.coder_workspace.me.start_count
  provisioner "local-exec" {
    # printf, so the markers appear only in the output, not in Terraform's echo of the command
    command = "printf 'first%s\\n' -line-out; sleep 4; printf 'last%s\\n' -line-out"
  }
}
"""

# Imports fine (an import only plans), but every start fails in its apply; a stop has nothing to do.
FAILING_START_TEMPLATE = """
terraform {
  required_providers {
    coder = { source = "coder/coder" }
  }
}
data "coder_workspace" "me" {}
resource "terraform_data" "broken" {
  count = data.coder_workspace.me.start_count
  provisioner "local-exec" {
    command = "echo 'the start fails on purpose' >&2; exit 3"
  }
}
"""
