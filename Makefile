# The two commands a fresh machine needs: `make demo` and `make test`.
# Both create or refresh .venv themselves (torch first, pinned to the CPU wheel, then the project).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test venv bench clean

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(BIN)/seqrl demo

test: $(STAMP)
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(BIN)/python -m pytest -q src tests

bench: $(STAMP)
	$(BIN)/python benchmarks/rollout_throughput.py --quick

clean:
	rm -rf $(VENV) runs .pytest_cache
