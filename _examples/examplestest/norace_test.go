//go:build !race

package examplestest

const raceEnabled = false
