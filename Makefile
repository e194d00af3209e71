# Quickstart: `make demo` sets everything up and runs the CPU demo; `make test` runs all tests.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.tilewright-installed

.PHONY: setup demo test bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml plugins/cpu/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e ".[test]" -e plugins/cpu
	touch $(STAMP)

demo: setup
	$(PY) examples/quickstart.py

test: setup
	$(PY) -m pytest

bench: setup
	$(PY) bench/cpu_gemm.py
	$(PY) bench/overhead.py

clean:
	rm -rf $(VENV) .pytest_cache .tox
