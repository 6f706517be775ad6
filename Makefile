# The README's two commands: `make demo` and `make test`. Each does its own set-up.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))

.PHONY: demo test test-fast test-compat lint format typecheck unit integration bench soak model-long clean venv

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,postgres]'
	touch $(STAMP)

# Spark puts PySpark's own pyspark.zip first on the path of every Python process it starts,
# and a zip's modules are compiled from source at every import (zipimport writes no cache):
# the venv's copy gets a compiled module beside each source (0.78 s against 0.34 s of CPU
# per worker start; integration_tests/support/compiled_pyspark_zip.py says more).
PYSPARK_ZIP := $(VENV)/.pyspark-zip-compiled

$(PYSPARK_ZIP): $(STAMP)
	$(PY) -W ignore -m integration_tests.support.compiled_pyspark_zip
	touch $@

venv: $(PYSPARK_ZIP)

demo: $(PYSPARK_ZIP)
	$(PY) -m connectors.demo

# ruff and mypy are pinned in pyproject.toml's dev extra; .pre-commit-config.yaml runs the same.
LINT_PATHS := txn connectors minikafka tests integration_tests benchmarks conftest.py

lint: $(STAMP)
	$(VENV)/bin/ruff check $(LINT_PATHS)
	$(VENV)/bin/ruff format --check $(LINT_PATHS)

format: $(STAMP)
	$(VENV)/bin/ruff check --fix $(LINT_PATHS)
	$(VENV)/bin/ruff format $(LINT_PATHS)

typecheck: $(STAMP)
	$(VENV)/bin/mypy

unit: $(STAMP)
	$(PY) -m pytest tests -q

integration: $(PYSPARK_ZIP)
	$(PY) -m pytest integration_tests -q

# `make test` runs two pytest commands side by side: the tests that share one standalone
# cluster or one Connect server (markers `cluster`, `connect`) in one process, and the rest
# spread over TEST_WORKERS pytest-xdist processes. Most of the suite waits on subprocesses
# (Spark JVMs, brokers, applications killed and restarted), so this keeps two cores busy.
# The shared-server run's output follows the main run's; either failing fails the target.
TEST_WORKERS ?= 2
SHARED_SERVER_TESTS := cluster or connect
# The suite starts a few hundred short-lived JVMs (Spark drivers, executors, cluster
# daemons); C2 compilation and parallel GC cost them more CPU than they save: measured
# 61 s against 83 s for one application-kill test, side by side.
TEST_JAVA_OPTIONS := -XX:TieredStopAtLevel=1 -XX:+UseSerialGC
# Class data sharing: every test JVM maps the classes a small Spark workload loaded
# (integration_tests/support/class_archive.py) from an archive in the venv, written once,
# instead of loading and verifying them again: a third less CPU per JVM (measured 49 s
# against 32 s for two application-kill tests). A JVM whose class path differs ignores the
# archive; -Xlog keeps its warning off stdout (the applications' EPOCH lines go there).
CLASS_ARCHIVE := spark-classes.jsa
CDS_QUIET := -Xlog:cds=off,cds+dynamic=off

# The venv's archive (its PySpark's jars); if it cannot be written, the tests run without it.
$(VENV)/$(CLASS_ARCHIVE): $(PYSPARK_ZIP) integration_tests/support/class_archive.py
	@rm -f $@; JAVA_TOOL_OPTIONS="$(TEST_JAVA_OPTIONS) $(CDS_QUIET) -XX:ArchiveClassesAtExit=$(abspath $@)" \
	  $(PY) -m integration_tests.support.class_archive >$(VENV)/class-archive.log 2>&1 \
	  || { rm -f $@; echo "no class archive (see $(VENV)/class-archive.log): JVMs start without it"; }

# Spark gives a Python worker it starts for a Python data source or a Connect foreachBatch
# a fixed 10 s to connect back (PythonWorkerFactory; no setting changes it). On a loaded
# 2-core machine running the suite's JVMs side by side, the worker's start-up can take
# longer, and the query fails with Spark's "Python worker failed to connect back". A test
# that failed with that error (and no other) runs again, at most three times, each after
# 20 s: a CI run failed one test three times in a row, immediately one after the other, while
# the two longest tests of the suite ran beside it. The same holds for PySpark's
# CANNOT_OPEN_SOCKET: the driver's one-connection local server for a collect's results
# (an ephemeral port) refused its client with "Authentication failed" at once, which is
# what any other connection reaching that port first causes (a CI run had one in 3,700
# tests; librdkafka clients of earlier tests' stopped brokers keep reconnecting to their
# old ports every second).
SPARK_WORKER_RERUN := --reruns 3 --reruns-delay 20 --only-rerun "Python worker failed to connect back" \
  --only-rerun "CANNOT_OPEN_SOCKET"

