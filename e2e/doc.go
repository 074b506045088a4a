// Package e2e holds the end-to-end tests that need more than the library: Watermill's
// components (cqrs) and real brokers. It is a module of its own, so that the library's
// go.mod requires none of what these tests use; `make test` runs it.
package e2e
