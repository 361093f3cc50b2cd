# make run / test / bench / report / wheel set up .venv first (idempotent, fast when nothing changed);
# make lint only uses the tools already in .venv (ruff and mypy, from the `dev` extra).
PY := .venv/bin/python
ARGS ?=

.PHONY: setup run test bench report lint wheel docs clean-cache sandbox-image

# setup also sets up Docker for the docker sandbox: as root without Docker it installs docker.io and starts
# dockerd, then builds the sandbox's default image locally (skip all of it: AGENT_HARNESS_NO_DOCKER=1).
setup:
	@bash scripts/setup.sh

# The docker sandbox's default image again (a skeleton root on the host's /usr; built from local files only).
sandbox-image:
	$(PY) -m agent_harness.docker_image build

COMPARE := $(PY) run_agents.py --models qwen2.5-coder-0.5b,qwen2.5-coder-1.5b-offline --n 20 --no-embed --out traces/compare

# HumanEvalFix's default strategy, branch-search (the best measured); ARGS="--agent react" runs the tool agent alone.
run: setup
	$(PY) run_agents.py --n 20 $(ARGS)
	@echo ""
	@echo "Compare the two offline models as agents (0.5B and 1.5B, same 20 tasks, the same default strategy):"
	@echo "  $(COMPARE)"

test: setup
	@bash scripts/test.sh $(ARGS)

bench: setup
	$(PY) bench/generation.py $(ARGS)

report: setup
	$(PY) -m agent_harness.cli analyze report $(or $(ARGS),traces)

lint:
	.venv/bin/ruff check .
	.venv/bin/mypy

wheel: setup
	$(PY) -m pip wheel --no-deps --no-build-isolation -w dist .

# The documentation site into site/ (tests/test_docs.py builds it the same way); `.venv/bin/mkdocs serve` to browse.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

clean-cache:
	rm -rf .cache
