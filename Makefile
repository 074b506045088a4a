# watermill-outbox: `make test` is THE test command (README.md).
#
# Test servers: the DSNs below default to this machine's local services, which
# scripts/services starts when needed. Each default applies only when the variable is
# unset; set one to another server to use that one, or to "" to skip its tests:
#
#   OUTBOX_TEST_POSTGRES_DSN='postgres://postgres@db:5432/test?sslmode=disable' make test
#   OUTBOX_TEST_MYSQL_DSN= make test        # MySQL tests skip
#
# OUTBOX_TEST_REQUIRE=mysql,postgres,amqp turns those skips into failures (CI does that).
# The wake-up tests over brokers (wakeup/brokertest, a module of its own) use RabbitMQ
# through OUTBOX_TEST_AMQP_URL, and NATS and Redis Streams when OUTBOX_TEST_NATS_URL /
# OUTBOX_TEST_REDIS_ADDR are set, e.g.
#   OUTBOX_TEST_NATS_URL=nats://127.0.0.1:4222 OUTBOX_TEST_REDIS_ADDR=127.0.0.1:6379 make test

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := test

# Go may not be on a non-login shell's PATH.
export PATH := $(PATH):/usr/local/go/bin
GO ?= go

OUTBOX_TEST_MYSQL_DSN ?= root@tcp(127.0.0.1:3306)/test
OUTBOX_TEST_POSTGRES_DSN ?= postgres://postgres@127.0.0.1:5432/test?sslmode=disable
OUTBOX_TEST_AMQP_URL ?= amqp://guest:guest@127.0.0.1:5672/
export OUTBOX_TEST_MYSQL_DSN OUTBOX_TEST_POSTGRES_DSN OUTBOX_TEST_AMQP_URL

# Extra flags for go test, e.g. GOTESTFLAGS=-count=1 (CI) or GOTESTFLAGS='-run Lane -v'.
GOTESTFLAGS ?=
# Extra flags for the benchmark harness, e.g. BENCHFLAGS='-db postgres -runs 5'.
BENCHFLAGS ?=
# How long `make fuzz` runs each fuzz target.
FUZZTIME ?= 30s

# scripts/services starts only the services whose DSN points at this machine.
local = $(or $(findstring 127.0.0.1,$(1)),$(findstring localhost,$(1)))
SERVICES := $(if $(call local,$(OUTBOX_TEST_MYSQL_DSN)),mysql) \
	$(if $(call local,$(OUTBOX_TEST_POSTGRES_DSN)),postgres) \
	$(if $(call local,$(OUTBOX_TEST_AMQP_URL)),amqp)

.PHONY: test test-short vet examples bench bench-short fuzz services demo help

## test: go vet, build the examples, then go test -race ./... against the local services
test: services vet examples
	$(GO) test -race $(GOTESTFLAGS) ./...
	cd wakeup/brokertest && $(GO) test -race $(GOTESTFLAGS) ./...
	cd benchmarks && $(GO) test $(GOTESTFLAGS) ./...

## test-short: go test -short ./... (no race detector): the quick loop while editing
test-short: services
	$(GO) test -short $(GOTESTFLAGS) ./...

vet:
	$(GO) vet ./...

# Every _examples/*/ directory builds: with its own go.mod as its own module, otherwise
# as part of this module (`./...` skips directories starting with "_").
## examples: build (and vet) every _examples/*/ directory; nothing to do when there are none
examples:
	@for d in _examples/*/; do \
		[ -d "$$d" ] || continue; \
		if [ -f "$$d/go.mod" ]; then \
			echo "examples: $$d (own module)"; \
			(cd "$$d" && $(GO) vet ./... && $(GO) build -o /dev/null ./...) || exit 1; \
		else \
			echo "examples: $$d"; \
			{ $(GO) vet "./$${d}..." && $(GO) build -o /dev/null "./$${d}..."; } || exit 1; \
		fi; \
	done

## bench: the comparison harness (benchmarks/, its own module), full counts, MariaDB and PostgreSQL
bench: services
	cd benchmarks && $(GO) run ./cmd/outboxbench $(BENCHFLAGS)

## bench-short: the same harness with small counts (a few minutes; `make test` runs it too)
bench-short: services
	cd benchmarks && $(GO) run ./cmd/outboxbench -short $(BENCHFLAGS)

## fuzz: run every fuzz target for FUZZTIME (default 30s) each
fuzz:
	@for dir in $$(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -r -n1 dirname | sort -u); do \
		targets=$$($(GO) test -list '^Fuzz' "$$dir" | { grep '^Fuzz' || true; }) || exit 1; \
		for target in $$targets; do \
			echo "fuzz: $$dir $$target for $(FUZZTIME)"; \
			$(GO) test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) "$$dir" || exit 1; \
		done; \
	done

## services: start (or reuse) the local MariaDB, PostgreSQL and RabbitMQ
services:
	@$(if $(strip $(SERVICES)),scripts/services $(SERVICES),echo "services: no DSN points at this machine, nothing to start")

## demo: the quickstart: start the local MariaDB if needed, then go run ./_examples/quickstart
# DEMOFLAGS passes flags to it and DEMO_SERVICES names what scripts/services starts, e.g.
#   make demo DEMOFLAGS='-db postgres -broker amqp' DEMO_SERVICES='postgres amqp'
DEMOFLAGS ?=
DEMO_SERVICES ?= mysql
demo:
	@$(if $(strip $(DEMO_SERVICES)),scripts/services $(DEMO_SERVICES),true)
	$(GO) run ./_examples/quickstart $(DEMOFLAGS)

## help: list the targets
help:
	@sed -n 's/^## //p' $(MAKEFILE_LIST)

# ---------------------------------------------------------------------------------------
# Forwarder chaos tests and benchmarks (forwarder/e2e_*_test.go, forwarder/bench_*_test.go).
.PHONY: chaos bench-forwarder

## chaos: forwarder end-to-end/crash/chaos tests at full size, then the MariaDB restart variant (it stops and starts the LOCAL MariaDB server: never while others use it)
chaos: services
	OUTBOX_TEST_FULL=1 $(GO) test -count=1 -timeout 30m -v -run 'TestE2E_|TestPubSubUniversal' $(GOTESTFLAGS) ./forwarder/
	OUTBOX_TEST_FULL=1 OUTBOX_CHAOS_RESTART=1 $(GO) test -count=1 -timeout 10m -v -run '^TestE2E_DatabaseConnectionsKilled$$' $(GOTESTFLAGS) ./forwarder/

## bench-forwarder: forwarder benchmarks with their side-by-side ratios, medians of OUTBOX_BENCH_ROUNDS (default 3) interleaved rounds (OUTBOX_BENCH_1M=1 adds the 1,000,000-row memory run)
OUTBOX_BENCH_ROUNDS ?= 3
bench-forwarder: services
	OUTBOX_BENCH_ROUNDS=$(OUTBOX_BENCH_ROUNDS) $(GO) test -count=1 -timeout 90m -run '^$$' -bench . -benchtime=1x $(GOTESTFLAGS) ./forwarder/
