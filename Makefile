# The delivery ledger. `make help` lists the targets.
GO       ?= go
PROMTOOL ?= promtool
BIN      := bin/ledger
TEST_DB  ?= ledger_test

.PHONY: help build run test lint alerts services bench fuzz

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

build: ## build bin/ledger
	$(GO) build -o $(BIN) ./cmd/ledger

run: build ## start PostgreSQL and RabbitMQ if needed, create and migrate the database, serve all roles
	scripts/run.sh

services: ## make sure PostgreSQL and RabbitMQ are up and the test database exists
	scripts/services.sh $(TEST_DB)

# lint also holds docs/openapi.yaml to generated clients (scripts/openapi.sh): redocly lint, and the
# committed Go client (cmd/internal/apiclient, whose test go test runs) regenerated and compared.
lint: ## go vet, gofmt, and the rule that domain/ imports only the standard library
	$(GO) vet ./...
	@test -z "$$(gofmt -l .)" || { echo "gofmt would change:"; gofmt -l .; exit 1; }
	@bad=$$($(GO) list -f '{{join .Imports "\n"}}{{"\n"}}{{join .TestImports "\n"}}' ./domain/ | grep -E '^[^/]+\.[^/]+/' | grep -v '^$$' || true); \
	if [ -n "$$bad" ]; then echo "domain/ imports outside the standard library: $$bad"; exit 1; fi
	scripts/openapi.sh lint
	scripts/openapi.sh check

alerts: ## check deploy/prometheus (rules, config) and run the alerting rules' unit tests
	$(PROMTOOL) check rules deploy/prometheus/alerts.yaml
	$(PROMTOOL) check config deploy/prometheus/prometheus.yml
	$(PROMTOOL) test rules deploy/prometheus/alerts_test.yaml

# The end-to-end tests that run a second time on quorum queues (LEDGER_TEST_AMQP_QUEUE_TYPE=quorum).
QUORUM_TESTS := TestEndToEnd|TestDuplicateAMQPMessage|TestTransientFailures|TestPermanentFailure|TestRetryAfter|TestExhaustedAttempts|TestLongDelay|TestPanickingAdapter|TestLostBrokerMessage|TestReplayedDeadDelivery|TestDeferralWaits|TestChannelSchedule|TestOneTrace|TestQuorumTopology

test: services lint alerts ## the whole test suite against the real PostgreSQL and RabbitMQ, the end-to-end tests again on quorum queues, then a short fuzz run
	$(GO) test -race -count=1 -timeout 9m ./...
	LEDGER_TEST_AMQP_QUEUE_TYPE=quorum $(GO) test -race -count=1 -timeout 5m -run '$(QUORUM_TESTS)' ./cmd/internal/app/ ./adapters/amqp/
	scripts/fuzz.sh 30000x

fuzz: ## run every fuzz target for FUZZTIME each (default 60s)
	scripts/fuzz.sh $(or $(FUZZTIME),60s)

bench: build services ## the benchmark: raw baselines and the ledger, in one run (bench/results/)
	scripts/services.sh --statements ledger
	$(BIN) bench --out bench/results/latest.json $(BENCH_FLAGS)

SOAK_DELIVERIES ?= 2000

.PHONY: soak soak-short soak-cluster soak-pg-failover

soak: build services ## crash soak: webhooks and SMS; kills every role repeatedly, restarts RabbitMQ, kills an SMS provider; last line lost=N duplicates=N unknown=N
	SOAK_DELIVERIES=$(SOAK_DELIVERIES) $(GO) run ./cmd/soak --ledger $(BIN) $(SOAK_FLAGS)

soak-short: build services ## the crash soak in short for CI: 300 deliveries (a fifth SMS) over 30s, a kill every 500ms; about a minute
	SOAK_DELIVERIES=300 $(GO) run ./cmd/soak --ledger $(BIN) --kill-every 500ms --rate 10 --burst 50 --timeout 3m $(SOAK_FLAGS)

soak-cluster: build services ## the crash soak on a 3-node RabbitMQ cluster (scripts/rabbitmq-cluster.sh, ports 5681-5683) with quorum queues; the node leading the work queue is SIGKILLed halfway and restarted
	scripts/rabbitmq-cluster.sh start
	SOAK_DELIVERIES=$(SOAK_DELIVERIES) $(GO) run ./cmd/soak --ledger $(BIN) --cluster scripts/rabbitmq-cluster.sh \
		--amqp-url "$$(scripts/rabbitmq-cluster.sh urls)" $(SOAK_FLAGS); rc=$$?; scripts/rabbitmq-cluster.sh stop; exit $$rc

soak-pg-failover: build services ## the crash soak on a PostgreSQL primary and synchronous standby (scripts/pg-failover.sh, ports 5442-5443); two fifths in the primary is killed and the standby promoted (PG_FAILOVER_MODE=--async: asynchronous, to see what it loses)
	scripts/pg-failover.sh start $(PG_FAILOVER_MODE)
	SOAK_DELIVERIES=$(SOAK_DELIVERIES) $(GO) run ./cmd/soak --ledger $(BIN) --pg-failover scripts/pg-failover.sh \
		--database-url "$$(scripts/pg-failover.sh url ledger_soak)" $(SOAK_FLAGS); rc=$$?; scripts/pg-failover.sh stop; exit $$rc
