# delayq developer commands. Everything runs from a virtualenv in .venv.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install services migrate lint format contract check unit test faults failover demo bench benchmarks compare clean

install: $(VENV)/.installed

# Debian's own python3 needs the python3-venv package for `-m venv`: installed here
# when missing and running as root, else the command to run is printed.
$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -c 'import ensurepip, venv' 2>/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && apt-get install -y -qq python3-venv; \
	  else echo "python3 cannot make a virtualenv: run  sudo apt-get install python3-venv"; exit 1; fi; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

# Start the local stack (installs Redis, MariaDB and ZooKeeper with apt when missing).
services: install
	$(BIN)/delayq services up

migrate: services
	eval "$$($(BIN)/delayq services env)" && $(BIN)/delayq db migrate

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The answer to "may I commit this?" in under two minutes, with no service started:
# lint, format check, mypy and the tests that need no service (tests/unit/).
check: lint unit

unit: install
	$(BIN)/pytest -q -p no:cacheprovider tests/unit

# Format the tree the way `make lint` checks it.
format: install
	$(BIN)/ruff format .

# Regenerate the Lua side of cluster/model/contract.py (tests/unit/test_contract.py checks it).
contract: install
	$(BIN)/python -c 'import sys, cluster.model.contract as c; sys.stdout.write(c.lua_include())' \
	  > lua/includes/contract.lua

# The whole suite against the real local stack, which the tests start themselves:
# once with a single Redis (fault suite included), once with a three-master Redis Cluster
# with a replica per master (writes that back a promise wait for the replica, and the
# failover scenarios of tests/test_failover.py run), then client, node and cluster tests
# against the secure stack (TLS and passwords everywhere, `delayq services up --secure`;
# docs/security.md).
SECURE_TESTS := tests/test_security.py tests/test_client.py tests/test_lua_scripts.py \
  tests/test_end_to_end.py tests/test_cluster.py
# 1: every store of the secure stack; "stores": only its Redis and MySQL.
SECURE_MODE ?= 1
# The passes share one started stack: each starts only what it adds (the tests call
# `delayq services up`, which leaves running services alone). tests/unit runs once.
# The first two passes run their tests on WORKERS processes side by side (pytest-xdist;
# the tests of one private stack stay on one worker: their xdist_group), then the tests
# marked `alone` (they kill, freeze, empty or reconfigure a service the others share),
# one at a time; in the first pass, the modules on a private stack of their own (marked
# `private`) run on a second worker meanwhile. The secure pass (about a minute) runs one
# test at a time.
WORKERS ?= 3
PYTEST := $(BIN)/pytest -q -p no:cacheprovider
SIDE_BY_SIDE := -n $(WORKERS) --dist loadgroup
CLUSTER_PASS := DELAYQ_TEST_REDIS_CLUSTER=1 DELAYQ_TEST_REDIS_REPLICAS=1 DELAYQ_TEST_MYSQL_SERVERS=3
test: lint
	$(PYTEST) --durations=25 $(SIDE_BY_SIDE) -m "not long and not alone and not private"
	$(PYTEST) --durations=25 -n 2 --dist loadgroup -m "(alone or private) and not long"
	$(CLUSTER_PASS) $(PYTEST) --durations=25 $(SIDE_BY_SIDE) \
	  -m "not faults and not once and not alone" --ignore=tests/unit
	$(CLUSTER_PASS) $(PYTEST) --durations=25 -m "alone and not faults and not once" \
	  --ignore=tests/unit
	DELAYQ_TEST_SECURE=$(SECURE_MODE) $(PYTEST) -m "not faults" $(SECURE_TESTS)

# The fault suite alone, printing each scenario's counts (see docs/guarantees.md).
faults: install
	$(BIN)/pytest -q -s -p no:cacheprovider -m faults

# The Redis Cluster failover scenarios alone, against the cluster with replicas.
failover: install
	DELAYQ_TEST_REDIS_CLUSTER=1 DELAYQ_TEST_REDIS_REPLICAS=1 $(BIN)/pytest -q -s \
	  -p no:cacheprovider -m failover

demo: migrate
	eval "$$($(BIN)/delayq services env)" && $(BIN)/python examples/demo.py

# The first benchmark: 100,000 jobs due over 10 s (see docs/benchmarks.md).
bench: migrate
	eval "$$($(BIN)/delayq services env)" && $(BIN)/python benchmarks/fire_bench.py --jobs 100000 --window 10

# matplotlib, for the harness's plots.
$(VENV)/.bench-installed: $(VENV)/.installed
	$(BIN)/pip install --quiet -e '.[bench]'
	touch $@

# delayq side by side with BullMQ and arq on the same Redis, and the bare Kafka floor
# (also with a Redis sorted set), CPU per job by process beside the peers, every
# scenario (steady at 5,000 and 10,000 jobs/s, burst, backlog, ids, scale; about half
# an hour): results, tables and plots in benchmarks/results/ only. Installs the peers
# on first use.
# `make benchmarks ARGS=--write-docs` is the full run for the docs: it also writes the
# plots to docs/img/ and the tables to docs/benchmarks.md.
# `make benchmarks ARGS=--quick` is a smoke run of a few minutes (docs untouched).
benchmarks: migrate $(VENV)/.bench-installed
	eval "$$($(BIN)/delayq services env)" && $(BIN)/python benchmarks/harness.py $(ARGS)

# The steady scenario alone (5,000 and 10,000 jobs/s for 10 s, each against BullMQ,
# arq and the two floors); writes benchmarks/results/ only, not the docs.
compare: migrate $(VENV)/.bench-installed
	eval "$$($(BIN)/delayq services env)" && $(BIN)/python benchmarks/harness.py --scenarios steady $(ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
