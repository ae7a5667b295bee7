# Horae — developer entry points. `make test` and `make demo` need nothing else
# on a fresh Debian 12 machine with Python 3.11 and Go (run as root the first
# time: PostgreSQL and RabbitMQ are installed from Debian's packages).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: help venv services k8s lint typecheck format crds docs unit test demo clean

help:
	@echo "make test    set everything up, then lint, type-check and run the whole suite"
	@echo "make demo    bring services, control plane and Horae up locally and fire example jobs"
	@echo "make lint | typecheck | format | crds | docs | unit"

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
		|| { echo "make: Python >= 3.11 required ($(PYTHON) is $$($(PYTHON) -V))" >&2; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -e '.[dev]'
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

unit: venv
	$(BIN)/pytest -q tests/unit

test: venv services k8s lint typecheck
	@set -a; eval "$$(hack/services.sh env)"; set +a; \
		$(BIN)/pytest -q -p no:cacheprovider

demo: venv services k8s
	@hack/demo.sh

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
