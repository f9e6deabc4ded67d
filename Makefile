# The two README commands, and the checks CI runs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint typecheck check bench bench-policy clean integration bench-resize bench-recovery bench-remote

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $@

demo: $(BIN)/.installed  ## set up and run elastic_training end to end on the local engine
	$(BIN)/python scripts/demo.py

test: $(BIN)/.installed  ## the test suite (real Airflow DB, real iroh-tinker jobs), on 3 workers
	bash scripts/system-packages.sh ui ssh
	$(BIN)/python -m pytest -n 3 --dist load --maxschedchunk 1

lint: $(BIN)/.installed
	$(BIN)/ruff check elasticgrid_provider tests example_dags scripts benchmarks integration
	$(BIN)/ruff format --check elasticgrid_provider tests example_dags scripts benchmarks integration

typecheck: $(BIN)/.installed
	$(BIN)/mypy

check: lint typecheck test

$(BIN)/.integration: $(BIN)/.installed pyproject.toml
	$(BIN)/pip install --quiet -e ".[dev,integration]"
	touch $@

integration: $(BIN)/.integration  ## a real deployment: Postgres, Redis, Celery workers, triggerer
	bash scripts/system-packages.sh deployment ssh
	$(BIN)/python -m pytest integration -p no:cacheprovider

bench-resize: $(BIN)/.integration  ## resize gap on the real deployment vs a bare iroh-tinker restart
	bash scripts/system-packages.sh deployment
	$(BIN)/python benchmarks/bench_resize.py

bench-recovery: $(BIN)/.installed  ## recovery gap after a lost spot part vs a bare iroh-tinker restart
	$(BIN)/python benchmarks/bench_recovery.py

bench-remote: $(BIN)/.installed  ## launch time on SSH test hosts: the provider's ssh engine vs iroh-tinker's
	bash scripts/system-packages.sh ssh
	$(BIN)/python benchmarks/bench_remote.py

bench: $(BIN)/.installed
	$(BIN)/python benchmarks/bench_planner.py
	$(BIN)/python benchmarks/bench_step_log.py

bench-policy: $(BIN)/.installed  ## the scale policy against the 0.1.0 rules and a fixed size
	$(BIN)/python benchmarks/bench_policy.py

clean:
	rm -rf .demo $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
