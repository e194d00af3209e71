# Quickstart: `make demo` sets everything up and runs the CPU demo; `make test` runs all tests.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.tilewright-installed

.PHONY: setup demo test conformance bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml plugins/cpu/pyproject.toml sdk/pyproject.toml plugins/interp/pyproject.toml \
		backend-cuda/pyproject.toml backend-ascend/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e ".[test]" -e plugins/cpu -e sdk -e plugins/interp -e "backend-cuda[sass]" \
		-e backend-ascend
	touch $(STAMP)

demo: setup
	$(PY) examples/quickstart.py

# the test files are shared out among one worker per core (pytest-xdist; a file stays on one
# worker, so its module fixtures run once): WORKERS=0 runs them in this process
WORKERS ?= auto
test: setup
	$(PY) -m pytest -n $(WORKERS) --dist loadfile
	$(MAKE) conformance
	$(PY) -m ruff check .
	$(VENV)/bin/lint-imports --no-cache --config pyproject.toml
	$(VENV)/bin/lint-imports --no-cache --config backend-cuda/pyproject.toml
	$(VENV)/bin/lint-imports --no-cache --config backend-ascend/pyproject.toml
	$(VENV)/bin/lint-imports --no-cache --config plugins/cpu/pyproject.toml

# The backend conformance suite (tilewright-sdk) against every backend that can run here: the
# interpreter and the CPU backend execute, CUDA compiles to cubins (no GPU needed), Ascend
# executes on its CPU emulator (the cases shared out among the workers, as `test` does). With
# each backend's cases, in the same session (one report each), a bounded differential fuzzing
# run (fixed seed) on one of the workers.
CONFORMANCE := $(PY) -m pytest -p no:cacheprovider -n $(WORKERS) --pyargs
# the fuzzing test first: the longest, it starts while the cases fill the other worker
WITH_FUZZ := tilewright_sdk.fuzz tilewright_sdk.conformance --seed 0
conformance: setup
	$(CONFORMANCE) tilewright_sdk.conformance --tilewright-backend interp
	$(CONFORMANCE) $(WITH_FUZZ) --tilewright-backend cpu --examples 30
	$(CONFORMANCE) $(WITH_FUZZ) --tilewright-backend cuda --tilewright-mode compile --examples 20
	$(CONFORMANCE) $(WITH_FUZZ) --tilewright-backend ascend --tilewright-mode execute --examples 10

bench: setup
	$(PY) bench/cpu_gemm.py
	$(PY) bench/overhead.py

clean:
	rm -rf $(VENV) .pytest_cache .tox
