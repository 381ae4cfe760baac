# A workspace that is a Kubernetes Deployment (one pod) with a persistent volume claim for its home.
terraform {
  required_providers {
    coder = {
      source  = "coder/coder"
      version = ">= 2.0"
    }
    kubernetes = {
      source  = "hashicorp/kubernetes"
      version = "~> 2.23"
    }
  }
}

variable "namespace" {
  type        = string
  description = "The namespace to create workspaces in (it must exist)."
}

variable "use_kubeconfig" {
  type        = bool
  description = "Use ~/.kube/config of the provisioner's machine (true) or the in-cluster service account (false)."
  default     = false
}

provider "kubernetes" {
  config_path = var.use_kubeconfig ? "~/.kube/config" : null
}

data "coder_provisioner" "me" {}
data "coder_workspace" "me" {}
data "coder_workspace_owner" "me" {}

data "coder_parameter" "cpu" {
  name         = "cpu"
  display_name = "CPU"
  description  = "CPU cores (limit; the request is half)."
  type         = "number"
  default      = "2"
  mutable      = true
  option {
    name  = "2 cores"
    value = "2"
  }
  option {
    name  = "4 cores"
    value = "4"
  }
  option {
    name  = "8 cores"
    value = "8"
  }
}

data "coder_parameter" "memory" {
  name         = "memory"
  display_name = "Memory (GiB)"
  type         = "number"
  default      = "4"
  mutable      = true
  validation {
    min = 1
    max = 32
  }
}

data "coder_parameter" "home_disk_size" {
  name         = "home_disk_size"
  display_name = "Home disk (GiB)"
  description  = "Size of the home volume. It can grow, never shrink."
  type         = "number"
  default      = "10"
  mutable      = true
  validation {
    min       = 1
    max       = 500
    monotonic = "increasing"
  }
}

locals {
  name = "slipway-${lower(data.coder_workspace_owner.me.name)}-${lower(data.coder_workspace.me.name)}"
  labels = {
    "app.kubernetes.io/name"     = "slipway-workspace"
    "app.kubernetes.io/instance" = local.name
    "slipway/workspace-id"       = data.coder_workspace.me.id
    "slipway/owner"              = data.coder_workspace_owner.me.name
  }
}

resource "coder_agent" "main" {
  os             = "linux"
  arch           = data.coder_provisioner.me.arch
  dir            = "/home/coder"
  startup_script = "test -f ~/.init_done || { cp -rT /etc/skel ~ && touch ~/.init_done; }"

  metadata {
    display_name = "Home disk"
    key          = "disk"
    script       = "df -h /home/coder | awk 'NR==2 { print $3 \" / \" $2 }'"
    interval     = 60
    timeout      = 2
  }
}

resource "kubernetes_persistent_volume_claim" "home" {
  metadata {
    name      = "${local.name}-home"
    namespace = var.namespace
    labels    = local.labels
  }
  wait_until_bound = false
  spec {
    access_modes = ["ReadWriteOnce"]
    resources {
      requests = {
        storage = "${data.coder_parameter.home_disk_size.value}Gi"
      }
    }
  }
}

resource "kubernetes_deployment" "main" {
  count            = data.coder_workspace.me.start_count
  wait_for_rollout = false
  metadata {
    name      = local.name
    namespace = var.namespace
    labels    = local.labels
  }
  spec {
    replicas = 1
    selector {
      match_labels = local.labels
    }
    strategy {
      type = "Recreate"
    }
    template {
      metadata {
        labels = local.labels
      }
      spec {
        security_context {
          run_as_user     = 1000
          run_as_non_root = true
          fs_group        = 1000
        }
        container {
          name              = "dev"
          image             = "codercom/enterprise-base:ubuntu"
          image_pull_policy = "IfNotPresent"
          command           = ["sh", "-c", coder_agent.main.init_script]
          security_context {
            run_as_user = 1000
          }
          env {
            name  = "CODER_AGENT_TOKEN"
            value = coder_agent.main.token
          }
          resources {
            requests = {
              cpu    = "${data.coder_parameter.cpu.value * 500}m"
              memory = "${data.coder_parameter.memory.value}Gi"
            }
            limits = {
              cpu    = data.coder_parameter.cpu.value
              memory = "${data.coder_parameter.memory.value}Gi"
            }
          }
          volume_mount {
            mount_path = "/home/coder"
            name       = "home"
            read_only  = false
          }
        }
        volume {
          name = "home"
          persistent_volume_claim {
            claim_name = kubernetes_persistent_volume_claim.home.metadata[0].name
            read_only  = false
          }
        }
      }
    }
  }
}
