# Joiner: every target installs what it needs into .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
STAMP := $(VENV)/.installed-stamp
LOCAL_STAMP := $(VENV)/.local-stamp
export PATH := $(BIN):$(PATH)
export JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION := 1
export JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION := 1

# The CDK CLI: pinned in package.json/package-lock.json, installed by `npm ci` into node_modules/
# and run with the venv's Python as the app (cdk.json's "python3" may be another interpreter).
NPM ?= npm
CDK := $(CURDIR)/node_modules/.bin/cdk
CDK_STAMP := node_modules/.installed-stamp
CDK_APP := $(BIN)/python $(CURDIR)/app.py
# No update check, no notices or telemetry fetched: the CLI talks only to the account it deploys to.
CDK_ENV := CDK_DISABLE_VERSION_CHECK=true CDK_DISABLE_CLI_TELEMETRY=true
CDK_FLAGS = --app "$(CDK_APP)" --no-notices -c clusterName=$(CLUSTER) $(if $(REGION),-c region=$(REGION))
CDK_REGION_ENV = $(if $(REGION),AWS_REGION=$(REGION) AWS_DEFAULT_REGION=$(REGION))
CLUSTER ?=
REGION ?=
CDK_ARGS ?=

.PHONY: install demo test bench soak synth lint clean cdk-cli deploy bootstrap destroy require-cluster kube kube-versions

# Two install purposes, so the demo does not wait for the development toolset (CDK, Node, SciPy,
# checkers: about 1 GB): LOCAL_STAMP is the runtime plus moto's server and the Kubernetes API
# emulator (what `make demo` runs); STAMP adds the rest (tests, lint, synth, benchmarks).
# pip prints what it collects and installs, so a first run shows its progress.
PIP_INSTALL = $(BIN)/python -m pip install --progress-bar off --disable-pip-version-check

$(VENV)/.venv-stamp:
	$(PYTHON) -c 'import sys; sys.exit("Joiner needs Python >= 3.11") if sys.version_info < (3, 11) else None'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	touch $@

$(LOCAL_STAMP): pyproject.toml $(VENV)/.venv-stamp
	@echo "==> installing Joiner with its runtime, moto and the Kubernetes API emulator into $(VENV)/ (the demo's needs)"
	$(PIP_INSTALL) -e '.[local]'
	touch $(LOCAL_STAMP)

$(STAMP): pyproject.toml $(LOCAL_STAMP)
	@echo "==> installing the development toolset into $(VENV)/ (CDK, cfn-lint, cdk-nag, pytest, mypy, ruff, SciPy)"
	$(PIP_INSTALL) -e '.[local,dev]'
	touch $(STAMP)

install: $(STAMP)

## The README's first command: the main job on the embedded local default.
demo: $(LOCAL_STAMP)
	$(BIN)/joiner demo

## The README's second command: static checks, the real Kubernetes binaries, then the whole suite (unit, handler,
## end-to-end, synth, cfn-lint, cdk-nag, and tests/realkube against a real API server).
test: lint kube
	$(BIN)/python -m pytest -q -p no:cacheprovider

## Static checks: ruff's rules (pyproject.toml), ruff's formatting and mypy (strict on layers/, testworld/, functions/, infra/; basic on bench/, tests/).
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

## etcd, kube-apiserver, kube-scheduler and kubectl for the real Kubernetes tier (tools/kube/go.mod pins the versions; needs Go):
## built once into .cache/kube/<version>/, reused while their versions match (docs/kubernetes.md).
kube:
	@tools/kube/build.sh >/dev/null

kube-versions:
	@tools/kube/build.sh --versions

bench: $(STAMP)
	$(BIN)/python -m bench.schedule
	$(BIN)/python -m bench.volumes
	$(BIN)/python -m bench.cost
	$(BIN)/python -m bench.plan_mix
	$(BIN)/python -m bench.cost_of_running
	$(BIN)/python -m bench.latency
	$(BIN)/python -m bench.scan
	$(BIN)/python -m bench.interruption
	$(BIN)/python -m bench.disruption
	$(BIN)/python -m bench.coldstart
	$(BIN)/python -m bench.scale

## The fault-injection soak: 200 seeds of crashes, redeliveries, overlaps and API faults (see docs/soak.md).
soak: $(STAMP)
	$(BIN)/python -m bench.soak --seeds 200

synth: $(STAMP)
	$(BIN)/python -m infra.synth

$(CDK_STAMP): package.json package-lock.json
	$(NPM) ci --no-audit --no-fund
	touch $(CDK_STAMP)

## The pinned CDK CLI in node_modules/ (npm ci).
cdk-cli: $(CDK_STAMP)

require-cluster:
	@test -n "$(CLUSTER)" || { echo "usage: make $(MAKECMDGOALS) CLUSTER=<eks-cluster-name> [REGION=<aws-region>] [CDK_ARGS='-c alarmEmail=ops@example.com']" >&2; exit 2; }

## Deploy Joiner for an EKS cluster: make deploy CLUSTER=my-cluster [REGION=eu-west-1] [CDK_ARGS=...]
deploy: require-cluster $(STAMP) $(CDK_STAMP)
	$(CDK_ENV) $(CDK_REGION_ENV) $(CDK) deploy $(CDK_FLAGS) $(CDK_ARGS)

## The CDK bootstrap stack in the target account and region (once per account and region).
bootstrap: require-cluster $(STAMP) $(CDK_STAMP)
	$(CDK_ENV) $(CDK_REGION_ENV) $(CDK) bootstrap $(CDK_FLAGS) $(CDK_ARGS)

destroy: require-cluster $(STAMP) $(CDK_STAMP)
	-$(VENV)/bin/joiner uninstall    # Joiner's finalizers go first: nothing may wait on a Joiner that is gone
	$(CDK_ENV) $(CDK_REGION_ENV) $(CDK) destroy $(CDK_FLAGS) $(CDK_ARGS)

clean:
	rm -rf $(VENV) node_modules cdk.out .pytest_cache .hypothesis .mypy_cache .ruff_cache
