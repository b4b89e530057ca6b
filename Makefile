# One command each on a fresh machine: `make run`, `make test`. Both create .venv if needed.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test test-fast bench mutation lint typecheck check clean

# pip's -qq keeps its output to errors: an install says one line, not a screen of resolver
# notes (and no warnings about index locations a machine's pip.conf may name).
PIP    := $(BIN)/python -m pip -qq --disable-pip-version-check

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || { echo "creating $(VENV) ($$($(PYTHON) --version))"; $(PYTHON) -m venv $(VENV); }
	@echo "installing transformer-calc (editable) with its dev tools into $(VENV)"
	@$(PIP) install -e '.[dev]'
	@touch $(STAMP)

run: $(STAMP)
	@echo "$$ tcalc params gpt2-medium"
	@$(BIN)/tcalc params gpt2-medium

# Everything, slow tests included (what CI runs), over every core (pytest-xdist). The fast
# subset: make test-fast.
test: $(STAMP)
	@$(BIN)/python -m pytest -q -n auto

test-fast: $(STAMP)
	@$(BIN)/python -m pytest -q -n auto -m "not slow"

bench: $(STAMP)
	$(BIN)/python tools/bench.py --tcalc $(BIN)/tcalc

# a sample of 60 mutants of the core's formulas against the fast tests (~10 min on 2 cores)
mutation: $(STAMP)
	$(BIN)/python tools/mutation.py --count 60 --seed 1 --jobs 2

lint: $(STAMP)
	$(BIN)/ruff check transformer_calc tests tools

typecheck: $(STAMP)
	$(BIN)/mypy

check: lint typecheck test

clean:
	rm -rf $(VENV) build *.egg-info transformer_calc.egg-info .pytest_cache .mypy_cache .ruff_cache
