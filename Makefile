# reactq — the two commands a newcomer needs are `make demo` and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test test-unit test-integration bench install install-local clean down

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

install: $(BIN)/python
	$(BIN)/pip install -q -e '.[test]'

install-local: install
	@echo "Building llama-cpp-python from source (about 7 minutes on 2 cores, once)..."
	CMAKE_BUILD_PARALLEL_LEVEL=2 $(BIN)/pip install -e '.[test,local]'

test: install
	$(BIN)/python -m pytest -q

test-unit: install
	$(BIN)/python -m pytest -q tests/unit

test-integration: install
	$(BIN)/python -m pytest -q tests/integration

demo: install
	$(BIN)/python -m dispatcher.demo

bench: install
	$(BIN)/python -m bench

down:
	-$(BIN)/reactq down

clean:
	rm -rf $(VENV) .reactq build *.egg-info
