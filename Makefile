# Every target bootstraps .venv when it is missing, so a fresh clone needs only Python 3.11.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test check lint types layers pytest bench package docs clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/gpusteward demo

test: check pytest

check: lint types layers

lint: $(STAMP)
	$(BIN)/ruff check src tests bench scripts
	$(BIN)/ruff format --check src tests bench scripts

types: $(STAMP)
	$(BIN)/mypy

layers: $(STAMP)
	$(BIN)/lint-imports

pytest: $(STAMP)
	$(BIN)/pytest -q

# Build the wheel and sdist, twine-check them, run the wheel from a fresh virtualenv.
package: $(STAMP)
	PY=$(BIN)/python scripts/check-package.sh

# The docs site into site/, strictly (a broken link, anchor or page fails); reference pages are
# generated from the code by scripts/mkdocs_hooks.py. Needs no network.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict  # not --quiet: it hides the warnings strict counts

bench: $(STAMP)
	$(BIN)/python bench/engine.py --gpus 100000 --json

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache dist site
