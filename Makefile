# The two commands a fresh machine needs: `make demo` and `make test`.
# Both create or refresh .venv themselves (torch first, then the project), at the exact versions of
# constraints.txt; pyproject.toml states only ranges. torch==2.13.0 there is the CPU wheel where pip's
# find-links provide it (pip config), as a plain `pip install torch==2.13.0` would pick.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# pytest-xdist workers for `make test` (one torch thread each): one per core, at most 4; 0 (no workers) on one
# core. OMP_NUM_THREADS is unset for nproc, which would report it instead of the cores.
TEST_WORKERS ?= $(shell n=$$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1); [ $$n -gt 4 ] && n=4; [ $$n -lt 2 ] && n=0; echo $$n)

.PHONY: demo test venv bench clean

$(STAMP): pyproject.toml constraints.txt Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade -c constraints.txt pip
	$(BIN)/pip install -q -c constraints.txt torch
	$(BIN)/pip install -q -c constraints.txt -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(BIN)/seqrl demo

test: $(STAMP)
	$(BIN)/seqrl models get smollm2-135m-instruct >/dev/null || echo "smollm2-135m-instruct not fetched: its tests will skip"
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal src tests

bench: $(STAMP)
	$(BIN)/python benchmarks/rollout_throughput.py --quick

clean:
	rm -rf $(VENV) runs .pytest_cache
