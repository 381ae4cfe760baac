# A workspace that is a directory and a process on the provisioner's own machine.
# It needs nothing but Terraform: handy to try Slipway, and what the test suite builds.
# For one person: every workspace of it runs as the daemon's one OS user on one network, so the workspaces of
# different people can reach each other's files, processes and ports (README "Workspaces that share an OS user or
# a network"). For a team, use examples/docker or examples/kubernetes.
terraform {
  required_providers {
    coder = {
      source = "coder/coder"
    }
  }
}

variable "workspaces_root" {
  type        = string
  description = "Where workspace directories are created on the provisioner's machine."
  default     = "/tmp/slipway-workspaces"
}

variable "agent_connection_timeout" {
  type        = number
  description = "Seconds an agent may stay unconnected (or gone) before the workspace shows it as timed out."
  default     = 120
}

data "coder_provisioner" "me" {}
data "coder_workspace" "me" {}
data "coder_workspace_owner" "me" {}

data "coder_parameter" "greeting" {
  name         = "greeting"
  display_name = "Greeting"
  description  = "Written to ~/greeting when the workspace starts."
  type         = "string"
  default      = "hello"
  mutable      = true
  validation {
    regex = "^[a-zA-Z ,.!]{1,64}$"
    error = "Use up to 64 letters, spaces and punctuation."
  }
}

data "coder_parameter" "shell" {
  name         = "shell"
  display_name = "Shell"
  description  = "The shell the workspace process runs."
  type         = "string"
  default      = "sh"
  mutable      = false
  option {
    name  = "POSIX sh"
    value = "sh"
  }
  option {
    name  = "Bash"
    value = "bash"
  }
}

data "coder_parameter" "dev_port" {
  name         = "dev_port"
  display_name = "Dev server port"
  description  = "Run a web server on this port in the workspace and open it as the Dev server app."
  type         = "number"
  default      = 8000
  mutable      = true
  validation {
    min = 1024
    max = 65535
  }
}

data "coder_parameter" "dev_share" {
  name         = "dev_share"
  display_name = "Who may open the Dev server"
  type         = "string"
  default      = "owner"
  mutable      = true
  option {
    name  = "Only me"
    value = "owner"
  }
  option {
    name  = "Anyone signed in"
    value = "authenticated"
  }
  option {
    name  = "Anyone with the link"
    value = "public"
  }
}

locals {
  # Where a new workspace's directory goes; once created it stays there (terraform_data.home), so that a change of
  # owner or name (a claimed prebuilt workspace) leaves the running workspace alone.
  new_dir = "${var.workspaces_root}/${data.coder_workspace_owner.me.name}/${data.coder_workspace.me.name}"
  dir     = terraform_data.home.output
}

resource "coder_agent" "main" {
  os                 = "linux"
  arch               = data.coder_provisioner.me.arch
  dir                = local.dir
  connection_timeout = var.agent_connection_timeout
  startup_script     = <<-EOT
    echo '${data.coder_parameter.greeting.value}' > greeting
    echo "Workspace $CODER_WORKSPACE_NAME is up: wrote '${data.coder_parameter.greeting.value}' to $PWD/greeting"
  EOT
  shutdown_script    = <<-EOT
    echo "stopped at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >> shutdown.log
    echo "Workspace $CODER_WORKSPACE_NAME is stopping: noted in $PWD/shutdown.log"
  EOT

  metadata {
    key          = "load"
    display_name = "Load average"
    script       = "cut -d' ' -f1-3 /proc/loadavg"
    interval     = 5
    timeout      = 1
  }
  metadata {
    key          = "disk"
    display_name = "Workspace size"
    script       = "du -sh . | cut -f1"
    interval     = 30
    timeout      = 5
  }
}

# Whatever listens on the dev port, reached through Slipway at /@<owner>/<workspace>.main/apps/dev/.
resource "coder_app" "dev" {
  agent_id     = coder_agent.main.id
  slug         = "dev"
  display_name = "Dev server"
  url          = "http://localhost:${data.coder_parameter.dev_port.value}"
  share        = data.coder_parameter.dev_share.value
  healthcheck {
    url       = "http://localhost:${data.coder_parameter.dev_port.value}"
    interval  = 5
    threshold = 3
  }
}

