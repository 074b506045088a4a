// Package examplestest builds every program under _examples/ and runs those whose
// services exist here, checking that each exits 0 and prints its success line. It is a
// test-only package: Go skips directories starting with "_" in ./..., so the examples'
// own packages never run a test.
package examplestest
