# ssd-parity. Every target bootstraps .venv on first use; the native module is rebuilt whenever a file under
# native/ (or pyproject.toml) is newer than the last build.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
DEPS_STAMP := $(VENV)/.deps-installed
NATIVE_STAMP := $(VENV)/.native-built
NATIVE_SOURCES := $(wildcard native/*.h native/*.cpp native/*/*.h native/*/*.cpp parity/kernels/*.h parity/kernels/*.cpp) native/CMakeLists.txt native/native_build.cmake \
	parity/kernels/CMakeLists.txt CMakeLists.txt pyproject.toml
# Needed in the venv because the editable build runs without isolation (so incremental rebuilds stay fast).
BUILD_DEPS := "scikit-build-core>=0.10" "pybind11>=2.12" "scipy-openblas32>=0.3.28" cmake ninja

SCENARIO ?= default
MODEL ?= ssd300
STEPS ?= 16
LAYER ?= conf_head
PYTEST_ARGS ?=
# Set, make test fails if the test process tree's peak resident memory exceeds it (conftest.py always prints the
# peak). Not set by default: the peak is 6.3-6.95 GB on Zen 3 and 6.8-7.2 GB on Zen 4, at the 7 GB goal.
MEMORY_BUDGET_GB ?=

.PHONY: install test parity diff faults sweep matrix train-parity fixtures golden asan bench example-port clean

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
	$(PY) -m pytest tests parity --junitxml=reports/junit.xml $(if $(MEMORY_BUDGET_GB),--memory-budget-gb $(MEMORY_BUDGET_GB)) $(PYTEST_ARGS)

parity: install
	$(PY) -m parity run --model $(MODEL) --scenario $(SCENARIO)

diff: install
	$(PY) -m parity diff $(LAYER) --scenario $(SCENARIO)

# Training-trajectory parity on the narrow config (16 steps: about a minute on 2 cores).
train-parity: install
	$(PY) -m parity train --steps $(STEPS)

# Regenerate the golden traces (fixtures/golden); fails if their content changed, unless FORCE=1.
fixtures: install
	$(PY) -m parity fixtures $(if $(FORCE),--force-regen,)

# The native module against the golden traces, without importing torch.
golden: install
	$(PY) -m parity golden

# The native module built with AddressSanitizer + UndefinedBehaviorSanitizer (+ _GLIBCXX_ASSERTIONS), run under the
# fuzz tests, the bad-input, guard and golden tests, every narrow parity case and ResNet-8 (its module sanitized too;
# without ResNet-8, measured: 10.4 minutes alone, 37 while the
# machine also ran another sweep; ASAN_CASES="narrow-B1 or two_steps" for batch 1 and the two-step case: 7.5 minutes
# alone); any sanitizer report stops the run.
ASAN_BUILD := build/asan
EXT_SUFFIX = $(shell $(PY) -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
ASAN_CASES ?= narrow
asan: install
	$(VENV)/bin/cmake -S native -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSSD_SANITIZE=ON \
		-DPython_EXECUTABLE=$(abspath $(PY)) -Dpybind11_DIR=$$($(PY) -c "import pybind11; print(pybind11.get_cmake_dir())")
	$(VENV)/bin/cmake --build $(ASAN_BUILD)
	ASAN_OPTIONS=detect_leaks=0:halt_on_error=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libstdc++.so)" \
		$(PY) -m parity.sanitized $(foreach m,ssd_native resnet8_native,$(ASAN_BUILD)/$(m)$(EXT_SUFFIX)) \
		tests/test_fuzz_native.py tests/test_bad_input.py tests/test_resnet8_bad_input.py tests/test_scratch_guards.py \
		tests/test_golden.py parity \
		-k "($(ASAN_CASES)) and not ssd300 and not default and not generated and not somewhere or test_fuzz or test_bad or test_scratch or test_golden or resnet8" \
		-p no:cacheprovider --parity-report reports/asan-report.json

# The example port (examples/c_port): a C++ program on the native C++ API and native/include/parity_dump.h reads the
# narrow scenario's inputs, writes a full step dump and every stage computed alone on the reference's stage inputs,
# and the dump is compared, propagated and isolated (--require all). FAULT=<name> switches a catalogued fault on in
# the program: the comparison then fails where it starts.
EXAMPLE := build/example-port
example-port: install
	$(VENV)/bin/cmake -S examples/c_port -B $(EXAMPLE) -G Ninja -DOPENBLAS_PYTHON=$(abspath $(PY)) > /dev/null
	$(VENV)/bin/cmake --build $(EXAMPLE)
	rm -rf $(EXAMPLE)/inputs $(EXAMPLE)/stages $(EXAMPLE)/dump && mkdir -p $(EXAMPLE)/dump
	$(PY) -m parity inputs --scenario narrow --batch-size 2 --out $(EXAMPLE)/inputs
	$(PY) -m parity stage-inputs --scenario narrow --batch-size 2 --out $(EXAMPLE)/stages
	$(if $(FAULT),SSD_PORT_FAULT=$(FAULT) ,)$(EXAMPLE)/ssd_port $(EXAMPLE)/inputs $(EXAMPLE)/dump $(EXAMPLE)/stages
	$(PY) -m parity compare --native-dump $(EXAMPLE)/dump --require all --report reports/example-port.json

faults: install
	$(PY) -m parity faults

# The clean sweep over generated scenarios (about 20 minutes on 2 cores); its report is reports/generated.json.
sweep: install
	PARITY_GENERATED_EXAMPLES=60 $(PY) -m pytest parity/test_generated.py --parity-report reports/generated.json $(PYTEST_ARGS)

# The sweep under every CPU path of both sides (PyTorch: oneDNN/ATen AVX-512 where present, AVX2, baseline; native:
# the GEMM's AVX-512 or AVX2 tile, or the im2col GEMM for every 3x3 conv) at 1 and 2 threads (parity/matrix.py):
# reports under reports/matrix/. MATRIX_CELLS picks cells, MATRIX_SELECT the cases (pytest -k), MATRIX_GENERATED
# the generated scenarios per cell (60: about 30 minutes a cell on 2 cores).
MATRIX_GENERATED ?= 60
matrix: install
	$(PY) -m parity matrix --generated $(MATRIX_GENERATED) $(if $(MATRIX_SELECT),--select "$(MATRIX_SELECT)",) \
		$(if $(MATRIX_CELLS),--cells $(MATRIX_CELLS),)

# Native against PyTorch on the same cores: training step, forward, memory, scaling and the harness's cost, as
# ratios from one run (about 7 minutes; FULL=1 adds batch 2 and 8 and every conv layer: about 27). Run it on an
# otherwise idle machine.
bench: install
	$(PY) -m parity bench $(if $(FULL),--full,) --output reports/bench.json

clean:
	rm -rf build reports $(NATIVE_STAMP)
