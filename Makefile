# ssd-parity. Every target bootstraps .venv on first use; the native module is rebuilt whenever a file under
# native/ (or pyproject.toml) is newer than the last build.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
DEPS_STAMP := $(VENV)/.deps-installed
NATIVE_STAMP := $(VENV)/.native-built
NATIVE_SOURCES := $(wildcard native/*.h native/*.cpp) native/CMakeLists.txt pyproject.toml
# Needed in the venv because the editable build runs without isolation (so incremental rebuilds stay fast).
BUILD_DEPS := "scikit-build-core>=0.10" "pybind11>=2.12" "scipy-openblas32>=0.3.28" cmake ninja

SCENARIO ?= default
STEPS ?= 16
LAYER ?= conf_head
PYTEST_ARGS ?=

.PHONY: install test parity diff faults sweep train-parity fixtures golden clean

install: $(NATIVE_STAMP)

$(PY):
	$(PYTHON) -m venv $(VENV)

$(DEPS_STAMP): pyproject.toml | $(PY)
	$(PIP) install --quiet $(BUILD_DEPS)
	$(PIP) install --quiet --no-build-isolation -e '.[test,plots]'
	touch $@

$(NATIVE_STAMP): $(DEPS_STAMP) $(NATIVE_SOURCES)
	$(PIP) install --quiet --no-build-isolation --no-deps -e .
	touch $@

test: install
	$(PY) -m pytest tests parity --junitxml=reports/junit.xml $(PYTEST_ARGS)

parity: install
	$(PY) -m parity run --scenario $(SCENARIO)

diff: install
	$(PY) -m parity diff $(LAYER) --scenario $(SCENARIO)

# Training-trajectory parity on the narrow config (16 steps: about 4 minutes on 2 cores).
train-parity: install
	$(PY) -m parity train --steps $(STEPS)

# Regenerate the golden traces (fixtures/golden); fails if their content changed, unless FORCE=1.
fixtures: install
	$(PY) -m parity fixtures $(if $(FORCE),--force-regen,)

# The native module against the golden traces, without importing torch.
golden: install
	$(PY) -m parity golden

faults: install
	$(PY) -m parity faults

# The clean sweep over generated scenarios (about 20 minutes on 2 cores); its report is reports/generated.json.
sweep: install
	PARITY_GENERATED_EXAMPLES=60 $(PY) -m pytest parity/test_generated.py --parity-report reports/generated.json $(PYTEST_ARGS)

clean:
	rm -rf build reports $(NATIVE_STAMP)
