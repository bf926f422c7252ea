# Two commands do all the set-up on a fresh machine:
#   make demo   creates .venv, installs tpu-perf, records examples/jax_mlp.py and prints its report
#   make test   creates both environments below, installs tpu-perf with its test dependencies in
#               each and runs the test suite: tests/test_torch_tpu.py in .venv-torch-tpu, the rest in .venv
#   make test-fast  the inner loop: every test not marked `slow` (no recording in a subprocess), in .venv
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# torch-tpu needs libtpu>=0.0.50, jax 0.10.2 (the newest on Python 3.11) pins libtpu 0.0.42.*: on
# Python 3.11 JAX-on-TPU and torch-tpu cannot share an environment (docs/install.md), so CI builds both.
TORCH_TPU_VENV ?= .venv-torch-tpu
TT_BIN := $(TORCH_TPU_VENV)/bin
STORE ?= tpu-perf-runs
# tpu = jax[tpu]: jax with the libtpu it pins. torch is pinned to the CPU build this machine's pip
# cache holds; an open range pulls CUDA (GBs).
EXTRAS ?= tpu,torch,traces,dashboard,remote,ray,notebook,dev,test-jax,test-frameworks
TORCH_TPU_EXTRAS ?= torch-tpu,traces,dev
TORCH_TPU_TESTS := tests/test_torch_tpu.py

.PHONY: install install-torch-tpu demo test test-fast lint bench clean

# The installs go through uv (pip-installable, with parallel downloads and a faster resolver). uv
# reads no pip configuration: UV_PIP_ARGS passes pip's find-links on (where this machine keeps the
# CPU torch wheel). No --compile-bytecode: compiling every module of torch, jax and transformers at
# install took longer than installing them; the tests compile what they import, once
# (tests/conftest.py). Each venv keeps pip (the tests call `python -m pip`).
PIP_CONFIG := $(shell $(PYTHON) -m pip config list 2>/dev/null)
PIP_FIND_LINKS_CONFIG := $(subst ',,$(patsubst global.find-links=%,%,$(filter global.find-links=%,$(PIP_CONFIG))))
UV_PIP_ARGS ?= $(addprefix --find-links ,$(sort $(PIP_FIND_LINKS) $(PIP_FIND_LINKS_CONFIG)))
UV := $(BIN)/uv

$(UV):
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q uv
	touch $@

$(BIN)/tpu-perf: pyproject.toml $(UV)
	$(UV) pip install -q --python $(BIN)/python $(UV_PIP_ARGS) -e ".[$(EXTRAS)]"
	touch $@

$(TT_BIN)/tpu-perf: pyproject.toml $(UV)
	$(PYTHON) -m venv $(TORCH_TPU_VENV)
	$(UV) pip install -q --python $(TT_BIN)/python $(UV_PIP_ARGS) -e ".[$(TORCH_TPU_EXTRAS)]"
	touch $@

install: $(BIN)/tpu-perf

install-torch-tpu: $(TT_BIN)/tpu-perf

# JAX_PLATFORMS=cpu: the demo runs on the CPU; it spares JAX probing libtpu for a TPU (a few seconds).
demo: export JAX_PLATFORMS ?= cpu
demo: install
	$(BIN)/tpu-perf record --store $(STORE) --name demo examples/jax_mlp.py --steps 60
	$(BIN)/tpu-perf report --store $(STORE) $$(ls $(STORE) | sort | tail -n 1)  # run ids sort by start: the run just recorded

# --durations=25: the slowest tests, printed at the end of every full run, so a slow one is seen.
# First the tests marked `alone` (jobs of two busy processes: every core), with nothing beside them.
# Then three parts at once, the first ahead of the others for the CPU:
#   1. the other `serial` tests (times measured against each other) in one process, normal priority;
#   2. every other test on TEST_WORKERS pytest-xdist workers, a test module per worker at a time
#      (module fixtures made once; the session's shared recordings made once for all, tests/conftest.py
#      `made_once`), at the idle scheduling class (`chrt -i 0`: a task there runs only on a core no
#      normal task wants, and gives it up at once when one does): they soak up the core the serial
#      part leaves idle (about 0.6 of one on 2 cores) without putting its threads off their cores;
#   3. tests/test_torch_tpu.py in .venv-torch-tpu, idle too.
# The serial part's output is shown when it ends (its log, not interleaved with the workers' dots).
# A test that fails on the workers, or in the serial part, is run again alone once the serial part
# is done (a stall of the shared 2-core machine, not the code, failed one test in most two-worker runs,
# and the idle workers beside the serial part still failed one of its timing tests in two of five
# runs: docs/testing.md lists each); it fails the run only if it fails again. Every part runs even when one fails; the exit code
# fails if any did. TEST_WORKERS=0 runs part 2 in one process; IDLE= runs it at normal priority.
TEST_WORKERS ?= 2
IDLE ?= $(shell command -v chrt >/dev/null 2>&1 && chrt -i 0 true 2>/dev/null && echo "chrt -i 0" || echo "nice -n 19")
PYTEST := $(BIN)/python -m pytest -q --durations=25 --ignore=$(TORCH_TPU_TESTS)
test: install install-torch-tpu
	@rc=0; logs=$$(mktemp -d); \
	echo "== tests marked alone (jobs of several processes), with nothing beside them"; \
	$(PYTEST) -m alone -p no:cacheprovider || rc=1; \
	echo "== tests marked serial, at normal priority (their output when they end: $$logs/serial.log)"; \
	$(PYTEST) -m "serial and not alone" -o cache_dir=$$logs/serial-cache > $$logs/serial.log 2>&1 & serial=$$!; \
	$(IDLE) $(TT_BIN)/python -m pytest -q --durations=25 -p no:cacheprovider $(TORCH_TPU_TESTS) > $$logs/torch-tpu.log 2>&1 & tt=$$!; \
	echo "== tests not marked serial, on $(TEST_WORKERS) workers beside them ($(IDLE))"; \
	$(IDLE) $(PYTEST) -n $(TEST_WORKERS) --dist loadfile -m "not serial and not alone" || workers_failed=1; \
	wait $$serial || serial_failed=1; \
	echo "== tests marked serial"; cat $$logs/serial.log; \
	if [ -n "$$workers_failed" ]; then \
	  echo "== the tests that failed on the workers, again alone (a failure here fails the run)"; \
	  $(PYTEST) -m "not serial and not alone" --last-failed --last-failed-no-failures none || rc=1; fi; \
	if [ -n "$$serial_failed" ]; then \
	  echo "== the serial tests that failed, again alone (a failure here fails the run)"; \
	  $(PYTEST) -m "serial and not alone" -o cache_dir=$$logs/serial-cache --last-failed --last-failed-no-failures none || rc=1; fi; \
	wait $$tt || rc=1; \
	echo "== torch-tpu tests, in $(TORCH_TPU_VENV)"; cat $$logs/torch-tpu.log; \
	rm -rf $$logs; exit $$rc

test-fast: install
	$(BIN)/python -m pytest -q -m "not slow" --durations=10 --ignore=$(TORCH_TPU_TESTS)

lint: install
	$(BIN)/ruff check tpu_perf tests bench examples

bench: install
	$(BIN)/python bench/record_overhead.py

clean:
	rm -rf $(VENV) $(TORCH_TPU_VENV) $(STORE) .pytest_cache
