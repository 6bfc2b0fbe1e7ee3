# The two commands a newcomer needs are `make demo` and `make test`; everything else is installed by them.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup demo test soak lint clean

# Installs everything: dev tools and the Spark pipeline extra (the agent and worker alone need `pip install .`),
# and the agent's native core (native/, Rust; skipped with a warning where no toolchain can be had).
# Service jars come from Maven Central when a command first needs them (`cdc infra fetch` fetches all ahead).
setup: $(VENV)/.installed $(VENV)/.native

$(VENV)/.installed: pyproject.toml scripts/install-system-deps.sh
	scripts/install-system-deps.sh
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,pipeline]'
	touch $@

$(VENV)/.native: $(VENV)/.installed scripts/build-native.sh native/Cargo.toml native/Cargo.lock native/pyproject.toml $(wildcard native/src/*.rs)
	PIP=$(BIN)/pip scripts/build-native.sh
	touch $@

demo: setup
	$(BIN)/cdc demo

test: setup lint
	$(BIN)/pytest

soak: setup
	$(BIN)/pytest -m soak

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

clean:
	-$(BIN)/cdc infra down
	rm -rf $(VENV) .pytest_cache .ruff_cache native/target
