# One command each on a fresh machine: `make run`, `make test`. Both create .venv if needed.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test bench lint typecheck check clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# compat: a plain .pth path entry; the default editable finder costs ~20 ms per start-up
	$(BIN)/python -m pip install -q -e '.[dev]' --config-settings editable_mode=compat
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/tcalc params gpt2-medium

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python tools/bench.py --tcalc $(BIN)/tcalc

lint: $(STAMP)
	$(BIN)/ruff check transformer_calc tests tools

typecheck: $(STAMP)
	$(BIN)/mypy

check: lint typecheck test

clean:
	rm -rf $(VENV) build *.egg-info transformer_calc.egg-info .pytest_cache .mypy_cache .ruff_cache
