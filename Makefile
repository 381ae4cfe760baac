# Slipway's commands. `make run` and `make test` work on a fresh Debian machine with Python 3.11+.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT    := DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get

.DEFAULT_GOAL := help
.PHONY: help install install-dev agent-bundle system-deps image-deps image oidc-deps axe-deps run lint test test-quick bench clean

help: ## list the commands
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Slipway needs Python 3.11 or newer")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	@touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $@ $(VENV)/.installed

install: $(VENV)/.installed $(VENV)/.agent-bundle ## create .venv and install Slipway into it

install-dev: $(VENV)/.installed-dev $(VENV)/.agent-bundle ## install Slipway with the test and lint tools

# The wheels workspaces install the agent from, in the venv's default wheelhouse (PREFIX/share/slipway/agent-wheels).
agent-bundle: $(VENV)/.installed ## fetch the agent's wheels for workspaces from PyPI (again after an upgrade)
	$(BIN)/python -m cli.agent_bundle

# Once per pyproject.toml change, as part of install. Offline, install still succeeds, with one warning line:
# workspaces that download the agent wait until `make agent-bundle` has worked.
$(VENV)/.agent-bundle: pyproject.toml | $(VENV)/.installed
	@if $(BIN)/python -m cli.agent_bundle >$(VENV)/agent-bundle.log 2>&1; then tail -n 1 $(VENV)/agent-bundle.log; \
	else echo "warning: the agent bundle could not be built (see $(VENV)/agent-bundle.log); run 'make agent-bundle' later"; fi
	@touch $@

system-deps: ## install what the tests need from Debian: PostgreSQL, chromium, npm, OpenSSH's client, rsync, acl, git, nginx
	@missing=""; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	[ -x /usr/bin/chromium ] || missing="$$missing chromium"; \
	command -v npm >/dev/null || missing="$$missing npm"; \
	command -v scp >/dev/null || missing="$$missing openssh-client"; \
	command -v rsync >/dev/null || missing="$$missing rsync"; \
	command -v setfacl >/dev/null || missing="$$missing acl"; \
	command -v git >/dev/null || missing="$$missing git"; \
	[ -x /usr/sbin/nginx ] || missing="$$missing nginx"; \
	if [ -n "$$missing" ]; then \
		echo "Installing with apt-get:$$missing"; \
		$(APT) update -qq && $(APT) install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

# mmdebstrap builds the image's Debian, skopeo writes the docker archive; podman with runc runs it in the tests
# (crun refuses this kind of host's hybrid cgroups) and umoci unpacks it for inspection.
image-deps: ## install what builds and runs the container image: mmdebstrap, skopeo, umoci, podman, runc
	@missing=""; \
	for tool in mmdebstrap skopeo umoci podman runc; do command -v $$tool >/dev/null || missing="$$missing $$tool"; done; \
	if [ -n "$$missing" ]; then \
		echo "Installing with apt-get:$$missing"; \
		$(APT) update -qq && $(APT) install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

image: install image-deps ## build the OCI image: dist/image/ (layout, tags VERSION and latest) and dist/slipway-image.tar
	$(BIN)/python deploy/image/build.py

tests/oidc/node_modules/.installed: tests/oidc/package-lock.json
	npm ci --prefix tests/oidc --no-audit --no-fund --loglevel=error
	@touch $@

oidc-deps: system-deps tests/oidc/node_modules/.installed ## the OpenID provider the tests sign in with (npm oidc-provider, Node 22)

tests/axe/node_modules/.installed: tests/axe/package-lock.json
	npm ci --prefix tests/axe --no-audit --no-fund --loglevel=error
	@touch $@

axe-deps: system-deps tests/axe/node_modules/.installed ## axe-core, the accessibility checker the browser tests run (npm)

# As root, the built-in daemons run as the user slipway-provisioner, which must get through to this venv: when
# it sits under a closed directory (/root is 0700), the server lets that user traverse it and prints each change.
run: install ## run Slipway on http://127.0.0.1:3000 (SQLite and an embedded Redis in the data dir)
	$(BIN)/slipway server --provisioner-grant-access

lint: install-dev ## ruff, formatting, mypy --strict and the import contracts
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy app workers cli agent protocol
	$(BIN)/lint-imports

# Parallel workers: most tests wait on processes (servers, Terraform, agents, a browser), so more workers than cores
# finish sooner; tests/conftest.py groups each module on one worker and the fault tests on one worker of their own.
TEST_WORKERS ?= 4

test: install-dev system-deps image-deps oidc-deps axe-deps lint ## install everything the tests need, then lint and run the whole suite
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile

test-quick: install-dev lint ## lint, then the unit and in-process tests (no servers, browsers, faults or Terraform runs)
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile -m "not e2e and not browser and not faults and not terraform"

bench: install-dev ## run the benchmarks (they print figures; see bench/README.md)
	$(BIN)/python bench/api_latency.py

clean: ## remove the virtualenv and caches (your data dir is left alone)
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
