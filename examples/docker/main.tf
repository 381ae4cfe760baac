# A workspace that is a Docker container with a persistent home volume.
# The provisioner daemon needs access to a Docker daemon (e.g. /var/run/docker.sock).
terraform {
  required_providers {
    coder = {
      source  = "coder/coder"
      version = ">= 2.0"
    }
    docker = {
      source  = "kreuzwerker/docker"
      version = "~> 3.0"
    }
  }
}

variable "docker_socket" {
  type        = string
  description = "The Docker daemon to create workspaces on (empty: the provider's default)."
  default     = ""
}

provider "docker" {
  host = var.docker_socket != "" ? var.docker_socket : null
}

data "coder_provisioner" "me" {}
data "coder_workspace" "me" {}
data "coder_workspace_owner" "me" {}

data "coder_parameter" "image" {
  name         = "image"
  display_name = "Image"
  description  = "The container image of the workspace."
  type         = "string"
  default      = "codercom/enterprise-base:ubuntu"
  mutable      = true
  option {
    name  = "Ubuntu"
    value = "codercom/enterprise-base:ubuntu"
  }
  option {
    name  = "Node.js"
    value = "codercom/enterprise-node:ubuntu"
  }
  option {
    name  = "Go"
    value = "codercom/enterprise-golang:ubuntu"
  }
}

data "coder_parameter" "cpus" {
  name         = "cpus"
  display_name = "CPUs"
  description  = "CPU cores the container may use."
  type         = "number"
  default      = "2"
  mutable      = true
  validation {
    min = 1
    max = 8
  }
}

resource "coder_agent" "main" {
  os             = "linux"
  arch           = data.coder_provisioner.me.arch
  dir            = "/home/coder"
  startup_script = <<-EOT
    set -e
    # Seed the home directory on first start.
    if [ ! -f ~/.init_done ]; then
      cp -rT /etc/skel ~ && touch ~/.init_done
    fi
  EOT

  env = {
    GIT_AUTHOR_NAME     = coalesce(data.coder_workspace_owner.me.full_name, data.coder_workspace_owner.me.name)
    GIT_AUTHOR_EMAIL    = data.coder_workspace_owner.me.email
    GIT_COMMITTER_NAME  = coalesce(data.coder_workspace_owner.me.full_name, data.coder_workspace_owner.me.name)
    GIT_COMMITTER_EMAIL = data.coder_workspace_owner.me.email
  }

  metadata {
    display_name = "CPU usage"
    key          = "cpu"
    script       = "top -bn1 | awk '/Cpu\\(s\\)/ { print 100 - $8 \"%\" }'"
    interval     = 10
    timeout      = 2
  }
  metadata {
    display_name = "Memory used"
    key          = "memory"
    script       = "free -m | awk '/Mem:/ { printf \"%d / %d MiB\", $3, $2 }'"
    interval     = 10
    timeout      = 2
  }
  metadata {
    display_name = "Home disk"
    key          = "disk"
    script       = "df -h /home/coder | awk 'NR==2 { print $3 \" / \" $2 }'"
    interval     = 60
    timeout      = 2
  }
}

resource "coder_app" "code-server" {
  agent_id     = coder_agent.main.id
  slug         = "code-server"
  display_name = "code-server"
  url          = "http://localhost:13337/?folder=/home/coder"
  icon         = "/icon/code.svg"
  subdomain    = false
  share        = "owner"

  healthcheck {
    url       = "http://localhost:13337/healthz"
    interval  = 5
    threshold = 6
  }
}

resource "coder_script" "code_server" {
  agent_id     = coder_agent.main.id
  display_name = "code-server"
  run_on_start = true
  script       = <<-EOT
    curl -fsSL https://code-server.dev/install.sh | sh -s -- --method=standalone --prefix=/tmp/code-server
    /tmp/code-server/bin/code-server --auth none --port 13337 >/tmp/code-server.log 2>&1 &
  EOT
}

# Home survives stops and restarts; only deleting the workspace removes it.
resource "docker_volume" "home" {
  name = "slipway-${data.coder_workspace.me.id}-home"
  lifecycle {
    ignore_changes = all
  }
  labels {
    label = "slipway.owner"
    value = data.coder_workspace_owner.me.name
  }
  labels {
    label = "slipway.workspace_id"
    value = data.coder_workspace.me.id
  }
}

resource "docker_container" "workspace" {
  count    = data.coder_workspace.me.start_count
  image    = data.coder_parameter.image.value
  name     = "slipway-${data.coder_workspace_owner.me.name}-${lower(data.coder_workspace.me.name)}"
  hostname = data.coder_workspace.me.name
  cpu_set  = "0-${data.coder_parameter.cpus.value - 1}"
  # The agent reaches the server through the host, whatever its access URL says for localhost.
  entrypoint = ["sh", "-c", replace(coder_agent.main.init_script, "/localhost|127\\.0\\.0\\.1/", "host.docker.internal")]
  env        = ["CODER_AGENT_TOKEN=${coder_agent.main.token}"]

  host {
    host = "host.docker.internal"
    ip   = "host-gateway"
  }
  volumes {
    container_path = "/home/coder"
    volume_name    = docker_volume.home.name
    read_only      = false
  }
  labels {
    label = "slipway.owner"
    value = data.coder_workspace_owner.me.name
  }
  labels {
    label = "slipway.workspace_id"
    value = data.coder_workspace.me.id
  }
}

resource "coder_metadata" "container" {
  count       = data.coder_workspace.me.start_count
  resource_id = docker_container.workspace[0].id
  item {
    key   = "image"
    value = data.coder_parameter.image.value
  }
  item {
    key   = "cpus"
    value = data.coder_parameter.cpus.value
  }
}
