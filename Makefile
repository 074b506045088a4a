# watermill-outbox: `make test` is THE test command (README.md).
#
# Test servers: the DSNs below default to this machine's local services, which
# scripts/services starts when needed. Each default applies only when the variable is
# unset; set one to another server to use that one, or to "" to skip its tests:
#
#   OUTBOX_TEST_POSTGRES_DSN='postgres://postgres@db:5432/test?sslmode=disable' make test
#   OUTBOX_TEST_MYSQL_DSN= make test        # MySQL tests skip
#
# OUTBOX_TEST_MYSQL_DSN is MariaDB; OUTBOX_TEST_MYSQL_ORACLE_DSN is Oracle MySQL, and when
# it is set `make test` runs every MySQL test a second time against it (test-mysql-oracle).
# The wake-up tests over brokers (wakeup/brokertest, a module of its own) use RabbitMQ
# (OUTBOX_TEST_AMQP_URL), NATS (OUTBOX_TEST_NATS_URL) and Redis Streams
# (OUTBOX_TEST_REDIS_ADDR).
#
# The dashboard's browser tests (dashboard/browsertest, a module of its own) drive
# Debian's headless Chromium (scripts/chromium installs it; OUTBOX_CHROMIUM names
# another); without one they skip.
#
# OUTBOX_TEST_REQUIRE=mysql,mysql-oracle,postgres,amqp,nats,redis,chromium turns those
# skips into failures (CI does that).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := test

# Go may not be on a non-login shell's PATH.
export PATH := $(PATH):/usr/local/go/bin
GO ?= go

OUTBOX_TEST_MYSQL_DSN ?= root@tcp(127.0.0.1:3306)/test
OUTBOX_TEST_MYSQL_ORACLE_DSN ?= root@tcp(127.0.0.1:3307)/test
OUTBOX_TEST_POSTGRES_DSN ?= postgres://postgres@127.0.0.1:5432/test?sslmode=disable
OUTBOX_TEST_AMQP_URL ?= amqp://guest:guest@127.0.0.1:5672/
OUTBOX_TEST_NATS_URL ?= nats://127.0.0.1:4222
OUTBOX_TEST_REDIS_ADDR ?= 127.0.0.1:6379
export OUTBOX_TEST_MYSQL_DSN OUTBOX_TEST_MYSQL_ORACLE_DSN OUTBOX_TEST_POSTGRES_DSN OUTBOX_TEST_AMQP_URL \
	OUTBOX_TEST_NATS_URL OUTBOX_TEST_REDIS_ADDR

# Extra flags for go test, e.g. GOTESTFLAGS=-count=1 (CI) or GOTESTFLAGS='-run Lane -v'.
GOTESTFLAGS ?=
# Extra flags for the benchmark harness, e.g. BENCHFLAGS='-db postgres -runs 5'.
BENCHFLAGS ?=
# How long `make fuzz` runs each fuzz target.
FUZZTIME ?= 30s

# scripts/services starts only the services whose DSN points at this machine.
local = $(or $(findstring 127.0.0.1,$(1)),$(findstring localhost,$(1)))
SERVICES := $(if $(call local,$(OUTBOX_TEST_MYSQL_DSN)),mysql) \
	$(if $(call local,$(OUTBOX_TEST_MYSQL_ORACLE_DSN)),mysql-oracle) \
	$(if $(call local,$(OUTBOX_TEST_POSTGRES_DSN)),postgres) \
	$(if $(call local,$(OUTBOX_TEST_AMQP_URL)),amqp) \
	$(if $(call local,$(OUTBOX_TEST_NATS_URL)),nats) \
	$(if $(call local,$(OUTBOX_TEST_REDIS_ADDR)),redis)

.PHONY: test test-modules test-mysql-oracle test-short vet examples bench bench-short fuzz services demo help screenshots

# The library is the root module; what needs more (brokers, Watermill components, the
# Prometheus client, the examples) lives in modules of its own, so that a user's go.mod
# gains none of it. Each is tested with -race; benchmarks (the harness's short run) without.
MODULES := . e2e _examples forwarder/prometheus inbox/prometheus otel wakeup/brokertest dashboard/browsertest

## test: go vet, build the examples, then go test -race in every module against the local services (MariaDB, PostgreSQL, RabbitMQ) and the harness's short run, then test-mysql-oracle
test: services vet examples
	OUTBOX_TEST_MYSQL_SERVER=mariadb $(MAKE) --no-print-directory test-modules
	@$(MAKE) --no-print-directory test-mysql-oracle

# test-modules: go test -race in each of MODULES, then the harness's short run.
test-modules:
	@for m in $(MODULES); do \
		echo "test: module $$m"; \
		(cd "$$m" && $(GO) test -race $(GOTESTFLAGS) ./...) || exit 1; \
	done
	cd benchmarks && $(GO) test $(GOTESTFLAGS) ./...

