# fencegate: `make help` lists the targets.
SHELL := /bin/bash
PG := deploy/dev/pg.sh
PROM := deploy/dev/prom.sh
# HAProxy for the balanced-replicas test and loadtest --balancer haproxy.
HAPROXY := deploy/dev/haproxy.sh
# Apache Kafka 4.4 from Maven Central: the single broker every landing is
# judged on, and the test's own brokers and three-node clusters.
KAFKA := deploy/dev/kafka.sh
# Packaging checks without a container engine or cluster (compose, systemd, k8s schemas).
LINT_DEPLOY := deploy/check/lint-deploy.sh
# The dependency scan (govulncheck; says NOT SCANNED when it has no database).
VULNCHECK := deploy/check/vulncheck.sh
GO ?= go
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
# The OpenAPI linter (npm; Debian: apt-get install nodejs npm).
REDOCLY := @redocly/cli@2.77.0
# The time limit of one package's tests (the gateway's, the longest, took 11 min
# on two cores loaded by other work); CI allows 90 minutes for the whole run.
TEST_TIMEOUT ?= 30m

.PHONY: vulncheck lint-deploy help test test-python test-python-fuzz test-external lint run run-kafka build bench fuzz loadtest loadtest-freeze pg-start pg-stop kafka-start kafka-cluster kafka-stop kafka-reset chaos-kafka loadtest-kafka-cluster loadtest-kafka-cluster-short alerts

help: ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "} \
		{t[NR] = $$1; d[NR] = $$2; if (length($$1) > w) w = length($$1)} \
		END {for (i = 1; i <= NR; i++) printf "  %-" w "s  %s\n", t[i], d[i]}'

build: ## build bin/fencegate
	$(GO) build -o bin/fencegate ./cmd/fencegate

test: ## run the whole suite with -race: on the embedded broker, then the Kafka-facing packages again on Apache Kafka (installs and starts the throwaway Postgres and Apache Kafka, installs Prometheus and HAProxy, tests the alert rules)
	@if [ -z "$$FENCEGATE_TEST_DATABASE_URL" ]; then $(PG) start; fi
	@$(KAFKA) start
	@$(PROM) check
	@$(HAPROXY) install
	@$(LINT_DEPLOY)
	FENCEGATE_TEST_DATABASE_URL="$${FENCEGATE_TEST_DATABASE_URL:-$$($(PG) url)}" $(APACHE_ENV) \
		$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...
	FENCEGATE_TEST_DATABASE_URL="$${FENCEGATE_TEST_DATABASE_URL:-$$($(PG) url)}" $(APACHE_ENV) \
		FENCEGATE_TEST_KAFKA_BROKERS="$$($(KAFKA) url)" $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(EXTERNAL_PKGS)
	cd client && $(GO) test -race -count=1 ./... # the SDK is its own module: ./... above does not enter it
	@$(MAKE) --no-print-directory test-python

# The Python SDK's checks (deploy/dev/py.sh: its venv, never system-wide).
PY := deploy/dev/py.sh

test-python: ## the Python SDK: venv, mypy --strict, pytest against fencegate dev (the shared answer vectors, fencedb with the Go helper), the wheel, schemathesis (10 cases per operation)
	@if [ -z "$$FENCEGATE_TEST_DATABASE_URL" ]; then $(PG) start; fi
	$(PY) test 10

test-python-fuzz: ## schemathesis against fencegate dev, longer (SCHEMATHESIS_CASES, default 200 per operation)
	@if [ -z "$$FENCEGATE_TEST_DATABASE_URL" ]; then $(PG) start; fi
	$(PY) fuzz $${SCHEMATHESIS_CASES:-200}

# The shared Apache Kafka broker of make test (kafkatest.StartReal) and its
# log, shown when a test finds it dead.
APACHE_ENV = FENCEGATE_TEST_APACHE_BROKERS="$$($(KAFKA) url)" FENCEGATE_TEST_APACHE_LOG="$$($(KAFKA) log)"

# The packages whose tests run against an external Kafka (make test-external),
# one package at a time (-p 1): every test shares the one cluster.
EXTERNAL_PKGS := ./kafkaconn ./gateway ./materializer ./sdktest ./loadtest

