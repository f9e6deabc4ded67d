# The two README commands, and the checks CI runs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
comma := ,

.PHONY: demo test lint typecheck check clean integration docs install-all
.PHONY: bench bench-quick bench-planner bench-step-log bench-policy bench-resize bench-recovery
.PHONY: bench-remote bench-ec2 bench-fleet bench-pages

# $(call install,EXTRAS): the project and its extras into the virtualenv. uv (from PyPI)
# installs in seconds what pip takes minutes for, the same versions; pip installs when uv
# cannot (no route to its index, say). UV_NATIVE_TLS: the system's certificates, as pip's.
install = $(BIN)/pip install --quiet --upgrade pip uv && \
	{ UV_NATIVE_TLS=1 $(BIN)/uv pip install --quiet --python $(BIN)/python -e ".[$(1)]" || \
	  $(BIN)/pip install --quiet -e ".[$(1)]"; }

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(call install,dev)
	touch $@

# every extra in one run (what CI needs; the targets below find their stamps made)
install-all:
	$(PYTHON) -m venv $(VENV)
	$(call install,dev$(comma)integration$(comma)docs)
	touch $(BIN)/.installed $(BIN)/.integration $(BIN)/.docs

demo: $(BIN)/.installed  ## set up and run elastic_training end to end on the local engine
	$(BIN)/python scripts/demo.py

test: $(BIN)/.installed  ## the test suite (real Airflow DB, real iroh-tinker jobs), on 3 workers
	bash scripts/system-packages.sh ui ssh
	$(BIN)/python -m pytest -n 3 --dist load --maxschedchunk 1 --durations=30

lint: $(BIN)/.installed
	$(BIN)/ruff check elasticgrid_provider tests example_dags scripts benchmarks integration
	$(BIN)/ruff format --check elasticgrid_provider tests example_dags scripts benchmarks integration

typecheck: $(BIN)/.installed
	$(BIN)/mypy

check: lint typecheck test

$(BIN)/.integration: $(BIN)/.installed pyproject.toml
	$(call install,dev$(comma)integration)
	touch $@

integration: $(BIN)/.integration  ## two real deployments side by side: Postgres, Redis, Celery workers, triggerer
	bash scripts/system-packages.sh deployment ssh
	$(BIN)/python -m pytest integration -p no:cacheprovider -n 2 --durations=20

$(BIN)/.docs: $(BIN)/.installed pyproject.toml
	$(call install,dev$(comma)docs)
	touch $@

docs: $(BIN)/.docs  ## the documentation site in site/; a broken link or a page missing from nav fails
	$(BIN)/mkdocs build --strict --site-dir site

# Every bench-* target sets itself up and prints ratios against a baseline run alongside;
# BENCH_ARGS passes --quick (one round, small sizes) and --json FILE (benchmarks/report.py).
BENCH_ARGS ?=

bench: $(BIN)/.installed  ## every benchmark, then docs/performance.md from their reports
	$(BIN)/python benchmarks/run_all.py --make "$(MAKE)"

# BENCH_ONLY="planner pages" runs those only
bench-quick: $(BIN)/.installed  ## every benchmark at small sizes: fails if one crashes or its baseline did not run
	$(BIN)/python benchmarks/run_all.py --quick --make "$(MAKE)" $(if $(BENCH_ONLY),--only $(BENCH_ONLY))

bench-planner: $(BIN)/.installed  ## the planner vs scipy's HiGHS LP, 1,000 providers, 1,000,000 nodes
	$(BIN)/python benchmarks/bench_planner.py $(BENCH_ARGS)

bench-step-log: $(BIN)/.installed  ## a first check's tail read vs a full read of a 1,000,000-line step log
	$(BIN)/python benchmarks/bench_step_log.py $(BENCH_ARGS)

bench-policy: $(BIN)/.installed  ## the scale policy vs the 0.1.0 rules, a fixed size and the optimum
	$(BIN)/python benchmarks/bench_policy.py $(BENCH_ARGS)

bench-resize: $(BIN)/.integration  ## resize gap on the real deployment vs a bare iroh-tinker restart
	bash scripts/system-packages.sh deployment
	$(BIN)/python benchmarks/bench_resize.py $(BENCH_ARGS)

bench-recovery: $(BIN)/.installed  ## recovery gap after a lost spot part vs a bare iroh-tinker restart
	$(BIN)/python benchmarks/bench_recovery.py $(BENCH_ARGS)

bench-remote: $(BIN)/.installed  ## launch time and resize gap on SSH test hosts vs iroh-tinker's own
	bash scripts/system-packages.sh ssh
	$(BIN)/python benchmarks/bench_remote.py $(BENCH_ARGS)

bench-ec2: $(BIN)/.installed  ## fake EC2 VMs: the ec2 engine's launch vs the SSH engine on booted VMs; a 1,000-instance reconcile
	bash scripts/system-packages.sh ssh
	$(BIN)/python benchmarks/bench_ec2.py $(BENCH_ARGS)

bench-fleet: $(BIN)/.installed  ## many jobs on one grid: the sharing rules vs FCFS and a Kueue-like quota
	$(BIN)/python benchmarks/bench_fleet.py $(BENCH_ARGS)

bench-pages: $(BIN)/.installed  ## the UI pages' server time and bytes (10,000 decisions, 100 jobs) vs Airflow's REST API
	$(BIN)/python benchmarks/bench_pages.py $(BENCH_ARGS)

clean:
	rm -rf .demo site $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