test: lint typecheck $(VENV)/$(CLASS_ARCHIVE)
	@export JAVA_TOOL_OPTIONS="$(TEST_JAVA_OPTIONS) $(CDS_QUIET) -XX:SharedArchiveFile=$(abspath $(VENV)/$(CLASS_ARCHIVE))"; \
	log=$$(mktemp); \
	$(PY) -m pytest -q -m "$(SHARED_SERVER_TESTS)" $(SPARK_WORKER_RERUN) --durations=10 >$$log 2>&1 & shared=$$!; \
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal -m "not ($(SHARED_SERVER_TESTS))" $(SPARK_WORKER_RERUN) --durations=25; \
	rest=$$?; wait $$shared; status=$$?; \
	echo "=== tests marked $(SHARED_SERVER_TESTS) (one process) ==="; cat $$log; rm -f $$log; \
	echo "make test: main run exit $$rest, shared-server run exit $$status"; \
	test $$rest -eq 0 && test $$status -eq 0

# The smoke set (tests marked `compat`) on the Spark lines other than the main venv's
# (README, "Supported Spark versions"): one venv per pinned PySpark under .venv-compat/,
# built once per version and pyproject.toml with the kit installed editable, then the
# lines one after the other; every line runs, and any failing fails the target.
COMPAT_SPARK ?= 3.5.9 4.0.5
COMPAT_DIR   := .venv-compat
COMPAT_STAMPS := $(COMPAT_SPARK:%=$(COMPAT_DIR)/%/.installed)

$(COMPAT_DIR)/%/.installed: pyproject.toml
	$(PYTHON) -m venv $(COMPAT_DIR)/$*
	$(COMPAT_DIR)/$*/bin/python -m pip install --quiet --upgrade pip
	$(COMPAT_DIR)/$*/bin/python -m pip install --quiet -e '.[dev]' 'pyspark==$*'
	$(COMPAT_DIR)/$*/bin/python -W ignore -m integration_tests.support.compiled_pyspark_zip
	touch $@

# No class archive here: writing one per line costs about what its few JVMs would save.
test-compat: $(COMPAT_STAMPS)
	@export JAVA_TOOL_OPTIONS="$(TEST_JAVA_OPTIONS)"; failed=""; \
	for v in $(COMPAT_SPARK); do \
	  py=$(abspath $(COMPAT_DIR))/$$v/bin/python; start=$$(date +%s); \
	  echo "=== test-compat: PySpark $$v ==="; \
	  PYSPARK_PYTHON=$$py PYSPARK_DRIVER_PYTHON=$$py $$py -m pytest -q -m compat $(SPARK_WORKER_RERUN) \
	    -W ignore::DeprecationWarning --durations=5 || failed="$$failed $$v"; \
	  echo "=== test-compat: PySpark $$v took $$(( $$(date +%s) - start )) s ==="; \
	done; \
	test -z "$$failed" || { echo "make test-compat: failed on PySpark$$failed"; exit 1; }

# The developer's loop: lint, types, unit tests and the integration tests that need
# neither Spark nor whole applications (well under two minutes).
test-fast: lint typecheck
	$(PY) -m pytest -q -m "not spark and not e2e"

bench: $(PYSPARK_ZIP)
	$(PY) -m benchmarks

# The model-based test of ordinary use with many more examples (hours; EOS_MODEL_EXAMPLES and
# EOS_MODEL_STEPS override the counts). Its tests run only with --model-long: any other
# run, `make test` included, skips them.
MODEL_LONG_TESTS := integration_tests/model/test_ordinary_use.py::test_ordinary_use_long

model-long: $(STAMP)
	$(PY) -m pytest -q --model-long $(MODEL_LONG_TESTS)

# The longer duplicates of scenarios make test covers (tests marked soak, run with --soak:
# the e2e chaos tests under the reference producer strategy), the randomized soak run, then
# the memory soak of a streaming exactly-once query (SOAK_MINUTES long).
SOAK_MINUTES ?= 60
soak: $(PYSPARK_ZIP)
	$(PY) -m pytest -q --soak -m soak integration_tests
	$(PY) -m integration_tests.support.soak
	$(PY) -m benchmarks.soak_memory --minutes $(SOAK_MINUTES)

clean:
	rm -rf $(VENV) $(COMPAT_DIR) .pytest_cache .mypy_cache .ruff_cache