# The second pass: every test that talks to MySQL (conformance, dialect, publisher,
# forwarder, outboxctl, e2e, examples, the harness's short run) again, with
# OUTBOX_TEST_MYSQL_DSN pointed at Oracle MySQL. PostgreSQL's tests ran in the first pass.
ORACLE_REQUIRE := $(subst mysql-oracle,mysql,$(subst postgres,,$(OUTBOX_TEST_REQUIRE)))
## test-mysql-oracle: the tests of every module (and the harness's short run) against Oracle MySQL at OUTBOX_TEST_MYSQL_ORACLE_DSN
test-mysql-oracle:
	@if [[ -z "$$OUTBOX_TEST_MYSQL_ORACLE_DSN" ]]; then \
		if [[ ,$$OUTBOX_TEST_REQUIRE, == *,mysql-oracle,* ]]; then \
			echo "test-mysql-oracle: mysql-oracle is required (OUTBOX_TEST_REQUIRE) but OUTBOX_TEST_MYSQL_ORACLE_DSN is not set" >&2; exit 1; \
		fi; \
		echo "test-mysql-oracle: OUTBOX_TEST_MYSQL_ORACLE_DSN not set: skipping the Oracle MySQL pass"; exit 0; \
	fi; \
	echo "test-mysql-oracle: go test against Oracle MySQL at $$OUTBOX_TEST_MYSQL_ORACLE_DSN"; \
	OUTBOX_TEST_MYSQL_DSN="$$OUTBOX_TEST_MYSQL_ORACLE_DSN" OUTBOX_TEST_POSTGRES_DSN= \
		OUTBOX_TEST_MYSQL_SERVER=mysql OUTBOX_TEST_REQUIRE='$(ORACLE_REQUIRE)' \
		$(MAKE) --no-print-directory test-modules

## test-short: go test -short ./... (no race detector): the quick loop while editing
test-short: services
	$(GO) test -short $(GOTESTFLAGS) ./...

## vet: go vet in every module (benchmarks included)
vet:
	@for m in $(MODULES) benchmarks; do \
		echo "vet: module $$m"; \
		(cd "$$m" && $(GO) vet ./...) || exit 1; \
	done

## examples: build every program under _examples/ (a module of its own; its examplestest runs them in make test)
examples:
	cd _examples && $(GO) build -o /dev/null ./...

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

## screenshots: regenerate the dashboard's screenshots in docs/ (headless Chromium over the local PostgreSQL)
screenshots:
	scripts/services postgres
	OUTBOX_CHROMIUM="$$(scripts/chromium)" && export OUTBOX_CHROMIUM && \
		cd dashboard/browsertest && OUTBOX_SCREENSHOTS="$(CURDIR)/docs" OUTBOX_TEST_MYSQL_DSN= \
		$(GO) test -count=1 -run 'TestBrowser/postgres' .

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
	cd _examples && $(GO) run ./quickstart $(DEMOFLAGS)

## help: list the targets
help:
	@sed -n 's/^## //p' $(MAKEFILE_LIST)

# ---------------------------------------------------------------------------------------
# Forwarder chaos tests and benchmarks (forwarder/e2e_*_test.go, forwarder/bench_*_test.go).
.PHONY: chaos bench-forwarder

## chaos: forwarder end-to-end/crash/chaos tests at full size, then the restart variant on MariaDB and on Oracle MySQL (it stops and starts the LOCAL servers: never while others use them)
chaos: services
	OUTBOX_TEST_FULL=1 $(GO) test -count=1 -timeout 30m -v -run 'TestE2E_|TestPubSubUniversal' $(GOTESTFLAGS) ./forwarder/
	cd e2e && OUTBOX_TEST_FULL=1 $(GO) test -count=1 -timeout 30m -v -run 'TestE2E_' $(GOTESTFLAGS) ./...
	OUTBOX_TEST_FULL=1 OUTBOX_CHAOS_RESTART=1 $(GO) test -count=1 -timeout 10m -v -run '^TestE2E_DatabaseConnectionsKilled$$' $(GOTESTFLAGS) ./forwarder/
	@if [[ -n "$$OUTBOX_TEST_MYSQL_ORACLE_DSN" ]]; then \
		OUTBOX_TEST_MYSQL_DSN="$$OUTBOX_TEST_MYSQL_ORACLE_DSN" OUTBOX_TEST_POSTGRES_DSN= OUTBOX_TEST_FULL=1 $(GO) test -count=1 -timeout 30m -v -run 'TestE2E_' $(GOTESTFLAGS) ./forwarder/ && \
		OUTBOX_TEST_MYSQL_DSN="$$OUTBOX_TEST_MYSQL_ORACLE_DSN" OUTBOX_TEST_POSTGRES_DSN= OUTBOX_TEST_FULL=1 OUTBOX_CHAOS_RESTART=1 $(GO) test -count=1 -timeout 10m -v -run '^TestE2E_DatabaseConnectionsKilled$$' $(GOTESTFLAGS) ./forwarder/; \
	fi

## bench-forwarder: forwarder benchmarks with their side-by-side ratios, medians of OUTBOX_BENCH_ROUNDS (default 3) interleaved rounds (OUTBOX_BENCH_1M=1 adds the 1,000,000-row memory run)
OUTBOX_BENCH_ROUNDS ?= 3
bench-forwarder: services
	OUTBOX_BENCH_ROUNDS=$(OUTBOX_BENCH_ROUNDS) $(GO) test -count=1 -timeout 90m -run '^$$' -bench . -benchtime=1x $(GOTESTFLAGS) ./forwarder/
