# chronolog: `make run` installs and starts the broker, `make test` installs and runs every test.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: screenshots install install-test kafka-jvm spark-kafka franz-go kcat openssl chromium prometheus zookeeper burrow faketime node-deps build-deps run test test-unit test-pure lint bench compose-test clean docker-compose

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml setup.py protocol/_fastscan.c | $(BIN)/python build-deps
	$(BIN)/pip install -q -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml setup.py protocol/_fastscan.c | $(BIN)/python build-deps
	$(BIN)/pip install -q -e '.[test,spark]'
	touch $@

install: $(VENV)/.installed

# The C extension protocol/_fastscan.c is compiled at install: a C compiler and libdeflate's headers.
build-deps:
	@{ command -v cc >/dev/null && [ -f /usr/include/libdeflate.h ]; } || { \
	  echo "installing the C compiler and libdeflate-dev from Debian packages"; \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq --no-install-recommends \
	    build-essential libdeflate-dev >/dev/null; }

install-test: $(VENV)/.installed-test kcat openssl docker-compose node-deps chromium prometheus zookeeper burrow \
  faketime kafka-jvm spark-kafka franz-go

# Apache Kafka 4.1.1's jars (tests/jvm/pom.xml: broker, tools, Java clients, Streams, Connect) and
# our Java drivers (tests/jvm/src), fetched from Maven Central once into build/jvm/: tests/oracle/
# runs Kafka beside chronolog as the oracle. Maven and a JDK 17 from Debian when the machine has none.
KAFKA_JVM_STAMP := build/jvm/.installed
kafka-jvm: $(KAFKA_JVM_STAMP)

