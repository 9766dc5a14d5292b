# The delivery ledger. `make help` lists the targets.
GO      ?= go
BIN     := bin/ledger
TEST_DB ?= ledger_test

.PHONY: help build run test lint services bench

help: ## list the targets
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

build: ## build bin/ledger
	$(GO) build -o $(BIN) ./cmd/ledger

run: build ## start PostgreSQL and RabbitMQ if needed, create and migrate the database, serve all roles
	scripts/run.sh

services: ## make sure PostgreSQL and RabbitMQ are up and the test database exists
	scripts/services.sh $(TEST_DB)

lint: ## go vet, gofmt, and the rule that domain/ imports only the standard library
	$(GO) vet ./...
	@test -z "$$(gofmt -l .)" || { echo "gofmt would change:"; gofmt -l .; exit 1; }
	@bad=$$($(GO) list -f '{{join .Imports "\n"}}{{"\n"}}{{join .TestImports "\n"}}' ./domain/ | grep -E '^[^/]+\.[^/]+/' | grep -v '^$$' || true); \
	if [ -n "$$bad" ]; then echo "domain/ imports outside the standard library: $$bad"; exit 1; fi

test: services lint ## the whole test suite against the real PostgreSQL and RabbitMQ
	$(GO) test -race -count=1 -timeout 9m ./...

bench: build services ## the benchmark: raw baselines and the ledger, in one run (bench/results/)
	scripts/services.sh ledger
	$(BIN) bench --out bench/results/latest.json $(BENCH_FLAGS)
