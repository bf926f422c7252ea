# Two commands do all the set-up on a fresh machine:
#   make demo   creates .venv, installs tpu-perf, records examples/jax_mlp.py and prints its report
#   make test   creates .venv, installs tpu-perf with its test dependencies and runs the test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STORE ?= tpu-perf-runs
# torch is pinned to the CPU build this machine's pip cache holds; an open range pulls CUDA (GBs).
EXTRAS ?= jax,torch,tpu,traces,dashboard,dev

.PHONY: install demo test lint bench clean

$(BIN)/tpu-perf: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[$(EXTRAS)]"
	touch $@

install: $(BIN)/tpu-perf

# JAX_PLATFORMS=cpu: the demo runs on the CPU; it keeps JAX from probing libtpu (installed by the tpu extra).
demo: export JAX_PLATFORMS ?= cpu
demo: install
	$(BIN)/tpu-perf record --store $(STORE) --name demo examples/jax_mlp.py --steps 60
	$(BIN)/tpu-perf report --store $(STORE) demo

test: install
	$(BIN)/python -m pytest -q

lint: install
	$(BIN)/ruff check tpu_perf tests bench examples

bench: install
	$(BIN)/python bench/record_overhead.py

clean:
	rm -rf $(VENV) $(STORE) .pytest_cache
