//go:build race

package examplestest

// raceEnabled: `go test -race` (as `make test` runs) builds the examples with the race
// detector too, so their runs check the library's concurrency under real use.
const raceEnabled = true
