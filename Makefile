# Each target sets up its own virtual environment (.venv) and installs the project into it.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: demo lint peers pyspark-versions test test-quick fuzz bench bench-store bench-read bench-model bench-pop bench-trust bench-soak check-java setup clean protos

demo: $(STAMP) check-java  ## the clickstream pipeline: producers, a streaming query, exactly-once aggregates
	$(PY) examples/clickstream_etl.py

lint: $(STAMP)  ## ruff, the layers' import contract (lint-imports; both configured in pyproject.toml), doors on the core's face, a test tree that mirrors the packages
	$(PY) -m ruff check .
	$(VENV)/bin/lint-imports --no-cache
	$(PY) scripts/check_door_face.py
	$(PY) scripts/check_test_tree.py

test: lint check-java peers pyspark-versions  ## everything (what CI runs): the JVM peers and Spark too, three at a time (groups: tests/conftest.py)
	$(PY) -m pytest -q -n 3 --dist loadgroup --durations=25 -rs tests

# The tiers are marked in tests/conftest.py by the fixtures a test uses.
test-quick: $(STAMP)  ## after each change: the in-process tests (no Spark, JVM or crashed processes), a tenth of the fuzz examples, two at a time
	FUZZ_PROFILE=quick $(PY) -m pytest -q -n 2 tests -m "not spark and not jvm and not processes"

# FUZZ_SCALE times the CI examples of tests/fuzz, random each run (failures are kept in .hypothesis/
# and tried first next time): the default 50 runs some 10 to 20 minutes on 2 cores.
FUZZ_SCALE ?= 50

fuzz: $(STAMP)  ## the long fuzz of every decoder a peer can reach; `make fuzz FUZZ_SCALE=10` for a shorter one
	FUZZ_PROFILE=long FUZZ_SCALE=$(FUZZ_SCALE) $(PY) -m pytest -q tests/fuzz

peers: $(STAMP)  ## the real RocketMQ, Kafka and Spark Kafka connector jars (Maven Central), into a cache outside git, once
	$(PY) -m peers.fetch

pyspark-versions: $(STAMP)  ## a venv for each older PySpark the connector is tested on (.venv-pyspark/), made once
	$(PY) -m peers.pyspark

bench: bench-store bench-read bench-model

bench-read: $(STAMP)
	$(PY) bench/read_bench.py

bench-model: $(STAMP)  ## the seed's model table: single sends, AutoBatch x serial / concurrent dispatch, BatchCQ
	$(PY) bench/model_bench.py

bench-pop: $(STAMP)
	$(PY) bench/pop_bench.py

bench-trust: $(STAMP)  ## what ACLs and TLS cost: plain, ACL, TLS, both, through each door
	$(PY) bench/trust_bench.py

bench-soak: $(STAMP)  ## the broker's memory budget under hostile clients, beside a good client's latency alone (< 2 min)
	$(PY) bench/soak_bench.py

bench-store: $(STAMP)
	$(PY) bench/store_bench.py

setup: $(STAMP)

# An editable install (hatchling: a plain path entry for the project root), so that PySpark's lookup
# of pyspark_* modules (pkgutil.iter_modules) finds pyspark_rocketmq_batch, as a plain `pip install -e .` does.
$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "error: Python 3.10+ is needed, found " + sys.version.split()[0])'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[spark,broker,test,bench]'
	touch $(STAMP)

protos: $(STAMP)  ## regenerate rmq_wire/contract from protos/
	PYTHON=$(PY) scripts/gen_protos.sh

check-java:
	@scripts/check_java.sh

clean:
	rm -rf $(VENV) .venv-pyspark *.egg-info bench/results