$(KAFKA_JVM_STAMP): tests/jvm/pom.xml $(wildcard tests/jvm/src/main/java/chronolog/jvm/*.java)
	@{ command -v mvn && command -v javac && command -v java; } >/dev/null || { \
	  echo "installing maven and openjdk-17-jdk-headless from Debian packages"; \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq --no-install-recommends \
	    maven openjdk-17-jdk-headless >/dev/null; }
	$(if $(filter tests/jvm/pom.xml,$?),rm -rf build/jvm/lib)
	cd tests/jvm && mvn -q -B package dependency:copy-dependencies
	touch $@

# Spark's own Kafka source and sink (tests/spark/jvm/pom.xml: spark-sql-kafka-0-10 at PySpark's
# version, the kafka-clients and commons-pool2 it names), four jars copied once into build/spark-kafka/
# for the Spark session's spark.jars. Maven and a JDK come with kafka-jvm.
SPARK_KAFKA_STAMP := build/spark-kafka/.installed
spark-kafka: $(SPARK_KAFKA_STAMP)

$(SPARK_KAFKA_STAMP): tests/spark/jvm/pom.xml | $(KAFKA_JVM_STAMP)
	rm -rf build/spark-kafka
	cd tests/spark/jvm && mvn -q -B dependency:copy-dependencies
	touch $@

# franz-go's kgo test suite (tests/suites/test_franz_go_suite.py): the module at a pinned version from
# the Go module proxy into build/gomod (its zip's go.sum hash checked here as well as by go against
# sum.golang.org; -modcacherw so `make clean` can remove it), and its pkg/kgo tests, which the module
# ships, compiled once into build/franz-go-<version>/kgo.test (its own go.sum verifies its dependencies).
# franz-go 1.22 needs go >= 1.26: an older go (>= 1.21) fetches that toolchain from the proxy.
FRANZ_GO_VERSION := v1.22.3
FRANZ_GO_SUM := h1:RHe35s34pKefMLyL+ZYJ6mQVtfFZz4zHDHVkTyACur0=
FRANZ_GO_TEST := build/franz-go-$(FRANZ_GO_VERSION)/kgo.test
GO := $(shell command -v go || echo /usr/local/go/bin/go)
GO_ENV := GOMODCACHE=$(CURDIR)/build/gomod GOFLAGS=-modcacherw GOWORK=off GOTOOLCHAIN=auto
franz-go: $(FRANZ_GO_TEST)

$(FRANZ_GO_TEST):
	@[ -x "$(GO)" ] || { echo "franz-go's tests need Go 1.26 or newer (https://go.dev/dl/) on PATH or in /usr/local/go"; exit 1; }
	mkdir -p $(dir $(FRANZ_GO_TEST))
	$(GO_ENV) $(GO) mod download -json github.com/twmb/franz-go@$(FRANZ_GO_VERSION) > $(FRANZ_GO_TEST).download.json
	grep -q '"Sum": "$(FRANZ_GO_SUM)"' $(FRANZ_GO_TEST).download.json || { \
	  echo "github.com/twmb/franz-go@$(FRANZ_GO_VERSION) does not have the pinned hash $(FRANZ_GO_SUM):"; \
	  cat $(FRANZ_GO_TEST).download.json; exit 1; }
	cd build/gomod/github.com/twmb/franz-go@$(FRANZ_GO_VERSION)/pkg/kgo && \
	  $(GO_ENV) $(GO) test -c -o $(abspath $(FRANZ_GO_TEST)).part . && mv $(abspath $(FRANZ_GO_TEST)).part $(abspath $(FRANZ_GO_TEST))

# KafkaJS (tests/integration/test_kafkajs.py) from the npm registry, pinned by its lock file; node and
# npm from Debian when the machine has none.
JS_DIR := tests/integration/js
node-deps: $(JS_DIR)/node_modules/.installed

$(JS_DIR)/node_modules/.installed: $(JS_DIR)/package.json $(JS_DIR)/package-lock.json
	@command -v npm >/dev/null || { echo "installing nodejs and npm from Debian packages"; \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null; }
	cd $(JS_DIR) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

# kcat comes from Debian; the integration tests drive it as a real client.
kcat:
	@command -v kcat >/dev/null || { echo "installing kcat from Debian packages"; \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq --no-install-recommends kcat >/dev/null; }

# Debian's ZooKeeper 3.8 (and its Java runtime): the cluster tests (tests/cluster/) start their own
# server from /usr/share/java/zookeeper.jar on a free port.
zookeeper:
	@[ -f /usr/share/java/zookeeper.jar ] || { echo "installing zookeeper from Debian packages"; \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq --no-install-recommends \
	    zookeeper >/dev/null; }

# Debian's Burrow 1.2.1 (LinkedIn's consumer-lag monitor): tests/integration/test_burrow.py runs it
# against a broker; it reads the group records in __consumer_offsets (and locks in ZooKeeper).
burrow:
	@command -v Burrow >/dev/null || { echo "installing burrow from Debian packages"; \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq --no-install-recommends burrow >/dev/null; }

# Debian's libfaketime: the cluster tests run a broker with its clock an hour behind (LD_PRELOAD)
# to show LogAppendTime never goes backwards across a leader change.
faketime:
	@ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1 || { \
	  echo "installing libfaketime from Debian packages"; \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq --no-install-recommends \
	    libfaketime >/dev/null; }

# openssl makes the security tests' CA and certificates at test time (none is committed).
openssl:
	@command -v openssl >/dev/null || { echo "installing openssl from Debian packages"; \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq --no-install-recommends openssl >/dev/null; }

# Debian's chromium and its driver: tests/integration/test_console.py drives the web console in a
# headless browser through selenium.
chromium:
	@{ [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; } || { \
	  echo "installing chromium and chromium-driver from Debian packages"; \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq --no-install-recommends \
	    chromium chromium-driver >/dev/null; }

# Debian's Prometheus: tests/integration/test_dashboard.py runs it against a broker and checks the
# dashboards (docker/grafana-dashboard.json, docker/prometheus/consoles/) with it.
prometheus:
	@[ -x /usr/bin/prometheus ] || { echo "installing prometheus from Debian packages"; \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq --no-install-recommends \
	    prometheus >/dev/null; }

run: install
	$(BIN)/chronolog serve --config config/server.properties \
	  --override listeners=PLAINTEXT://127.0.0.1:9092 --override log.dirs=./data

# Two workers (pytest-xdist), each a file at a time: most process tests wait on JVMs, brokers and
# clients more than they compute, so two share this two-core machine's cores. TEST_WORKERS=0 runs
# the suite in this one process.
TEST_WORKERS ?= 2
test: install-test
	$(BIN)/python -m pytest -q --durations=25 -n $(TEST_WORKERS) --dist loadgroup

# The fast loop while working: tests that start no process and are not long fuzz runs
# (markers set by tests/conftest.py).
test-unit: install-test
	$(BIN)/python -m pytest -q -m "unit and not slow"

# Lint and types (pyproject.toml's [tool.ruff] and [tool.mypy]).
lint: install-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The pure-Python paths (protocol/native.py), as a machine without a C compiler runs them; .ci/run
# runs both. The C extension only changes record scanning and conversion (protocol/validator.py,
# protocol/conversion.py) and the cleaner (storage/cleaner.py), so this reruns what reaches them:
# the record, validator and compression tests, storage/, the produce and cleaner tests of broker/,
# and real clients producing every format and compacting through a broker process. The
# kafka_oracle tests are left out: they check Kafka's JVM side, which `make test` covers.
PURE_TESTS = $(wildcard tests/protocol/test_validator*.py tests/protocol/test_fastscan.py \
  tests/protocol/test_record*.py tests/protocol/test_compression.py \
  tests/protocol/test_downconvert*.py) tests/storage tests/broker/test_produce_placement.py \
  tests/broker/test_cleaner_threads.py tests/integration/test_pure_python.py \
  tests/integration/test_formats.py tests/integration/test_compaction.py \
  tests/integration/test_clients.py tests/integration/test_idempotence.py \
  tests/integration/test_old_consumer_conversion.py
test-pure: install-test
	CHRONOLOG_PURE_PYTHON=1 $(BIN)/python -m pytest -q -m "not kafka_oracle" -n $(TEST_WORKERS) \
	  --dist loadgroup $(PURE_TESTS)

clean:
	rm -rf $(VENV) build *.egg-info

# The docs' screenshots, refreshed from the ones the browser tests saved in build/ (after make test).
screenshots:
	cp build/console-*.png build/dashboard.png docs/screenshots/

# Debian's docker-compose: tests/docker checks docker/docker-compose.yml with `docker-compose config`.
docker-compose:
	@command -v docker-compose >/dev/null || { echo "installing docker-compose from Debian packages"; \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq --no-install-recommends docker-compose >/dev/null; }

# The broker and the integration tests in containers (docker/docker-compose.yml), then ZooKeeper,
# three brokers and the cluster tests (docker/docker-compose.cluster.yml). Prepares this host to
# run them with rootful podman first (needs root); fails with the first failing runner's status.
compose-test:
	docker/compose-test.sh
	CHRONOLOG_COMPOSE_FILE=docker/docker-compose.cluster.yml CHRONOLOG_COMPOSE_RUNNER=cluster-test-runner \
	  CHRONOLOG_COMPOSE_PROJECT=chronolog-compose-cluster-test docker/compose-test.sh

$(VENV)/.installed-bench: pyproject.toml setup.py protocol/_fastscan.c | $(BIN)/python build-deps
	$(BIN)/pip install -q -e '.[test,bench]'
	touch $@

# Side-by-side benchmark suite, chronolog vs Tansu and Kafka 4.1.1 (from kafka-jvm's jars):
# bench/results/bench.json + bench.png and a table. BENCH_ARGS=--quick for a short development run
# (bench/results/bench-quick.json); BENCH_ARGS=--brokers chronolog,kafka for a subset.
bench: $(VENV)/.installed-bench kafka-jvm
	$(BIN)/python bench/run_all.py $(BENCH_ARGS)

# Spark (pyspark_chronolog, pipeline/): per-key counts and bytes per minute over the last hour of
# PIPELINE_TOPIC on the broker from `make run`, written to the topic <topic>-per-minute and to
# build/pipeline/<topic>-per-minute (Parquet). `make pipeline-seed` first produces demo data into it.
PIPELINE_TOPIC ?= clicks
PIPELINE_BOOTSTRAP ?= 127.0.0.1:9092
# chronolog (pyspark_chronolog) or kafka (Spark's own Kafka source, jars from `make spark-kafka`)
PIPELINE_SOURCE ?= chronolog
.PHONY: pipeline pipeline-seed bench-spark bench-cleaner bench-commit-latency bench-transactions bench-idle-wait bench-isolation bench-scale bench-produce-path bench-thread-handoff bench-worker-wait bench-processes bench-metadata-stall bench-quotas soak

pipeline: $(VENV)/.installed-test spark-kafka
	$(BIN)/python -m pipeline.window_counts --bootstrap $(PIPELINE_BOOTSTRAP) --topic $(PIPELINE_TOPIC) \
	  --source $(PIPELINE_SOURCE) \
	  --last-minutes 60

pipeline-seed: $(VENV)/.installed-test
	$(BIN)/python -m pipeline.seed --bootstrap $(PIPELINE_BOOTSTRAP) --topic $(PIPELINE_TOPIC)

# Spark read throughput (1,000,000 messages, own broker process): bench/results/spark.json.
bench-spark: $(VENV)/.installed-test
	$(BIN)/python bench/bench_spark.py

# Log cleaner throughput and memory for a 10^6-key log: bench/results/cleaner.json.
bench-cleaner: $(VENV)/.installed-test
	$(BIN)/python bench/bench_cleaner.py

# Transactional produce (a commit every 100 and every 10,000 messages) on chronolog, Kafka 4.1.1
# and Tansu side by side: bench/results/transactions.json (also part of make bench).
bench-transactions: $(VENV)/.installed-bench kafka-jvm
	$(BIN)/python bench/bench_transactions.py

# A minute under a 1 MB/s client quota (confluent-kafka producer and consumer, Kafka's Java
# producer) on chronolog and Kafka 4.1.1 beside it: bench/results/quotas.json.
bench-quotas: $(VENV)/.installed-test kafka-jvm
	$(BIN)/python bench/bench_quotas.py

# A synchronous offset commit against an acks=all produce in a 3-broker cluster (ZooKeeper and
# brokers on this machine, offsets at replication factor 3): bench/results/commit_latency.json.
bench-commit-latency: $(VENV)/.installed-test
	$(BIN)/python bench/bench_commit_latency.py

# A lone lz4 Produce request's CPU by the pause before it: chronolog, Tansu and two Python floors
# (also run by `make bench`): bench/results/idle_wait.json.
bench-idle-wait: $(VENV)/.installed-bench
	$(BIN)/python bench/bench_idle_wait.py

# A well-behaved client's produce-to-consume p99, quiet and beside 20 Fetch v2 readers (data
# down-converted), 200 slowloris connections and 50 MB zstd batches, with the broker's CPU
# (issue #33; about 4 minutes, so not part of make bench): bench/results/isolation.json.
bench-isolation: $(VENV)/.installed-bench
	$(BIN)/python bench/bench_isolation.py

# 10,000 partitions (100 topics x 100) and 1,000 producer connections over them against one
# partition's throughput, plus creation time, memory per partition, Metadata latency and restart
# (issue #33; about 5 minutes, so not part of make bench): bench/results/scale.json.
# BENCH_ARGS=--quick for a short run, --profile for py-spy under load (scale-profile.json).
bench-scale: $(VENV)/.installed-bench
	$(BIN)/python bench/bench_scale.py $(BENCH_ARGS)

# The Produce handler's CPU a batch, in-process over 1,000 partitions (issue #33: a batch's fixed
# cost binds a wide load; about a minute): bench/results/produce_path.json. BENCH_ARGS=--repo DIR
# --label NAME measures another checkout, --records 1 --per-request 100 tiny batches,
# --instructions counts them (valgrind), --instructions --broker a broker process's a request.
bench-produce-path: $(VENV)/.installed-bench
	$(BIN)/python bench/bench_produce_path.py $(BENCH_ARGS)

# A step handed to a worker thread, with the event loop idle and busy, and a thread's wait for the
# GIL beside a busy main thread (issue #33: where the GIL binds; about a minute):
# bench/results/thread_handoff.json.
bench-thread-handoff: $(VENV)/.installed-bench
	$(BIN)/python bench/bench_thread_handoff.py $(BENCH_ARGS)

# A produce whose append runs in a worker thread (flush.messages=1) beside a plain one, quiet and
# while a load generator saturates the event loop (issue #33; under a minute):
# bench/results/worker_wait.json. BENCH_ARGS=--repo DIR --label NAME measures another checkout.
bench-worker-wait: $(VENV)/.installed-bench
	$(BIN)/python bench/bench_worker_wait.py $(BENCH_ARGS)

# make bench's 100 partitions x 10 producers against one broker and against two brokers of a
# ZooKeeper cluster on this machine, rounds alternated (issue #33: would several processes win?;
# about 3 minutes): bench/results/processes.json.
bench-processes: $(VENV)/.installed-bench zookeeper
	$(BIN)/python bench/bench_processes.py $(BENCH_ARGS)

# A probe's round trips beside answers listing 10,000 partitions: Metadata, DescribeLogDirs, /metrics
# scrapes and the console's topics page (issue #33: garbage-collector pauses and each answer's own
# cost on the event loop; about two minutes): bench/results/metadata_stall.json.
bench-metadata-stall: $(VENV)/.installed-bench
	$(BIN)/python bench/bench_metadata_stall.py $(BENCH_ARGS)

# Soak (bench/soak.py, not part of `make test`): kill -9, SIGTERM and, as root, a full tmpfs under
# the log dir, at random moments under acks=all producers, for SOAK_SECONDS; checks after every
# fault and writes bench/results/soak.json; exits 1 when a message was lost or a check failed.
SOAK_SECONDS ?= 240
soak: $(VENV)/.installed-test
	$(BIN)/python bench/soak.py --seconds $(SOAK_SECONDS)

# librdkafka's own test suite against chronolog (not part of `make test`: the build takes about
# 6 minutes on two cores and the run longer). librdkafka 2.15.1's source with its tests/ is the copy
# npm's @confluentinc/kafka-javascript 1.10.1 bundles in deps/librdkafka (GitHub's tarball would do
# as well; this one is checksummed here). 2.15.1 rather than crates.io's newest (2.12.1, in
# rdkafka-sys 4.10.0): 2.12.1 reads magic-1 messages in a flexible Fetch answer wrongly (test 0092).
# tests/suites/librdkafka_suite.py starts chronolog (one broker, then three on ZooKeeper),
# runs librdkafka's test-runner against each and writes build/librdkafka-results.json.
# LIBRDKAFKA_TESTS=0011,0055 narrows the run; LIBRDKAFKA_ARGS passes more options to the runner.
LIBRDKAFKA_VERSION := 2.15.1
LIBRDKAFKA_TARBALL := kafka-javascript-1.10.1.tgz
LIBRDKAFKA_TARBALL_SHA256 := ada7d703bb1d3237e2292bfabf438d663b6160c9f1ac2a2406b5dc4257c81b66
LIBRDKAFKA_DIR := build/librdkafka-$(LIBRDKAFKA_VERSION)
# A Kafka installation's layout (bin/ scripts, libs/ jars) over build/jvm's Kafka 4.1.1 jars, for the
# tests that run Kafka's tools ($$KAFKA_PATH/bin/kafka-topics.sh ...) or its Java clients
# (tests/java/run-class.sh). Each script runs the main class Kafka 4.1.1's own script runs.
KAFKA_PATH_DIR := build/kafka-path
KAFKA_PATH_SCRIPTS := kafka-topics=org.apache.kafka.tools.TopicCommand \
  kafka-configs=kafka.admin.ConfigCommand kafka-acls=org.apache.kafka.tools.AclCommand \
  kafka-consumer-groups=org.apache.kafka.tools.consumer.group.ConsumerGroupCommand \
  kafka-console-producer=org.apache.kafka.tools.ConsoleProducer \
  kafka-console-consumer=org.apache.kafka.tools.consumer.ConsoleConsumer
LIBRDKAFKA_TESTS ?=
LIBRDKAFKA_ARGS ?=
.PHONY: test-librdkafka librdkafka kafka-path

librdkafka: $(LIBRDKAFKA_DIR)/.built

$(LIBRDKAFKA_DIR)/.built:
	@command -v g++ >/dev/null || { echo "installing build-essential from Debian packages"; \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq --no-install-recommends build-essential >/dev/null; }
	mkdir -p build
	[ -f build/$(LIBRDKAFKA_TARBALL) ] || { curl -fsSL -o build/$(LIBRDKAFKA_TARBALL).part \
	  https://registry.npmjs.org/@confluentinc/kafka-javascript/-/$(LIBRDKAFKA_TARBALL) \
	  && mv build/$(LIBRDKAFKA_TARBALL).part build/$(LIBRDKAFKA_TARBALL); }
	echo "$(LIBRDKAFKA_TARBALL_SHA256)  build/$(LIBRDKAFKA_TARBALL)" | sha256sum -c --quiet
	rm -rf $(LIBRDKAFKA_DIR) && mkdir -p $(LIBRDKAFKA_DIR)
	tar -xzf build/$(LIBRDKAFKA_TARBALL) -C $(LIBRDKAFKA_DIR) --strip-components=3 \
	  package/deps/librdkafka
	grep -q 'RD_KAFKA_VERSION 0x020f01ff' $(LIBRDKAFKA_DIR)/src/rdkafka.h
	cd $(LIBRDKAFKA_DIR) && ./configure --no-download --disable-gssapi --disable-curl >/dev/null
	$(MAKE) -C $(LIBRDKAFKA_DIR) -j2 libs >/dev/null
	$(MAKE) -C $(LIBRDKAFKA_DIR)/tests -j2 build >/dev/null
	touch $@

kafka-path: $(KAFKA_PATH_DIR)/.installed

$(KAFKA_PATH_DIR)/.installed: $(KAFKA_JVM_STAMP)
	rm -rf $(KAFKA_PATH_DIR) && mkdir -p $(KAFKA_PATH_DIR)/bin $(KAFKA_PATH_DIR)/libs
	ln -s $(abspath build/jvm/lib)/*.jar $(KAFKA_PATH_DIR)/libs/
	printf '#!/bin/sh\n# Kafka'"'"'s kafka-run-class.sh: the class, with $$CLASSPATH before the jars.\nexec java $${KAFKA_HEAP_OPTS:--Xmx512M} -cp "$${CLASSPATH:+$$CLASSPATH:}$$(dirname "$$0")/../libs/*" "$$@"\n' \
	  > $(KAFKA_PATH_DIR)/bin/kafka-run-class.sh
	for pair in $(KAFKA_PATH_SCRIPTS); do \
	  printf '#!/bin/sh\nexec "$$(dirname "$$0")/kafka-run-class.sh" %s "$$@"\n' "$${pair#*=}" \
	    > $(KAFKA_PATH_DIR)/bin/$${pair%%=*}.sh; done
	chmod +x $(KAFKA_PATH_DIR)/bin/*.sh
	touch $@

test-librdkafka: $(VENV)/.installed-test zookeeper $(LIBRDKAFKA_DIR)/.built $(KAFKA_PATH_DIR)/.installed
	KAFKA_PATH=$(abspath $(KAFKA_PATH_DIR)) $(MAKE) -C $(LIBRDKAFKA_DIR)/tests/java -s
	$(BIN)/python -m tests.suites.librdkafka_suite --librdkafka $(LIBRDKAFKA_DIR) \
	  --kafka-path $(KAFKA_PATH_DIR) $(if $(LIBRDKAFKA_TESTS),--tests $(LIBRDKAFKA_TESTS)) $(LIBRDKAFKA_ARGS)
