# Horae — developer entry points. `make test` and `make demo` need nothing else
# on a fresh Debian 12 machine with Python 3.11 and Go (run as root the first
# time: PostgreSQL and RabbitMQ are installed from Debian's packages).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: help venv services k8s lint typecheck format crds docs chart-readme unit test demo bench bench-venv peers-venv chaos clean

help:
	@echo "make test    set everything up, then lint, type-check and run the whole suite"
	@echo "make demo    bring services, control plane and Horae up locally and fire example jobs"
	@echo "make bench   run the benchmark suite, Horae and its peers (about an hour): bench/results/"
	@echo "make chaos   a chaos run of DURATION seconds of faults: make chaos SEED=7 DURATION=1800"
	@echo "make lint | typecheck | format | crds | docs | chart-readme | unit | bench-venv"

# The venv installs exactly what requirements.lock pins, each file checked against its hash
# (the images install the runtime part of it: Dockerfile), then horae itself, editable.
$(STAMP): pyproject.toml requirements.lock
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
		|| { echo "make: Python >= 3.11 required ($(PYTHON) is $$($(PYTHON) -V))" >&2; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check --require-hashes -r requirements.lock
	$(BIN)/pip install -q --disable-pip-version-check --no-deps -e '.[dev]'
	@touch $@

venv: $(STAMP)

services:
	@hack/services.sh

k8s:
	@hack/build-k8s.sh >/dev/null

lint: venv
	$(BIN)/ruff check horae tests bench
	$(BIN)/ruff format --check horae tests bench
	$(BIN)/lint-imports --no-cache

typecheck: venv
	$(BIN)/mypy --strict horae

format: venv
	$(BIN)/ruff format horae tests bench
	$(BIN)/ruff check --fix horae tests bench

crds: venv
	$(BIN)/python -m horae.resources

docs: venv
	$(BIN)/python -m horae.api.docs docs/api.md

# charts/horae/README.md, from README.md.in, values.schema.json and values.yaml.
chart-readme: venv
	$(BIN)/python hack/chart-readme.py

unit: venv
	$(BIN)/pytest -q tests/unit

# The whole suite, the short chaos run (120 s of faults, seed 20261130) included; the
# integration and e2e tests on a store split over the two clusters (tests/conftest.py). The
# 25 slowest tests are listed at the end: the suite is kept under 30 minutes.
test: venv services k8s lint typecheck audit
	@set -a; eval "$$(hack/services.sh env)"; set +a; \
		HORAE_TEST_STORE=split $(BIN)/pytest -q -p no:cacheprovider --durations=25

# A longer chaos run than the one `make test` includes (docs/reliability.md).
SEED     ?= 20261130
DURATION ?= 1800
chaos: venv services k8s
	@set -a; eval "$$(hack/services.sh env)"; set +a; \
		HORAE_CHAOS_SEED=$(SEED) HORAE_CHAOS_DURATION=$(DURATION) \
		$(BIN)/pytest -q -p no:cacheprovider -s -m chaos tests/chaos

# The locks, with the sha256 of every file of each pinned release (hack/lock.py):
# requirements.lock, horae's runtime and dev dependencies (their whole closure) as installed
# in the venv; requirements-runtime.lock, the runtime ones alone, and requirements-build.lock,
# what builds horae's wheel: both for the Dockerfile. `make lock` regenerates all three
# after a dependency change (it reads the hashes from the package index).
.PHONY: lock audit
lock: venv
	$(BIN)/pip install -q --disable-pip-version-check -e '.[dev]'
	@$(BIN)/python hack/lock.py

# Known vulnerabilities (PyPI's advisory data) in the locked versions (requirements.lock and
# requirements-build.lock); no resolution, no install: the locks are already pinned.
# hack/audit.py fails on any vulnerability and says so loudly when the advisory data cannot
# be read from this machine at all.
audit: venv
	@$(BIN)/python hack/audit.py

demo: venv services k8s
	@hack/demo.sh

BENCH_STAMP := $(VENV)/.bench-installed
$(BENCH_STAMP): pyproject.toml $(STAMP)
	$(BIN)/pip install -q --disable-pip-version-check -e '.[dev,bench]'
	@touch $@

# The `bench` extra in .venv: enough to run one benchmark module directly (README).
bench-venv: $(BENCH_STAMP)

# The peers (Procrastinate, Celery, APScheduler 3) in an environment of their own, pinned
# in bench/peers/requirements.txt; reinstalled only when that file changes.
PEERS_VENV  := .venv-peers
PEERS_STAMP := $(PEERS_VENV)/.installed
$(PEERS_STAMP): bench/peers/requirements.txt
	@test -x $(PEERS_VENV)/bin/python || $(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/pip install -q --disable-pip-version-check -r bench/peers/requirements.txt
	@touch $@

peers-venv: $(PEERS_STAMP)

# BENCH_ARGS="--scale 0.5 --only top,sustained --peers celery" narrows a run.
bench: $(BENCH_STAMP) peers-venv services k8s
	@set -a; eval "$$(hack/services.sh env)"; set +a; \
		$(BIN)/python -m bench.run $(BENCH_ARGS)

clean:
	rm -rf $(VENV) $(PEERS_VENV) .mypy_cache .ruff_cache .pytest_cache
