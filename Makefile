# canopy: `make run` starts the broker on its embedded default, `make test` runs every test.
# Both create .venv and install what they need on first use (only python3 and make required).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
RUN_STAMP  := $(VENV)/.installed-run
TEST_STAMP := $(VENV)/.installed-test

.PHONY: run test soak simulate bench typecheck clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# The broker is the `server` extra; a plain `pip install .` is the client alone.
$(RUN_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[server]'
	touch $@

$(TEST_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[server,test]'
	touch $@ $(RUN_STAMP)

run: $(RUN_STAMP)
	$(BIN)/canopy serve

# every test: the offline ones (tests/unit, the manifests' schema checks) in a second pytest beside
# the rest, which mostly waits on clusters and processes (tests/run.py)
test: $(TEST_STAMP)
	$(BIN)/python tests/run.py -m "not soak"

# the long variants, and a million simulated schedules from a random base (tests/simulation, marked soak)
soak: $(TEST_STAMP)
	$(BIN)/python -m pytest -m soak

# make simulate SEED=N: replay one simulated schedule, with its trace (tests/simulation)
simulate: $(TEST_STAMP)
	PYTHONHASHSEED=0 $(BIN)/python -m tests.simulation $(SEED) --trace

bench: $(TEST_STAMP)
	$(BIN)/python bench/selector_match.py
	$(BIN)/python bench/topic_memory.py
	$(BIN)/python bench/timeseries.py
	$(BIN)/python bench/session_trees.py
	$(BIN)/python bench/views.py
	$(BIN)/python bench/deltas.py

typecheck: $(TEST_STAMP)
	$(BIN)/python -m mypy

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .hypothesis