test-external: ## release check: the tests that need no fault injection, against the Kafka of FENCEGATE_TEST_KAFKA_* (RUNBOOK, "Release check"); log in test-external.log
	@if [ -z "$$FENCEGATE_TEST_KAFKA_BROKERS" ]; then \
		echo "make test-external: FENCEGATE_TEST_KAFKA_BROKERS is not set."; \
		echo "usage: FENCEGATE_TEST_KAFKA_BROKERS=host:port [FENCEGATE_TEST_KAFKA_SECURITY_PROTOCOL=SASL_SSL FENCEGATE_TEST_KAFKA_SASL_MECHANISM=...";\
		echo "       FENCEGATE_TEST_KAFKA_SASL_USER=... FENCEGATE_TEST_KAFKA_SASL_PASSWORD_FILE=... FENCEGATE_TEST_KAFKA_CA_FILE=...]"; \
		echo "       [FENCEGATE_TEST_TOPIC_PREFIX=fencegate-test.] [FENCEGATE_TEST_KAFKA_WORKER_SASL_USER=... FENCEGATE_TEST_KAFKA_WORKER_SASL_PASSWORD_FILE=...] make test-external"; \
		echo "(docs/RUNBOOK.md, \"Release check against your own cluster\")"; exit 2; fi
	@if [ -z "$$FENCEGATE_TEST_DATABASE_URL" ]; then $(PG) start; fi
	@set -o pipefail; FENCEGATE_TEST_DATABASE_URL="$${FENCEGATE_TEST_DATABASE_URL:-$$($(PG) url)}" \
		$(GO) test -race -count=1 -v -p 1 -timeout $(TEST_TIMEOUT) $(EXTERNAL_PKGS) 2>&1 | tee test-external.log | grep -E '^(ok|FAIL|---|panic)|^\s+--- FAIL'; \
		rc=$$?; \
		echo "test-external: $$(grep -cE '^\s*--- PASS' test-external.log) passed, $$(grep -cE '^\s*--- SKIP' test-external.log) skipped, $$(grep -cE '^\s*--- FAIL' test-external.log) failed (test-external.log); skip reasons:"; \
		grep -oE '_test\.go:[0-9]+: needs .*' test-external.log | sed -E 's/^[^ ]+ //' | sort | uniq -c; \
		exit $$rc

lint: ## go vet, gofmt -l, staticcheck, the OpenAPI linter, the packaging checks (lint-deploy) and the dependency scan (vulncheck)
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) run $(STATICCHECK) ./...
	cd client && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...
	npx --yes $(REDOCLY) lint --config api/redocly.yaml api/openapi.yaml
	@$(LINT_DEPLOY)
	@$(VULNCHECK)

vulncheck: ## govulncheck over both modules, against a local copy of the Go vulnerability database (FENCEGATE_VULNDB=https://vuln.go.dev where reachable); report in vulncheck.log
	@$(VULNCHECK)

lint-deploy: ## packaging checks: docker-compose config, promtool, systemd-analyze, k8s schemas, TestDeploy (no engine, no cluster)
	@$(LINT_DEPLOY)

# Where `make bench` leaves the harness's efficiency reports.
BENCH_OUT ?= bin/bench

bench: build ## micro-benchmarks (throwaway Postgres, embedded broker), then the efficiency runs of BENCHMARKS-history.md into $(BENCH_OUT) (deploy/bench/efficiency.sh; PATCHED=1 adds the patched confluent-kafka-go's cold starts)
	@$(PG) start
	FENCEGATE_TEST_DATABASE_URL="$$($(PG) url)" $(GO) test -run '^$$' -bench . -benchmem ./...
	FG=bin/fencegate deploy/bench/efficiency.sh $(BENCH_OUT)

fuzz: ## run each fuzz target for 30s
	$(GO) test -run '^$$' -fuzz FuzzFM18 -fuzztime 30s ./txnmap
	$(GO) test -run '^$$' -fuzz FuzzFM19_DecodeProduce -fuzztime 30s ./gateway
	$(GO) test -run '^$$' -fuzz FuzzFM19_DecodeAcquire -fuzztime 30s ./gateway
	$(GO) test -run '^$$' -fuzz FuzzFM29_BinaryHeaders -fuzztime 30s ./gateway
	$(GO) test -run '^$$' -fuzz FuzzFM29_JSONHeaders -fuzztime 30s ./gateway
	$(GO) test -run '^$$' -fuzz FuzzRefusalExplainsInvalidJSON -fuzztime 30s ./gateway
	$(GO) test -run '^$$' -fuzz FuzzStampRoundTrip -fuzztime 30s ./barrier