# The home directory: kept while the workspace exists (where it was created), removed when it is deleted.
resource "terraform_data" "home" {
  input = local.new_dir
  lifecycle {
    ignore_changes = [input]
  }

  provisioner "local-exec" {
    command = "mkdir -p '${self.input}' && echo '${data.coder_parameter.greeting.value}' > '${self.input}/greeting'"
  }

  provisioner "local-exec" {
    when    = destroy
    command = "rm -rf '${self.input}'"
  }
}

# The running workspace: a detached process that exists only while the workspace is started. It runs the
# agent's init script, and stops (with everything it started) when the workspace stops.
resource "terraform_data" "process" {
  count      = data.coder_workspace.me.start_count
  depends_on = [terraform_data.home]
  input = {
    dir   = local.dir
    shell = data.coder_parameter.shell.value
  }
  # A build that replaces the agent (a changed startup script, parameter or template while the workspace runs)
  # gives it a new id and token: the process restarts with them, or the old agent, refused, would be stranded.
  # A claim of a prebuilt workspace keeps the agent (nothing it is made of names the owner) and changes only its
  # token, which the server hands to the running agent: the process goes on.
  triggers_replace = [coder_agent.main.id]

  provisioner "local-exec" {
    environment = {
      WORKSPACE_DIR = local.dir
      # The directory is the workspace's home: shells start there and `scp file slipway.<ws>:` lands there,
      # not in the home of whoever runs the provisioner (shared by every workspace on this machine).
      HOME              = local.dir
      INIT_SCRIPT       = coder_agent.main.init_script
      CODER_AGENT_TOKEN = coder_agent.main.token
      # Each workspace's agent keeps its log and Git helper socket in its own directory, next to its files.
      SLIPWAY_AGENT_LOG_DIR = "${local.dir}/.slipway-agent"
    }
    # setsid + nohup + redirections: the process outlives this command, and Terraform does not wait for it.
    command = <<-EOT
      cd "$WORKSPACE_DIR"
      # Terraform hands this command the provisioner's CODER_* variables (build details, the init scripts of
      # every platform): a workspace keeps only its agent's token.
      for name in $(env | sed -n 's/^\(CODER_[A-Za-z0-9_]*\)=.*/\1/p'); do
        [ "$name" = CODER_AGENT_TOKEN ] || unset "$name"
      done
      # The agent's token goes to the agent alone (which hides its /proc files): the process that holds the
      # workspace open must not keep it in an environment any process of this OS user may read.
      setsid nohup ${self.input.shell} -c '
        if [ -n "$INIT_SCRIPT" ]; then printf "%s\n" "$INIT_SCRIPT" > init.sh; ${self.input.shell} init.sh >> agent.log 2>&1 & fi
        unset CODER_AGENT_TOKEN INIT_SCRIPT
        exec sleep 2147483647
      ' > workspace.log 2>&1 < /dev/null &
      echo $! > workspace.pid
    EOT
  }

  # Stop gracefully: SIGTERM to the workspace's process group (the agent runs its shutdown scripts, then exits),
  # up to 60 s for the group to end, then SIGKILL. A zombie does not count as running: where PID 1 does not
  # reap orphans (some containers) they stay until it does. dash's kill takes no "--" before a negative id.
  provisioner "local-exec" {
    when    = destroy
    command = <<-EOT
      pid_file='${self.input.dir}/workspace.pid'
      [ -f "$pid_file" ] || exit 0
      group=$(cat "$pid_file")
      running() {
        if command -v ps >/dev/null; then
          ps -A -o pgid= -o stat= | awk -v group="$group" '$1 == group && $2 !~ /^Z/ { found = 1 } END { exit !found }'
        else
          kill -0 -"$group" 2>/dev/null
        fi
      }
      kill -TERM -"$group" 2>/dev/null
      waited=0
      while running && [ "$waited" -lt 60 ]; do
        sleep 1
        waited=$((waited + 1))
      done
      kill -KILL -"$group" 2>/dev/null
      rm -f "$pid_file"
    EOT
  }
}

resource "coder_metadata" "home" {
  resource_id = terraform_data.home.id
  item {
    key   = "path"
    value = local.dir
  }
  item {
    key   = "owner"
    value = data.coder_workspace_owner.me.name
  }
}
