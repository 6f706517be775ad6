# The README's two commands: `make demo` and `make test`. Each does its own set-up.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))

.PHONY: demo test test-fast lint typecheck layering unit integration bench soak clean venv

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,postgres]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(PY) -m connectors.demo

lint: $(STAMP)
	$(VENV)/bin/ruff check txn connectors minikafka tests integration_tests benchmarks

typecheck: $(STAMP)
	$(VENV)/bin/mypy

unit: $(STAMP)
	$(PY) -m pytest tests -q

integration: $(STAMP)
	$(PY) -m pytest integration_tests -q

# Test processes of `make test` (pytest-xdist). Most of the suite waits on subprocesses
# (Spark JVMs, brokers, killed and restarted applications), so four processes keep two
# cores busy; tests that share one cluster or Connect server stay in one process.
TEST_WORKERS ?= 4

test: lint typecheck
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --durations=25

# The developer's loop: lint, types, unit tests and the integration tests that need
# neither Spark nor whole applications (well under two minutes).
test-fast: lint typecheck
	$(PY) -m pytest -q -m "not spark and not e2e and not soak"

bench: $(STAMP)
	$(PY) -m benchmarks

soak: $(STAMP)
	$(PY) -m connectors.testing.soak

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