# Flags of `fencegate dev` for `make run ARGS="--listen 127.0.0.1:9080"` (a
# command-line variable: an ARGS in the environment is ignored).
ARGS :=

run: ## the whole stack on embedded defaults (Postgres :54329, dev broker :9092, gateway :8080, materializer :8081); ARGS="..." passes flags to fencegate dev (go run ./cmd/fencegate dev -h lists them)
	@$(PG) start
	$(GO) run ./cmd/fencegate dev $(ARGS)

loadtest: ## default embedded load scenario (freeze + churn), reports in loadtest-report.{json,html}
	@$(PG) start
	$(GO) run ./cmd/fencegate loadtest --embedded --json loadtest-report.json --html loadtest-report.html

loadtest-freeze: ## two gateway replicas as processes, one frozen with SIGSTOP every 5s (FM25); every answer checked against the log
	@$(PG) start
	$(GO) run ./cmd/fencegate loadtest --embedded --freeze-replica-every 5s --duration 60s --direct=false --naive=false \
		--json loadtest-freeze-report.json --html loadtest-freeze-report.html

run-kafka: ## make run on Apache Kafka instead of the embedded broker (starts deploy/dev/kafka.sh's broker on 127.0.0.1:9192; the first start fetches Kafka with Maven)
	@$(PG) start
	@$(KAFKA) start
	$(GO) run ./cmd/fencegate dev --kafka-brokers "$$($(KAFKA) url)" $(ARGS)

ROUNDS ?= 5

chaos-kafka: ## the three-node Apache Kafka cluster under ROUNDS rounds of every broker fault (TestClusterFaultsUnderLoad's long form; ROUNDS=5)
	@$(PG) start
	FENCEGATE_TEST_DATABASE_URL="$$($(PG) url)" FENCEGATE_TEST_CLUSTER_ROUNDS=$(ROUNDS) \
		$(GO) test -race -count=1 -v -timeout 120m -run '^TestClusterFaultsUnderLoad$$' ./gateway | grep -E '^(=== RUN|--- |ok|FAIL|PASS)|cluster_test.go.*(round|history|answers)'

loadtest-kafka-cluster: ## fencegate loadtest on a three-node Apache Kafka cluster of its own: ROUNDS rounds of the six broker faults under load, with churn, a gateway replica frozen every 60s, the materializer and the trusted topic, the usual report and checks (ROUNDS=5; reports in loadtest-kafka-cluster.{json,html})
	@$(PG) start
	$(GO) run ./cmd/fencegate loadtest --embedded --kafka-cluster --database-url "$$($(PG) url)" \
		--broker-fault-every 5s --broker-fault-rounds $(ROUNDS) --duration 120m --ttl 20s \
		--leases 8 --batch-size 20 --record-size 256 --rate 5 --freeze-replica-every 60s --trusted \
		--direct=false --naive=false --bare-producers 0 \
		--json loadtest-kafka-cluster.json --html loadtest-kafka-cluster.html

loadtest-kafka-cluster-short: ## TestBrokerFaultsLoadtestShort alone: the long form's short test (a coordinator kill, a pause past the session; also in make test)
	@$(PG) start
	FENCEGATE_TEST_DATABASE_URL="$$($(PG) url)" \
		$(GO) test -race -count=1 -v -timeout 30m -run '^TestBrokerFaultsLoadtestShort$$' ./cmd/fencegate

pg-start: ## start the throwaway Postgres (127.0.0.1:54329)
	@$(PG) start

pg-stop: ## stop the throwaway Postgres
	@$(PG) stop

kafka-start: ## start the throwaway Apache Kafka broker (127.0.0.1:9192; deploy/dev/kafka.sh)
	@$(KAFKA) start

kafka-cluster: ## start the throwaway three-node Apache Kafka cluster (127.0.0.1:9292-9294)
	@$(KAFKA) cluster

kafka-stop: ## stop every throwaway Apache Kafka node
	@$(KAFKA) stop

kafka-reset: ## stop every throwaway Apache Kafka node and delete its data (the shared test broker's topics pile up; its restart loads them all)
	@$(KAFKA) reset

alerts: ## promtool check and unit tests of deploy/prometheus/alerts.yaml (installs Prometheus when missing)
	@$(PROM) check
