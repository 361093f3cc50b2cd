# make run / make test: both set up .venv first (idempotent, fast when nothing changed).
PY := .venv/bin/python
ARGS ?=

.PHONY: setup run test bench report lint wheel clean-cache

setup:
	@bash scripts/setup.sh

run: setup
	$(PY) run_agents.py --n 20 $(ARGS)

test: setup
	$(PY) -m pytest -q $(ARGS)

bench: setup
	$(PY) bench/generation.py $(ARGS)

report: setup
	$(PY) analysis/report.py $(or $(ARGS),traces)

lint: setup
	.venv/bin/ruff check .

wheel: setup
	$(PY) -m pip wheel --no-deps --no-build-isolation -w dist .

clean-cache:
	rm -rf .cache
